"""Turn record batches into the columns of Spark's Kafka source, in the executor.

The batch header is read once (:func:`protocol.records.iter_batches`) and decides
everything that holds for the whole batch: batches wholly outside the offset range, control
batches and aborted transactional batches are skipped without decompressing them. Only
the records of the batches that are kept are decompressed and split
(:mod:`storage.spark_source.split`), a group of batches at a time.

READ_COMMITTED follows Kafka's consumer (``CompletedFetch.nextFetchedBatch``): the aborted
transactions of the range, ordered by first offset, become active when a batch at or after
their first offset is reached, and stay active for their producer until its ABORT marker.
A transactional batch of an active producer is skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.records import BatchHeader, ControlType, iter_batches, read_control_record
from storage.spark_source.split import Buffer, Columns, split_records

__all__ = ["GROUP_BYTES", "AbortedRange", "Decoding", "TransactionFilter", "decode_batches"]

GROUP_BYTES: Final = 8 * 1024 * 1024
"""Stored bytes of batches decoded together into one Arrow batch: large enough that numpy's
per-call costs vanish, small enough that Spark's JVM converts one group while Python decodes
the next, and that the group's decoded keys and values stay far below Arrow's 2 GiB."""
_UNKNOWN_END: Final = 2**63 - 1


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

    def keeps(self, buf: Buffer, position: int, header: BatchHeader) -> bool:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Decoding:
    """The batches of a buffer that hold rows, chosen from their headers alone, and the
    offset after the last whole batch looked at (``None``: no whole batch)."""

    buf: Buffer
    batches: list[tuple[int, BatchHeader]]
    next_offset: int | None
    from_offset: int
    until_offset: int
    include_headers: bool

    def columns(self, group_bytes: int = GROUP_BYTES) -> Iterator[Columns]:
        """The rows, a group of batches of about ``group_bytes`` (stored) at a time, so
        Spark converts one group while the next is decoded.

        :raises CorruptRecordBatchError: if a batch cannot be decoded.
        """
        group: list[tuple[int, BatchHeader]] = []
        size = 0
        for position, header in self.batches:
            group.append((position, header))
            size += header.size
            if size >= group_bytes:
                yield self._split(group)
                group, size = [], 0
        if group:
            yield self._split(group)

    def _split(self, group: list[tuple[int, BatchHeader]]) -> Columns:
        return split_records(
            self.buf,
            group,
            from_offset=self.from_offset,
            until_offset=self.until_offset,
            include_headers=self.include_headers,
        )


def decode_batches(
    buf: Buffer,
    *,
    from_offset: int,
    until_offset: int,
    transactions: TransactionFilter | None,
    include_headers: bool,
) -> Decoding:
    """The whole batches of ``buf`` with records in ``[from_offset, until_offset)``.

    A partial batch at the end is left alone (the caller reads on from ``next_offset``).
    ``transactions`` is ``None`` for READ_UNCOMMITTED, where only control batches are
    skipped.

    :raises CorruptRecordBatchError: if a control batch cannot be decoded.
    :raises LegacyMessageFormatError: at a magic 0/1 message set.
    """
    kept = []
    next_offset = None
    for position, header in iter_batches(buf):
        next_offset = header.next_offset
        if header.base_offset >= until_offset:
            break
        if header.last_offset < from_offset:
            continue
        if transactions is not None:
            if not transactions.keeps(buf, position, header):
                continue
        elif header.is_control:
            continue
        kept.append((position, header))
    return Decoding(
        buf=buf,
        batches=kept,
        next_offset=next_offset,
        from_offset=from_offset,
        until_offset=until_offset,
        include_headers=include_headers,
    )
