"""Time index: Kafka's layout, maybeAppend rules and floor lookups against brute force."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.indexes import CorruptIndexError
from protocol.indexes.time_index import TimeIndex, TimeIndexBuilder, TimestampOffset

BASE = 500


@st.composite
def appends(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(max timestamp so far, its offset) pairs as a segment offers them to maybeAppend."""
    steps = draw(st.lists(st.tuples(st.integers(-5, 100), st.integers(0, 20)), max_size=40))
    timestamp, offset, out = -1, BASE, []
    for ts_step, offset_step in steps:
        timestamp = max(timestamp, timestamp + ts_step)
        offset += offset_step
        out.append((timestamp, offset))
    return out


def build(pairs: list[tuple[int, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """The file and the entries Kafka keeps: only strictly growing timestamps above -1."""
    builder = TimeIndexBuilder(BASE)
    kept: list[tuple[int, int]] = []
    for timestamp, offset in pairs:
        builder.maybe_append(timestamp, offset)
        if timestamp > (kept[-1][0] if kept else -1):
            kept.append((timestamp, offset))
    return builder.to_bytes(), kept


def test_bytes_are_kafkas_layout() -> None:
    data, _ = build([(1_700_000_000_000, 510)])
    assert data == struct.pack(">qi", 1_700_000_000_000, 10)


@given(appends(), st.integers(-3, 2_500))
def test_lookup_matches_brute_force(pairs: list[tuple[int, int]], target: int) -> None:
    data, kept = build(pairs)
    index = TimeIndex(data, base_offset=BASE)
    assert [(e.timestamp, e.offset) for e in index.entries()] == kept
    floor = [e for e in kept if e[0] <= target]
    expected = floor[-1] if floor else (-1, BASE)
    assert index.lookup(target) == TimestampOffset(timestamp=expected[0], offset=expected[1])
    last = kept[-1] if kept else (-1, BASE)
    assert index.last_entry == TimestampOffset(timestamp=last[0], offset=last[1])


def test_equal_timestamp_is_ignored_and_going_back_is_refused() -> None:
    builder = TimeIndexBuilder(BASE)
    builder.maybe_append(100, 510)
    builder.maybe_append(100, 520)
    assert len(builder) == 1
    with pytest.raises(ValueError, match="offsets"):
        builder.maybe_append(200, 505)
    with pytest.raises(ValueError, match="timestamps"):
        builder.maybe_append(50, 530)


def test_no_timestamp_is_never_indexed() -> None:
    builder = TimeIndexBuilder(BASE)
    builder.maybe_append(-1, 510)
    assert builder.to_bytes() == b""
    assert builder.last_entry == TimestampOffset(timestamp=-1, offset=BASE)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 13,
        struct.pack(">qiqi", 200, 1, 100, 2),
        struct.pack(">qi", 200, -3),
    ],
)
def test_corrupt_files(data: bytes) -> None:
    with pytest.raises(CorruptIndexError):
        TimeIndex(data, base_offset=BASE)
