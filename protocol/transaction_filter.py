"""Which transactional batches belong to aborted transactions: a READ_COMMITTED reader's filter.

It follows Kafka's consumer (``CompletedFetch.nextFetchedBatch``): the aborted transactions
of the range (a Fetch answer's, or a transaction index's), ordered by first offset, become
active when a batch at or after their first offset is reached, and stay active for their
producer until its ABORT marker. A transactional batch of an active producer is skipped;
control batches are never data. The Spark data source and the metadata consumer both read
through it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from protocol.records import BatchHeader, ControlType, read_control_record

__all__ = ["AbortedRange", "TransactionFilter"]

_UNKNOWN_END: Final = 2**63 - 1
_Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedRange:
    """An aborted transaction: producer and first offset (from the transaction index or
    the broker's Fetch answer)."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None
    """The offset of its ABORT marker, where known (the transaction index has it; a Fetch
    answer has not): a slice that starts after the marker never sees it, and must not
    keep the producer's later batches aborted."""


class TransactionFilter:
    """Which transactional batches belong to aborted transactions (READ_COMMITTED)."""

    def __init__(self, aborted: Sequence[AbortedRange] = ()) -> None:
        self._pending: list[tuple[int, int, int]] = []
        self._seen: set[tuple[int, int]] = set()
        self._active: dict[int, int] = {}
        """Producer id -> the last offset its aborted transaction may hold."""
        self.add(aborted)

    def add(self, aborted: Sequence[AbortedRange]) -> None:
        """More aborted transactions (each Fetch answer names those of its range)."""
        for txn in aborted:
            key = (txn.first_offset, txn.producer_id)
            if key not in self._seen:  # successive Fetch answers repeat overlapping ones
                self._seen.add(key)
                last = _UNKNOWN_END if txn.last_offset is None else txn.last_offset
                heapq.heappush(self._pending, (*key, last))

    def keeps(self, buf: _Buffer, position: int, header: BatchHeader) -> bool:
        """Whether the batch at ``position`` is committed data (control batches never are).

        :raises CorruptRecordBatchError: if a control record cannot be read.
        """
        while self._pending and self._pending[0][0] <= header.last_offset:
            _first, producer, last = heapq.heappop(self._pending)
            self._active[producer] = last
        if header.is_control:
            marker = read_control_record(buf, position, header)
            if marker.type is ControlType.ABORT:
                self._active.pop(header.producer_id, None)
            return False
        if not header.is_transactional:
            return True
        aborted_until = self._active.get(header.producer_id)
        return aborted_until is None or header.base_offset > aborted_until
