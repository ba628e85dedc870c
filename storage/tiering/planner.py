"""Where remote segments begin and end: pure functions over offsets, batch spans and time.

The rules of this file (KIP-405 "Copy log segments to remote storage", Kafka's
``LogSegment.shouldRoll``):

- A partition is copied from just after the highest offset held by COPY_SEGMENT_FINISHED
  segments (or from the broker's log start), up to but excluding its last stable offset:
  nothing at or above the LSO is copied, and nothing finished is copied twice.
- A segment is a run of whole batches in offset order. It closes before the batch that would
  take it past ``segment.bytes``, before a batch whose max timestamp is more than
  ``segment.ms`` after that of the segment's first batch, and before a batch whose offset no
  longer fits the 32-bit relative offsets of Kafka's indexes.
- The last segment of a partition is copied only once it is closed anyway: it has reached
  ``segment.bytes``, or its first batch is older than ``segment.ms``. Otherwise it waits,
  like Kafka's active segment.

Fetch tasks read ``[start, end)`` windows of offsets; a window owns the batches whose base
offset lies inside it (the first window of a partition also owns a batch that straddles its
start, as happens when the broker's log start lies inside a batch). Windows only spread the
reading over cores: segment boundaries come from the batches, not from the windows.

Very small batches are read as *spans* (several consecutive batches of one leader epoch) so
that the plan stays small; a cut then falls on the span boundary before the batch where
Kafka would have cut, which keeps every rule above with a segment at most one span shorter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "BatchSpan",
    "CloseReason",
    "PlannedSegment",
    "cut_segments",
    "estimate_bytes",
    "may_close",
    "plan_windows",
]

MAX_RELATIVE_OFFSET = 2**31 - 1
"""Kafka's indexes store offsets relative to the segment's base offset as int32."""


class CloseReason(Enum):
    """Why a planned segment ended where it did."""

    SIZE = "segment.bytes"
    TIME = "segment.ms"
    OFFSETS = "relative offset overflow"
    AGE = "first batch older than segment.ms"
    FULL = "reached segment.bytes"


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSpan:
    """Consecutive whole batches that a fetch task read, as the planner sees them."""

    window: int
    """Index of the fetch window (and its spill file) holding the bytes."""
    position: int
    """Byte position of the first batch in that window's spill."""
    size: int
    base_offset: int
    last_offset: int
    first_max_timestamp: int
    """Max timestamp of the first batch: what Kafka's time-based roll measures from."""
    max_timestamp: int
    leader_epoch: int
    """Partition leader epoch of every batch in the span (-1 where the broker sets none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedSegment:
    """One remote segment to build from ``spans[first_span:end_span]``."""

    start_offset: int
    end_offset: int
    """Last offset of the last batch (inclusive, as in KIP-405's metadata)."""
    size: int
    max_timestamp: int
    first_span: int
    end_span: int
    closed_by: CloseReason


def plan_windows(
    *, start: int, end: int, estimated_bytes: int, max_task_bytes: int
) -> list[tuple[int, int]]:
    """Split the offsets ``[start, end)`` into windows of about ``max_task_bytes`` each.

    Windows are contiguous, non-empty and in offset order; there are as many as the estimated
    size needs (at least one, at most one per offset).

    :raises ValueError: for an empty range or a non-positive ``max_task_bytes``.
    """
    if end <= start:
        raise ValueError(f"empty offset range [{start}, {end})")
    if max_task_bytes < 1:
        raise ValueError("max_task_bytes must be positive")
    count = max(1, min(end - start, math.ceil(max(estimated_bytes, 0) / max_task_bytes)))
    bounds = [start + (end - start) * k // count for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def estimate_bytes(*, start: int, end: int, bytes_per_offset: float) -> int:
    """Expected size of the offsets ``[start, end)`` at ``bytes_per_offset``."""
    return max(0, math.ceil((end - start) * bytes_per_offset))


def may_close(
    *,
    estimated_bytes: int,
    first_max_timestamp: int | None,
    now_ms: int,
    segment_bytes: int,
    segment_ms: int,
) -> bool:
    """Whether data not yet copied may already hold a closed segment, so is worth reading.

    Below ``segment.bytes`` and younger than ``segment.ms`` nothing can close, and reading
    the partition would be wasted.
    """
    if estimated_bytes >= segment_bytes:
        return True
    return first_max_timestamp is not None and now_ms - first_max_timestamp > segment_ms


def cut_segments(
    spans: Sequence[BatchSpan],
    *,
    copy_start: int,
    segment_bytes: int,
    segment_ms: int,
    now_ms: int,
) -> list[PlannedSegment]:
    """The closed segments that ``spans`` (one partition, offset order, below the LSO) make.

    The first segment starts at ``copy_start`` even where the first batch begins earlier
    (the broker's log start inside a batch): offsets below it are not the partition's any
    more. Spans after the last closed segment are left for a later cycle.
    """
    segments: list[PlannedSegment] = []
    first = 0
    size = 0
    max_timestamp = -1
    for index, span in enumerate(spans):
        if index > first:
            reason = _roll_reason(spans[first], span, size, segment_bytes, segment_ms)
            if reason is not None:
                segments.append(
                    _segment(
                        spans,
                        start_offset=_start(spans, first, copy_start),
                        first=first,
                        end=index,
                        size=size,
                        max_timestamp=max_timestamp,
                        reason=reason,
                    )
                )
                first, size, max_timestamp = index, 0, -1
        size += span.size
        max_timestamp = max(max_timestamp, span.max_timestamp)
    if first < len(spans):
        if size >= segment_bytes:
            tail_reason: CloseReason | None = CloseReason.FULL
        elif now_ms - spans[first].first_max_timestamp > segment_ms:
            tail_reason = CloseReason.AGE
        else:
            tail_reason = None
        if tail_reason is not None:
            segments.append(
                _segment(
                    spans,
                    start_offset=_start(spans, first, copy_start),
                    first=first,
                    end=len(spans),
                    size=size,
                    max_timestamp=max_timestamp,
                    reason=tail_reason,
                )
            )
    return segments


def _start(spans: Sequence[BatchSpan], first: int, copy_start: int) -> int:
    return max(spans[first].base_offset, copy_start) if first == 0 else spans[first].base_offset


def _roll_reason(
    first: BatchSpan, span: BatchSpan, size: int, segment_bytes: int, segment_ms: int
) -> CloseReason | None:
    if size + span.size > segment_bytes:
        return CloseReason.SIZE
    if span.max_timestamp - first.first_max_timestamp > segment_ms:
        return CloseReason.TIME
    if span.last_offset - first.base_offset > MAX_RELATIVE_OFFSET:
        return CloseReason.OFFSETS
    return None


def _segment(
    spans: Sequence[BatchSpan],
    *,
    start_offset: int,
    first: int,
    end: int,
    size: int,
    max_timestamp: int,
    reason: CloseReason,
) -> PlannedSegment:
    return PlannedSegment(
        start_offset=start_offset,
        end_offset=spans[end - 1].last_offset,
        size=size,
        max_timestamp=max_timestamp,
        first_span=first,
        end_span=end,
        closed_by=reason,
    )
