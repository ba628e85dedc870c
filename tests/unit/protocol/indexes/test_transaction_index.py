"""Transaction index: AbortedTxn layout, round trips and collectAbortedTxns semantics."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.indexes import CorruptIndexError
from protocol.indexes.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    collect_aborted_txns,
    encode_transaction_index,
    parse_transaction_index,
)


@st.composite
def txn_lists(draw: st.DrawFn) -> list[AbortedTxn]:
    txns, last = [], 0
    for _ in range(draw(st.integers(0, 20))):
        last += draw(st.integers(1, 50))
        first = last - draw(st.integers(1, 80))
        lso = last + 1 - draw(st.integers(0, 60))
        txns.append(
            AbortedTxn(
                producer_id=draw(st.integers(0, 5)),
                first_offset=first,
                last_offset=last,
                last_stable_offset=lso,
            )
        )
    return txns


def test_entry_layout() -> None:
    data = encode_transaction_index(
        [AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)]
    )
    assert ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 7, 10, 20, 21)


@given(txn_lists())
def test_round_trip(txns: list[AbortedTxn]) -> None:
    assert parse_transaction_index(encode_transaction_index(txns)) == tuple(txns)


@given(txn_lists(), st.integers(-10, 1100), st.integers(0, 300))
def test_collect_matches_brute_force(txns: list[AbortedTxn], start: int, length: int) -> None:
    upper = start + length
    result = collect_aborted_txns(txns, start, upper)
    stop = next((i for i, t in enumerate(txns) if t.last_stable_offset >= upper), None)
    scanned = txns if stop is None else txns[: stop + 1]
    assert result.aborted == tuple(
        t for t in scanned if t.last_offset >= start and t.first_offset < upper
    )
    assert result.is_complete == (stop is not None)


def test_last_offsets_must_increase() -> None:
    txn = AbortedTxn(producer_id=1, first_offset=1, last_offset=5, last_stable_offset=6)
    with pytest.raises(ValueError, match="increasing"):
        encode_transaction_index([txn, txn])


@pytest.mark.parametrize(
    "data", [b"\x00" * 33, struct.pack(">hqqqq", 1, 7, 10, 20, 21)], ids=["short", "version"]
)
def test_corrupt_files(data: bytes) -> None:
    with pytest.raises(CorruptIndexError):
        parse_transaction_index(data)
