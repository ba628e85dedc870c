"""Remote and local retention decisions."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from storage.model import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.tiering.retention import expired_segments, local_log_start_target
from tests.fakes.segments import segment_metadata

TP = TopicIdPartition(topic_id=uuid.UUID(int=1), topic="t", partition=0)
NOW = 10_000_000


def segment(start: int, end: int, *, size: int = 100, ts: int = 0) -> RemoteLogSegmentMetadata:
    return segment_metadata(
        TP, start_offset=start, end_offset=end, size=size, timestamp=ts, event_timestamp=0
    )


def chain(sizes_and_ts: list[tuple[int, int]]) -> list[RemoteLogSegmentMetadata]:
    segments = []
    offset = 0
    for size, ts in sizes_and_ts:
        segments.append(segment(offset, offset + 9, size=size, ts=ts))
        offset += 10
    return segments


def test_time_retention_deletes_a_prefix() -> None:
    segments = chain([(100, 1000), (100, 5000), (100, 1000)])
    expired = expired_segments(
        segments, retention_ms=NOW - 2000, retention_bytes=-1, untiered_bytes=0, now_ms=NOW
    )
    assert expired == segments[:1]  # the third is old too, but retention stops at the second


def test_size_retention_keeps_the_log_at_or_above_the_limit() -> None:
    segments = chain([(100, NOW)] * 4)
    expired = expired_segments(
        segments, retention_ms=-1, retention_bytes=250, untiered_bytes=50, now_ms=NOW
    )
    # 450 bytes in all; deleting two leaves 250, a third would leave 150.
    assert expired == segments[:2]
    assert (
        expired_segments(
            segments, retention_ms=-1, retention_bytes=-1, untiered_bytes=0, now_ms=NOW
        )
        == []
    )


@given(
    sizes=st.lists(st.tuples(st.integers(1, 1000), st.integers(0, NOW)), max_size=20),
    retention_ms=st.integers(-1, NOW),
    retention_bytes=st.integers(-1, 20_000),
    untiered=st.integers(0, 5000),
)
def test_expired_segments_are_a_prefix_that_breaches_a_limit(
    sizes: list[tuple[int, int]], retention_ms: int, retention_bytes: int, untiered: int
) -> None:
    segments = chain(sizes)
    expired = expired_segments(
        segments,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        untiered_bytes=untiered,
        now_ms=NOW,
    )
    assert expired == segments[: len(expired)]
    total = sum(s.segment_size_in_bytes for s in segments) + untiered
    deleted = 0
    for segment in expired:
        deleted += segment.segment_size_in_bytes
        old = retention_ms != -1 and segment.max_timestamp <= NOW - retention_ms
        # Size alone never takes the log below retention.bytes.
        assert old or (retention_bytes != -1 and total - deleted >= retention_bytes)
    if len(expired) < len(segments):
        following = segments[len(expired)]
        assert retention_ms == -1 or following.max_timestamp > NOW - retention_ms
        assert (
            retention_bytes == -1
            or total - deleted - following.segment_size_in_bytes < retention_bytes
        )


def test_local_target_never_passes_the_tiered_range() -> None:
    segments = chain([(100, 0), (100, 0), (100, 0)])
    target = local_log_start_target(
        segments,
        log_start_offset=0,
        untiered_bytes=10**9,
        local_retention_ms=1,
        local_retention_bytes=-1,
        now_ms=NOW,
    )
    assert target == 30
    # A gap in the remote log stops the advance at the gap.
    gapped = [segments[0], segment(15, 29, ts=0)]
    assert (
        local_log_start_target(
            gapped,
            log_start_offset=0,
            untiered_bytes=0,
            local_retention_ms=1,
            local_retention_bytes=-1,
            now_ms=NOW,
        )
        == 10
    )


def test_local_target_by_size_and_from_the_broker_start() -> None:
    segments = chain([(100, NOW)] * 4)
    common = {"untiered_bytes": 100, "local_retention_ms": -1, "now_ms": NOW}
    assert (
        local_log_start_target(segments, log_start_offset=0, local_retention_bytes=300, **common)
        == 20
    )
    # Already advanced past the first two: only the rest counts locally.
    assert (
        local_log_start_target(segments, log_start_offset=20, local_retention_bytes=300, **common)
        is None
    )
    assert (
        local_log_start_target(segments, log_start_offset=20, local_retention_bytes=100, **common)
        == 40
    )
    # The broker's log start is below the remote log: nothing is known to be tiered there.
    assert (
        local_log_start_target(segments[1:], log_start_offset=0, local_retention_bytes=0, **common)
        is None
    )
