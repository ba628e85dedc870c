"""``tierproxy status``'s text: every value whole at any width, one line a partition in a pipe.

Read back with tests.unit.proxy.status_text, every cell equals the row's value; a narrow
terminal's lines fit its width; a pipe's lines hold a whole row whatever the width.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from proxy.commands.status_layout import status_lines
from storage.tiering.status import PartitionStatus
from tests.unit.proxy.status_text import expected_cells, read_stacked, read_table

LONG = 2**63 - 1

offsets = st.integers(min_value=-1, max_value=LONG)
rows = st.builds(
    PartitionStatus,
    topic=st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    tiered=st.booleans(),
    local_log_start=offsets,
    local_log_end=offsets,
    last_stable_offset=offsets,
    remote_log_start=st.none() | offsets,
    remote_log_end=st.none() | offsets,
    segments=st.integers(min_value=0, max_value=2**31 - 1),
    remote_bytes=st.integers(min_value=0, max_value=LONG),
    lag_offsets=st.integers(min_value=0, max_value=LONG),
    lag_bytes=st.integers(min_value=0, max_value=LONG),
    missing=st.lists(st.tuples(offsets, offsets), max_size=6).map(tuple),
    stored_bytes=st.none() | st.integers(min_value=0, max_value=LONG),
)


def _row(**changes: object) -> PartitionStatus:
    row = PartitionStatus(
        topic="tiered-orders-eu-west",
        partition=11,
        tiered=True,
        local_log_start=3_072_000,
        local_log_end=30_720_000_123,
        last_stable_offset=30_720_000_100,
        remote_log_start=0,
        remote_log_end=3_071_999,
        segments=300,
        remote_bytes=4 * 1024 * 1024 * 1024,
        lag_offsets=30_716_928_100,
        lag_bytes=123_456_789_012,
        missing=((10, 19), (3_000_000, 3_000_999)),
        stored_bytes=1024 * 1024 * 1024,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def _cells(row: PartitionStatus) -> dict[str, str]:
    return expected_cells(dataclasses.asdict(row))


def test_a_pipe_gets_one_whole_line_a_partition_whatever_the_width() -> None:
    two = [_row(), _row(partition=12, remote_log_start=None, remote_log_end=None, missing=())]
    lines = status_lines(two, width=None)
    assert len(lines) == 3
    assert read_table(lines) == [_cells(row) for row in two]
    assert len(lines[1]) > 80  # whole, not cut to a width


def test_a_terminal_narrower_than_the_table_gets_a_block_a_partition() -> None:
    two = [_row(), _row(partition=12, stored_bytes=None)]
    lines = status_lines(two, width=80)
    assert read_stacked(lines) == [_cells(row) for row in two]
    assert max(len(line) for line in lines) <= 80
    assert "stored bytes      1073741824 (-75 %)" in lines
    assert "missing offsets   10-19, 3000000-3000999 (1010 offsets)" in lines


def test_a_terminal_as_wide_as_the_table_gets_the_table() -> None:
    table = status_lines([_row()], width=None)
    assert status_lines([_row()], width=len(table[1])) == table
    assert status_lines([_row()], width=len(table[1]) - 1) != table


def test_no_rows() -> None:
    assert read_table(status_lines([], width=None)) == []
    assert status_lines([], width=80) == ["no tiered partitions"]


@given(st.lists(rows, max_size=4))
def test_a_pipe_shows_every_value_whole(found: list[PartitionStatus]) -> None:
    assert read_table(status_lines(found, width=None)) == [_cells(row) for row in found]


@given(st.lists(rows, min_size=1, max_size=4), st.integers(min_value=61, max_value=400))
def test_a_terminal_shows_every_value_whole_within_its_width(
    found: list[PartitionStatus], width: int
) -> None:
    lines = status_lines(found, width=width)
    table = status_lines(found, width=None)
    if lines == table:
        assert max(len(line) for line in table) <= width
        read = read_table(lines)
    else:
        # Within the width: 18 columns of labels, 2 apart, and no word longer than 41.
        assert max(len(line) for line in lines) <= width
        read = read_stacked(lines)
    assert read == [_cells(row) for row in found]
