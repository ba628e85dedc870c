"""Offset index: Kafka's byte layout and floor lookups checked against brute force."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.indexes import CorruptIndexError
from protocol.indexes.offset_index import OffsetIndex, OffsetIndexBuilder, OffsetPosition

BASE = 1_000


@st.composite
def index_entries(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Strictly increasing offsets with increasing positions, as a segment produces them."""
    gaps = draw(st.lists(st.integers(1, 50), max_size=40))
    steps = draw(st.lists(st.integers(1, 9000), min_size=len(gaps), max_size=len(gaps)))
    offset, position, entries = BASE, 0, []
    for gap, step in zip(gaps, steps, strict=True):
        offset += gap
        position += step
        entries.append((offset, position))
    return entries


def build(entries: list[tuple[int, int]]) -> bytes:
    builder = OffsetIndexBuilder(BASE)
    for offset, position in entries:
        builder.append(offset, position)
    assert len(builder) == len(entries)
    return builder.to_bytes()


def test_bytes_are_kafkas_layout() -> None:
    data = build([(1_005, 0), (1_020, 4_200)])
    assert data == struct.pack(">iiii", 5, 0, 20, 4_200)


@given(index_entries(), st.integers(0, 3_000))
def test_lookup_matches_brute_force(entries: list[tuple[int, int]], target: int) -> None:
    index = OffsetIndex(build(entries), base_offset=BASE)
    floor = [e for e in entries if e[0] <= target]
    expected = floor[-1] if floor else (BASE, 0)
    assert index.lookup(target) == OffsetPosition(offset=expected[0], position=expected[1])


@given(index_entries())
def test_entries_round_trip(entries: list[tuple[int, int]]) -> None:
    index = OffsetIndex(build(entries), base_offset=BASE)
    assert [(e.offset, e.position) for e in index.entries()] == entries
    assert len(index) == len(entries)


def test_append_refuses_non_increasing_offsets() -> None:
    builder = OffsetIndexBuilder(BASE)
    builder.append(1_010, 0)
    with pytest.raises(ValueError, match="must increase"):
        builder.append(1_010, 100)


@pytest.mark.parametrize("offset", [BASE - 1, BASE + 2**31])
def test_append_refuses_offsets_outside_relative_int32(offset: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        OffsetIndexBuilder(BASE).append(offset, 0)


def test_truncated_file_is_corrupt() -> None:
    with pytest.raises(CorruptIndexError):
        OffsetIndex(build([(1_001, 0)])[:-1], base_offset=BASE)


def test_descending_file_is_corrupt() -> None:
    with pytest.raises(CorruptIndexError):
        OffsetIndex(struct.pack(">iiii", 9, 0, 2, 10), base_offset=BASE)


def test_entry_out_of_range() -> None:
    with pytest.raises(IndexError):
        OffsetIndex(b"", base_offset=BASE).entry(0)
