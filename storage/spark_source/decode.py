"""Turn record batches into the columns of Spark's Kafka source, in the executor.

The batch header is read once (:func:`protocol.records.iter_batches`) and decides
everything that holds for the whole batch: batches wholly outside the offset range, control
batches and aborted transactional batches are skipped without decompressing them. Only
the records of the batches that are kept are decompressed and split
(:mod:`storage.spark_source.split`), a group of batches at a time.

READ_COMMITTED follows Kafka's consumer (:class:`protocol.transaction_filter.TransactionFilter`,
shared with the metadata consumer).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from protocol.records import BatchHeader, iter_batches
from protocol.transaction_filter import AbortedRange, TransactionFilter
from storage.spark_source.split import Buffer, Columns, split_records

__all__ = ["GROUP_BYTES", "AbortedRange", "Decoding", "TransactionFilter", "decode_batches"]

GROUP_BYTES: Final = 8 * 1024 * 1024
"""Stored bytes of batches decoded together into one Arrow batch: large enough that numpy's
per-call costs vanish, small enough that Spark's JVM converts one group while Python decodes
the next, and that the group's decoded keys and values stay far below Arrow's 2 GiB."""


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
