"""Kafka's transaction index (``.txnindex``): the aborted transactions of a segment.

The file is a sequence of 34-byte ``AbortedTxn`` entries (``AbortedTxn.java``): version
(int16, 0), producer id (int64), first offset (int64), last offset (int64, the offset of the
ABORT marker) and last stable offset (int64, the LSO just after the abort was written),
big-endian. An entry belongs to the segment that holds the abort *marker*; its first offset
may lie in an earlier segment. Entries are ordered by strictly increasing last offset.

A READ_COMMITTED fetch needs every aborted transaction that overlaps the fetched range;
:func:`collect_aborted_txns` answers that for one segment and says whether later segments
must be searched too (``TransactionIndex.collectAbortedTxns``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.indexes import CorruptIndexError

__all__ = [
    "CURRENT_VERSION",
    "ENTRY_SIZE",
    "AbortedTxn",
    "TxnIndexSearchResult",
    "collect_aborted_txns",
    "encode_transaction_index",
    "parse_transaction_index",
]

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedTxn:
    """One aborted transaction: ``first_offset..last_offset`` of ``producer_id``."""

    producer_id: int
    first_offset: int
    last_offset: int
    """Offset of the ABORT control batch."""
    last_stable_offset: int
    """The partition's LSO once the abort was written (first offset of the oldest other
    open transaction, else ``last_offset + 1``); fetches ending at or below it need not
    look at later segments."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnIndexSearchResult:
    """The aborted transactions of one segment that overlap a fetch range."""

    aborted: tuple[AbortedTxn, ...]
    is_complete: bool
    """True when no later segment can hold an aborted transaction overlapping the range."""


def encode_transaction_index(txns: Iterable[AbortedTxn]) -> bytes:
    """Render the ``.txnindex`` bytes of ``txns``.

    :raises ValueError: if last offsets do not increase strictly (``TransactionIndex.append``).
    """
    out = bytearray()
    last: int | None = None
    for txn in txns:
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"aborted transactions must have increasing last offsets: {txn.last_offset} "
                f"after {last}"
            )
        last = txn.last_offset
        out += _ENTRY.pack(
            CURRENT_VERSION,
            txn.producer_id,
            txn.first_offset,
            txn.last_offset,
            txn.last_stable_offset,
        )
    return bytes(out)


def parse_transaction_index(data: bytes | memoryview) -> tuple[AbortedTxn, ...]:
    """The entries of a ``.txnindex`` file.

    Kafka stops silently at a partial trailing entry; a remote file is written whole, so a
    partial entry here means the object is damaged and is reported.

    :raises CorruptIndexError: on a size that is not a multiple of 34 or an unknown version.
    """
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index size {len(data)} is not a multiple of {ENTRY_SIZE}"
        )
    txns = []
    for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
        if version != CURRENT_VERSION:
            raise CorruptIndexError(f"unknown aborted transaction version {version}")
        txns.append(
            AbortedTxn(
                producer_id=producer_id,
                first_offset=first,
                last_offset=last,
                last_stable_offset=lso,
            )
        )
    return tuple(txns)


def collect_aborted_txns(
    txns: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

    Kafka's ``TransactionIndex.collectAbortedTxns``: the search is complete (later segments
    need not be read) as soon as an entry's last stable offset reaches the upper bound.
    """
    found = []
    for txn in txns:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(aborted=tuple(found), is_complete=True)
    return TxnIndexSearchResult(aborted=tuple(found), is_complete=False)
