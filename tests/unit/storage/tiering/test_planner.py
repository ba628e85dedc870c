"""Properties of the segment planner: batch boundaries, no gaps or overlaps, closing rules."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.tiering.planner import (
    MAX_RELATIVE_OFFSET,
    BatchSpan,
    CloseReason,
    cut_segments,
    estimate_bytes,
    may_close,
    plan_windows,
)

NOW = 1_800_000_000_000


@st.composite
def span_lists(draw: st.DrawFn) -> list[BatchSpan]:
    count = draw(st.integers(0, 40))
    offset = draw(st.integers(0, 1000))
    position = 0
    timestamp = NOW - draw(st.integers(0, 10_000_000))
    spans = []
    for _ in range(count):
        records = draw(st.integers(1, 50))
        size = draw(st.integers(70, 5000))
        timestamp += draw(st.integers(-1000, 2_000_000))
        spread = draw(st.integers(0, 1000))
        spans.append(
            BatchSpan(
                window=0,
                position=position,
                size=size,
                base_offset=offset,
                last_offset=offset + records - 1,
                first_max_timestamp=timestamp,
                max_timestamp=timestamp + spread,
                leader_epoch=0,
            )
        )
        offset += records
        position += size
    return spans


@given(
    spans=span_lists(),
    segment_bytes=st.integers(14, 20_000),
    segment_ms=st.integers(1, 5_000_000),
)
@settings(max_examples=300)
def test_segments_are_contiguous_closed_runs_of_whole_spans(
    spans: list[BatchSpan], segment_bytes: int, segment_ms: int
) -> None:
    copy_start = spans[0].base_offset if spans else 0
    segments = cut_segments(
        spans, copy_start=copy_start, segment_bytes=segment_bytes, segment_ms=segment_ms, now_ms=NOW
    )
    next_span = 0
    for segment in segments:
        assert segment.first_span == next_span < segment.end_span
        inside = spans[segment.first_span : segment.end_span]
        assert segment.start_offset == inside[0].base_offset
        assert segment.end_offset == inside[-1].last_offset
        assert segment.size == sum(s.size for s in inside)
        assert segment.max_timestamp == max(s.max_timestamp for s in inside)
        # Never beyond segment.bytes, unless one span alone is larger.
        assert segment.size <= segment_bytes or len(inside) == 1
        # No span after the first is more than segment.ms after the first batch.
        first_ts = inside[0].first_max_timestamp
        assert all(s.max_timestamp - first_ts <= segment_ms for s in inside[1:])
        # Closed for the reason it gives: the next span would break a limit, or it is the
        # tail and full or old.
        if segment.end_span < len(spans):
            following = spans[segment.end_span]
            assert (
                segment.size + following.size > segment_bytes
                or following.max_timestamp - first_ts > segment_ms
                or following.last_offset - inside[0].base_offset > MAX_RELATIVE_OFFSET
            )
        else:
            assert segment.closed_by in (CloseReason.FULL, CloseReason.AGE)
        next_span = segment.end_span
    # What is left is one open segment: below segment.bytes and not old.
    rest = spans[next_span:]
    if rest:
        assert sum(s.size for s in rest) < segment_bytes
        assert NOW - rest[0].first_max_timestamp <= segment_ms
    # Consecutive segments leave no gap and do not overlap.
    for before, after in itertools.pairwise(segments):
        assert after.start_offset == before.end_offset + 1


def test_first_segment_starts_at_copy_start_inside_a_batch() -> None:
    span = BatchSpan(
        window=0,
        position=0,
        size=100,
        base_offset=10,
        last_offset=19,
        first_max_timestamp=0,
        max_timestamp=0,
        leader_epoch=0,
    )
    (segment,) = cut_segments([span], copy_start=15, segment_bytes=50, segment_ms=1, now_ms=NOW)
    assert (segment.start_offset, segment.end_offset) == (15, 19)


def test_recent_small_tail_waits() -> None:
    span = BatchSpan(
        window=0,
        position=0,
        size=100,
        base_offset=0,
        last_offset=0,
        first_max_timestamp=NOW - 10,
        max_timestamp=NOW - 10,
        leader_epoch=0,
    )
    assert cut_segments([span], copy_start=0, segment_bytes=1000, segment_ms=60, now_ms=NOW) == []
    (aged,) = cut_segments([span], copy_start=0, segment_bytes=1000, segment_ms=5, now_ms=NOW)
    assert aged.closed_by is CloseReason.AGE
    (full,) = cut_segments([span], copy_start=0, segment_bytes=100, segment_ms=60, now_ms=NOW)
    assert full.closed_by is CloseReason.FULL


@given(
    start=st.integers(0, 10**12),
    length=st.integers(1, 5000),
    estimated=st.integers(0, 10**10),
    task_bytes=st.integers(1, 10**9),
)
@settings(deadline=None)
def test_windows_cover_the_range_in_order(
    start: int, length: int, estimated: int, task_bytes: int
) -> None:
    windows = plan_windows(
        start=start, end=start + length, estimated_bytes=estimated, max_task_bytes=task_bytes
    )
    assert windows[0][0] == start
    assert windows[-1][1] == start + length
    assert all(a < b for a, b in windows)
    assert all(w1[1] == w2[0] for w1, w2 in itertools.pairwise(windows))
    assert len(windows) <= max(1, -(-estimated // task_bytes))


def test_may_close_needs_size_or_age() -> None:
    args = {"now_ms": NOW, "segment_bytes": 1000, "segment_ms": 60_000}
    assert not may_close(estimated_bytes=999, first_max_timestamp=NOW - 1000, **args)
    assert may_close(estimated_bytes=1000, first_max_timestamp=NOW, **args)
    assert may_close(estimated_bytes=1, first_max_timestamp=NOW - 60_001, **args)
    assert not may_close(estimated_bytes=1, first_max_timestamp=None, **args)
    assert estimate_bytes(start=10, end=20, bytes_per_offset=2.5) == 25
