"""Read whole batches from a remote segment, starting at the batch that holds an offset.

A remote read is a ranged GET of the segment's ``.log``; its latency dwarfs the cost of a
few more bytes, so the reader minimises round trips rather than bytes. The offset index
gives a position at most about ``index.interval.bytes`` (plus one batch) before the target's
batch; the first read covers that slack plus the caller's byte budget, and later reads
happen only when a batch straddles the end of what was read.

The result follows Kafka's ``LogSegment.read`` with ``minOneMessage``: batches from the one
containing the target offset (its ``last offset >= target``), as many whole batches as fit in
``max_bytes``, but always at least the first one, however large. Unlike Kafka, the result
never ends in a partial batch: the proxy hands it to clients as is.

:func:`locate_batches` is the sans-IO core (which bytes to return, or which bytes to read
next); :func:`read_batches` is the async loop around a ranged-read callable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocol.buffers import Buffers
from protocol.indexes.offset_index import OffsetIndex
from protocol.records import BATCH_HEADER_SIZE, batch_span

__all__ = [
    "DEFAULT_READ_AHEAD_BYTES",
    "BatchRange",
    "NeedBytes",
    "locate_batches",
    "read_batches",
]

DEFAULT_READ_AHEAD_BYTES = 8192
"""Bytes read beyond ``max_bytes`` on the first read: twice Kafka's default
``index.interval.bytes``, so the target's batch is almost always in the first window."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRange:
    """Segment positions ``[start, end)`` of the whole batches to return."""

    start: int
    end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NeedBytes:
    """Read ``[start, end)`` of the segment and ask again.

    ``start`` is the end of the current window (extend it) or a later position (the bytes in
    between are not needed: start a new window there). ``end`` is the most that can be
    useful; reading less only costs another round trip.
    """

    start: int
    end: int


def locate_batches(  # noqa: C901 (one scan with four exits; split, it would need shared state)
    window: bytes | bytearray | memoryview | Buffers,
    window_start: int,
    *,
    target_offset: int,
    max_bytes: int,
    segment_size: int,
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
) -> BatchRange | NeedBytes | None:
    """Decide what to return from ``window`` (segment bytes from ``window_start``).

    ``window_start`` must be a batch boundary at or before the target's batch (a position
    from the offset index). ``window`` may be in pieces (a read across chunks of the chunk
    cache): headers are read where they lie, and nothing is joined. ``None`` means the
    segment holds no batch ending at or after ``target_offset``. A partial batch at the
    segment's end is treated as its end. While the target's batch is still to be found, a
    :class:`NeedBytes` asks for ``read_ahead_bytes`` more than the budget, to scan past
    small batches in one read.

    :raises CorruptRecordBatchError: if a batch header in the window is invalid.
    :raises LegacyMessageFormatError: at a magic 0/1 message set.
    """
    window_end = window_start + len(window)
    position = window_start
    first: int | None = None
    while position + BATCH_HEADER_SIZE <= segment_size:
        if position + BATCH_HEADER_SIZE > window_end:
            if first is None:
                return NeedBytes(
                    start=max(position, window_end),
                    end=min(
                        segment_size, position + BATCH_HEADER_SIZE + max_bytes + read_ahead_bytes
                    ),
                )
            if position + BATCH_HEADER_SIZE - first > max_bytes:
                break
            return NeedBytes(start=window_end, end=min(segment_size, first + max_bytes))
        _base, last_offset, size = batch_span(window, position - window_start)
        batch_end = position + size
        if batch_end > segment_size:
            break
        if first is None:
            if last_offset < target_offset:
                position = batch_end
                continue
            first = position
            if batch_end > window_end:
                return NeedBytes(
                    start=window_end, end=min(segment_size, max(batch_end, first + max_bytes))
                )
        elif batch_end - first > max_bytes:
            break
        elif batch_end > window_end:
            return NeedBytes(start=window_end, end=min(segment_size, first + max_bytes))
        position = batch_end
    if first is None:
        return None
    return BatchRange(start=first, end=position)


async def read_batches(
    *,
    fetch: Callable[[int, int], Awaitable[bytes | memoryview | Buffers]],
    offset_index: OffsetIndex,
    target_offset: int,
    max_bytes: int,
    segment_size: int,
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
) -> memoryview | Buffers:
    """Whole batches from the one holding ``target_offset``, within ``max_bytes``.

    :param fetch: reads segment bytes ``[start, end)``; may return fewer at the object's end.
    :param segment_size: the ``.log`` size from the segment's metadata; no read goes beyond.
    :returns: the batches, or an empty view if the segment ends before ``target_offset``;
        a slice of what ``fetch`` returned whenever one read held them all (the usual
        case), so the records are not copied here (in pieces if ``fetch`` returned pieces).
    :raises ValueError: for a negative ``max_bytes``.
    :raises CorruptRecordBatchError: if the segment holds an invalid batch header.
    :raises LegacyMessageFormatError: at a magic 0/1 message set.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
    window_start = offset_index.lookup(target_offset).position
    if window_start >= segment_size:
        return memoryview(b"")
    window_end = min(
        segment_size, window_start + max(read_ahead_bytes + max_bytes, BATCH_HEADER_SIZE)
    )
    window = _window(await fetch(window_start, window_end))
    if len(window) < window_end - window_start:
        segment_size = window_start + len(window)
    while True:
        found = locate_batches(
            window,
            window_start,
            target_offset=target_offset,
            max_bytes=max_bytes,
            segment_size=segment_size,
            read_ahead_bytes=read_ahead_bytes,
        )
        if found is None:
            return memoryview(b"")
        if isinstance(found, BatchRange):
            return window[found.start - window_start : found.end - window_start]
        if found.start != window_start + len(window):
            window_start = found.start
        # Extending the window reads it again whole rather than joining the new bytes to
        # it: through the chunk cache that is views of its chunks, where a join would copy
        # (a batch larger than the first read does this on every read).
        window = _window(await fetch(window_start, found.end))
        if len(window) < found.end - window_start:
            segment_size = window_start + len(window)


def _window(data: bytes | memoryview | Buffers) -> memoryview | Buffers:
    """What ``fetch`` read, sliceable without a copy."""
    return data if isinstance(data, Buffers) else memoryview(data)
