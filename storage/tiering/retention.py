"""Which remote segments expire, and how far the broker's log start may advance: pure rules.

Remote retention follows Kafka's ``RemoteLogManager`` (KIP-405 "Handle expired remote
segments"): ``retention.ms`` and ``retention.bytes`` bound the *whole* log, remote and local.
Segments are examined oldest first and deletion stops at the first one that breaches neither
limit, so the remote log stays contiguous and its start only moves forward.

- Time: a segment expires when its max timestamp is at least ``retention.ms`` old (locally:
  more than ``local.retention.ms`` old, as Kafka's local cleaner compares).
- Size: with ``excess = whole log size - retention.bytes``, a segment expires while
  ``excess - its size >= 0`` (deleting it does not take the log below the limit), and
  ``excess`` shrinks by its size. The whole log is the remote segments plus the local bytes
  not yet tiered, each byte counted once.

Local retention (the broker's log start, moved with DeleteRecords) follows Kafka's local
rules with one extra condition that keeps every record readable: the new log start never
passes the end of the contiguous tiered range, so only data that is already in the remote
tier leaves the broker.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.model import RemoteLogSegmentMetadata

__all__ = ["expired_segments", "local_log_start_target"]

_UNLIMITED = -1


def expired_segments(
    segments: Sequence[RemoteLogSegmentMetadata],
    *,
    retention_ms: int,
    retention_bytes: int,
    untiered_bytes: int,
    now_ms: int,
) -> list[RemoteLogSegmentMetadata]:
    """The oldest remote segments that retention deletes (a prefix of ``segments``).

    :param segments: the partition's COPY_SEGMENT_FINISHED segments in offset order.
    :param untiered_bytes: size of the local data above the remote log end.
    """
    excess = _UNLIMITED
    if retention_bytes != _UNLIMITED:
        total = sum(s.segment_size_in_bytes for s in segments) + untiered_bytes
        excess = total - retention_bytes
    expired = []
    for segment in segments:
        by_time = retention_ms != _UNLIMITED and segment.max_timestamp <= now_ms - retention_ms
        by_size = excess != _UNLIMITED and excess - segment.segment_size_in_bytes >= 0
        if not (by_time or by_size):
            break
        if excess != _UNLIMITED:
            excess -= segment.segment_size_in_bytes
        expired.append(segment)
    return expired


def local_log_start_target(
    segments: Sequence[RemoteLogSegmentMetadata],
    *,
    log_start_offset: int,
    untiered_bytes: int,
    local_retention_ms: int,
    local_retention_bytes: int,
    now_ms: int,
) -> int | None:
    """The offset to move the broker's log start to, or ``None`` to leave it.

    Only whole remote segments that hold offsets the broker still has are considered, from
    the one holding ``log_start_offset`` on, and only as long as they are contiguous: the
    result is one past the end of the last local-retention-expired segment, never beyond the
    tiered range, and always above ``log_start_offset``.

    :param segments: the partition's COPY_SEGMENT_FINISHED segments in offset order.
    :param untiered_bytes: size of the local data above the remote log end.
    """
    local = [s for s in segments if s.end_offset >= log_start_offset]
    if not local or local[0].start_offset > log_start_offset:
        return None
    contiguous = [local[0]]
    for segment in local[1:]:
        if segment.start_offset != contiguous[-1].end_offset + 1:
            break
        contiguous.append(segment)
    excess = _UNLIMITED
    if local_retention_bytes != _UNLIMITED:
        local_size = sum(s.segment_size_in_bytes for s in local) + untiered_bytes
        excess = local_size - local_retention_bytes
    target: int | None = None
    for segment in contiguous:
        by_time = (
            local_retention_ms != _UNLIMITED and segment.max_timestamp < now_ms - local_retention_ms
        )
        by_size = excess != _UNLIMITED and excess - segment.segment_size_in_bytes >= 0
        if not (by_time or by_size):
            break
        if excess != _UNLIMITED:
            excess -= segment.segment_size_in_bytes
        target = segment.end_offset + 1
    return target
