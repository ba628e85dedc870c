"""The read-ahead sizing rule: within its bounds, enough for the reader never to wait."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.read_ahead import MAX_READ_AHEAD_BYTES, ReadAheadBounds, read_ahead_chunks

MIB = 1024 * 1024

bounds = st.integers(0, 64).flatmap(
    lambda low: st.builds(ReadAheadBounds, minimum=st.just(low), maximum=st.integers(low, 128))
)
seconds = st.floats(0, 10, allow_nan=False)


@given(bounds, seconds, seconds)
def test_the_depth_stays_within_its_bounds(
    limits: ReadAheadBounds, get_seconds: float, seconds_per_chunk: float
) -> None:
    depth = read_ahead_chunks(limits, get_seconds=get_seconds, seconds_per_chunk=seconds_per_chunk)
    assert limits.minimum <= depth <= limits.maximum


@given(bounds, st.none() | seconds, st.none() | seconds)
def test_an_unmeasured_reader_or_store_gets_the_minimum(
    limits: ReadAheadBounds, get_seconds: float | None, seconds_per_chunk: float | None
) -> None:
    if get_seconds is not None and seconds_per_chunk is not None:
        return
    depth = read_ahead_chunks(limits, get_seconds=get_seconds, seconds_per_chunk=seconds_per_chunk)
    assert depth == limits.minimum


@given(
    get_seconds=st.floats(0.001, 1),
    seconds_per_chunk=st.floats(0.0005, 1),
)
def test_unbounded_it_keeps_twice_a_gets_worth_of_reading_in_flight(
    get_seconds: float, seconds_per_chunk: float
) -> None:
    """The reader takes ``depth * seconds_per_chunk`` to read what is in flight: at least
    two GETs' time (never waiting), at most one chunk more (never far more than needed)."""
    limits = ReadAheadBounds(minimum=0, maximum=10**9)
    depth = read_ahead_chunks(limits, get_seconds=get_seconds, seconds_per_chunk=seconds_per_chunk)
    assert depth * seconds_per_chunk >= 2 * get_seconds * (1 - 1e-9)
    assert depth - 1 < 2 * get_seconds / seconds_per_chunk + 1e-9


@given(bounds, seconds, seconds, seconds, seconds)
def test_slower_gets_or_a_faster_reader_never_read_less_ahead(
    limits: ReadAheadBounds, get_a: float, get_b: float, chunk_a: float, chunk_b: float
) -> None:
    slow_get, fast_get = max(get_a, get_b), min(get_a, get_b)
    fast_reader, slow_reader = min(chunk_a, chunk_b), max(chunk_a, chunk_b)
    deep = read_ahead_chunks(limits, get_seconds=slow_get, seconds_per_chunk=fast_reader)
    shallow = read_ahead_chunks(limits, get_seconds=fast_get, seconds_per_chunk=slow_reader)
    assert deep >= shallow


def test_a_reader_held_back_by_its_read_ahead_doubles_it() -> None:
    """``depth`` GETs in flight deliver ``depth`` chunks per GET time: the reader's rate when
    the read-ahead is too shallow. The next sizing asks for twice as many."""
    limits = ReadAheadBounds(minimum=2, maximum=64)
    get_seconds, depth = 0.06, 2
    for expected in (4, 8, 16, 32, 64, 64):
        depth = read_ahead_chunks(
            limits, get_seconds=get_seconds, seconds_per_chunk=get_seconds / depth
        )
        assert depth == expected


def test_the_bench_case_fifty_ms_to_the_first_byte() -> None:
    """500 MiB/s through 55 ms GETs of 4 MiB: 7 chunks in flight at least, 14 with the
    headroom; the default 64 MiB budget allows 16, whatever the cache's size."""
    chunk = 4 * MIB
    default = ReadAheadBounds.for_budget(
        prefetch_chunks=2, budget_bytes=64 * MIB, chunk_bytes=chunk
    )
    small = ReadAheadBounds.for_budget(prefetch_chunks=2, budget_bytes=24 * MIB, chunk_bytes=chunk)
    rate = dict(get_seconds=0.055, seconds_per_chunk=chunk / (500 * MIB))
    assert read_ahead_chunks(default, **rate) == 14
    assert read_ahead_chunks(small, **rate) == 6


@given(
    prefetch_chunks=st.integers(0, 100),
    budget_bytes=st.integers(0, 1 << 40),
    chunk_bytes=st.integers(1, 1 << 30),
)
def test_the_bounds_of_a_budget(prefetch_chunks: int, budget_bytes: int, chunk_bytes: int) -> None:
    """Above the operator's floor, the read-ahead fits the budget and the cap; with the
    floor 0 it is off."""
    limits = ReadAheadBounds.for_budget(
        prefetch_chunks=prefetch_chunks, budget_bytes=budget_bytes, chunk_bytes=chunk_bytes
    )
    if prefetch_chunks == 0:
        assert limits == ReadAheadBounds(minimum=0, maximum=0)
        return
    assert limits.minimum == prefetch_chunks <= limits.maximum
    if limits.maximum > prefetch_chunks:
        assert limits.maximum * chunk_bytes <= min(MAX_READ_AHEAD_BYTES, budget_bytes)
        assert (limits.maximum + 1) * chunk_bytes > min(MAX_READ_AHEAD_BYTES, budget_bytes)


@pytest.mark.parametrize(
    ("prefetch_chunks", "budget_bytes", "chunk_bytes"), [(-1, 10, 1), (1, -1, 1), (1, 10, 0)]
)
def test_bad_sizes_are_refused(prefetch_chunks: int, budget_bytes: int, chunk_bytes: int) -> None:
    with pytest.raises(ValueError, match="chunk_bytes must be positive"):
        ReadAheadBounds.for_budget(
            prefetch_chunks=prefetch_chunks, budget_bytes=budget_bytes, chunk_bytes=chunk_bytes
        )
