"""Producer snapshot: Kafka's schema, CRC32C and corruption detection."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.indexes import CorruptIndexError
from protocol.indexes.producer_snapshot import (
    ProducerSnapshotEntry,
    encode_producer_snapshot,
    parse_producer_snapshot,
)

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
entries = st.builds(
    ProducerSnapshotEntry,
    producer_id=int64,
    producer_epoch=int16,
    last_sequence=int32,
    last_offset=int64,
    offset_delta=int32,
    timestamp=int64,
    coordinator_epoch=int32,
    current_txn_first_offset=int64,
)


def test_layout_matches_kafkas_schema() -> None:
    entry = ProducerSnapshotEntry(
        producer_id=42,
        producer_epoch=3,
        last_sequence=9,
        last_offset=1_009,
        offset_delta=9,
        timestamp=1_700_000_000_000,
        coordinator_epoch=2,
        current_txn_first_offset=-1,
    )
    tail = struct.pack(">i", 1) + struct.pack(
        ">qhiqiqiq", 42, 3, 9, 1_009, 9, 1_700_000_000_000, 2, -1
    )
    assert encode_producer_snapshot([entry]) == struct.pack(">hI", 1, crc32c.crc32c(tail)) + tail


@given(st.lists(entries, max_size=10))
def test_round_trip(items: list[ProducerSnapshotEntry]) -> None:
    assert parse_producer_snapshot(encode_producer_snapshot(items)) == tuple(items)


def test_empty_snapshot() -> None:
    data = encode_producer_snapshot([])
    assert len(data) == 10
    assert parse_producer_snapshot(data) == ()


@given(st.lists(entries, min_size=1, max_size=3), st.data())
def test_any_flipped_bit_is_detected(
    items: list[ProducerSnapshotEntry], data: st.DataObject
) -> None:
    raw = bytearray(encode_producer_snapshot(items))
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptIndexError):
        parse_producer_snapshot(bytes(raw))


@pytest.mark.parametrize("cut", [0, 5, 9, 10, 55])
def test_truncated_snapshot_is_corrupt(cut: int) -> None:
    entry = ProducerSnapshotEntry(
        producer_id=1,
        producer_epoch=0,
        last_sequence=0,
        last_offset=0,
        offset_delta=0,
        timestamp=0,
        coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )
    with pytest.raises(CorruptIndexError):
        parse_producer_snapshot(encode_producer_snapshot([entry])[:cut])
