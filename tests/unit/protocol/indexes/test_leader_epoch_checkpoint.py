"""Leader-epoch checkpoint text format and the LeaderEpochFileCache lineage rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.indexes import CorruptIndexError
from protocol.indexes.leader_epoch_checkpoint import (
    UNDEFINED_EPOCH,
    EpochEntry,
    assign,
    encode_leader_epoch_checkpoint,
    end_offset_for_epoch,
    entries_in_range,
    epoch_for_offset,
    parse_leader_epoch_checkpoint,
    truncate_from_end,
    truncate_from_start,
)


@st.composite
def lineages(draw: st.DrawFn) -> list[EpochEntry]:
    """Strictly increasing epochs and start offsets, as a leader-epoch cache holds them."""
    out, epoch, start = [], -1, -1
    for _ in range(draw(st.integers(0, 8))):
        epoch += draw(st.integers(1, 4))
        start += draw(st.integers(1, 100))
        out.append(EpochEntry(epoch=epoch, start_offset=start))
    return out


def test_text_format() -> None:
    entries = [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=3, start_offset=1200)]
    assert encode_leader_epoch_checkpoint(entries) == b"0\n2\n0 0\n3 1200\n"


@given(lineages())
def test_round_trip(entries: list[EpochEntry]) -> None:
    data = encode_leader_epoch_checkpoint(entries)
    assert parse_leader_epoch_checkpoint(data) == tuple(entries)


@pytest.mark.parametrize("data", [b"", b"0\n", b"0\n0\n"])
def test_empty_files_have_no_entries(data: bytes) -> None:
    assert parse_leader_epoch_checkpoint(data) == ()


def test_kafka_accepts_any_whitespace_between_fields() -> None:
    assert parse_leader_epoch_checkpoint(b"0\n1\n4 \t 17\n") == (
        EpochEntry(epoch=4, start_offset=17),
    )


@pytest.mark.parametrize(
    "data", [b"1\n0\n", b"0\n2\n1 5\n", b"0\n1\n1 5 6\n", b"0\nx\n", b"0\n1\n1 y\n", b"\xff\n"]
)
def test_malformed_files(data: bytes) -> None:
    with pytest.raises(CorruptIndexError):
        parse_leader_epoch_checkpoint(data)


def brute_end_offset(entries: list[EpochEntry], epoch: int, leo: int) -> tuple[int, int]:
    """LeaderEpochFileCache.endOffsetFor, transcribed case by case."""
    if epoch == UNDEFINED_EPOCH:
        return (-1, -1)
    if entries and entries[-1].epoch == epoch:
        return (epoch, leo)
    higher = [e for e in entries if e.epoch > epoch]
    if not higher:
        return (-1, -1)
    floor = [e for e in entries if e.epoch <= epoch]
    if not floor:
        return (epoch, higher[0].start_offset)
    return (floor[-1].epoch, higher[0].start_offset)


@given(lineages(), st.integers(-1, 40), st.integers(0, 1000))
def test_end_offset_for_epoch(entries: list[EpochEntry], epoch: int, leo: int) -> None:
    assert end_offset_for_epoch(entries, epoch, leo) == brute_end_offset(entries, epoch, leo)


def test_end_offset_for_epoch_known_cases() -> None:
    lineage = [EpochEntry(epoch=2, start_offset=10), EpochEntry(epoch=5, start_offset=40)]
    assert end_offset_for_epoch(lineage, 5, 99) == (5, 99)
    assert end_offset_for_epoch(lineage, 3, 99) == (2, 40)
    assert end_offset_for_epoch(lineage, 1, 99) == (1, 10)
    assert end_offset_for_epoch(lineage, 6, 99) == (-1, -1)
    assert end_offset_for_epoch(lineage, -1, 99) == (-1, -1)
    assert end_offset_for_epoch([], 0, 99) == (-1, -1)


@given(lineages(), st.integers(-5, 500))
def test_epoch_for_offset(entries: list[EpochEntry], offset: int) -> None:
    started = [e.epoch for e in entries if e.start_offset <= offset]
    assert epoch_for_offset(entries, offset) == (started[-1] if started else None)


@given(lineages(), st.integers(0, 40), st.integers(0, 500))
def test_assign_keeps_the_lineage_monotonic(
    entries: list[EpochEntry], epoch: int, start: int
) -> None:
    result = assign(entries, epoch, start)
    assert all(
        a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(result)
    )
    latest = entries[-1] if entries else None
    if latest is not None and latest.epoch == epoch and latest.start_offset <= start:
        assert result == tuple(entries)
    else:
        assert result[-1] == EpochEntry(epoch=epoch, start_offset=start)
        assert result[:-1] == tuple(
            e for e in entries if e.epoch < epoch and e.start_offset < start
        )


def test_assign_refuses_negative_values() -> None:
    with pytest.raises(ValueError, match="invalid"):
        assign([], -1, 0)


@given(lineages(), st.integers(-1, 500), st.integers(0, 600))
def test_entries_in_range(entries: list[EpochEntry], start: int, end: int) -> None:
    result = entries_in_range(entries, start, end)
    trimmed = truncate_from_start(entries, start) if start >= 0 else tuple(entries)
    assert result == truncate_from_end(trimmed, end)
    for offset in range(max(start, 0), end):
        if result and offset >= result[0].start_offset:
            assert epoch_for_offset(result, offset) == epoch_for_offset(entries, offset)
    assert all(e.start_offset < end for e in result)
    if start >= 0 and result and epoch_for_offset(entries, start) is not None:
        assert result[0].start_offset == start


def test_truncate_from_start_moves_the_covering_epoch() -> None:
    lineage = [
        EpochEntry(epoch=1, start_offset=0),
        EpochEntry(epoch=2, start_offset=10),
        EpochEntry(epoch=4, start_offset=30),
    ]
    assert truncate_from_start(lineage, 15) == (
        EpochEntry(epoch=2, start_offset=15),
        EpochEntry(epoch=4, start_offset=30),
    )
    assert truncate_from_end(lineage, 30) == tuple(lineage[:2])
    assert truncate_from_end(lineage, -1) == tuple(lineage)
