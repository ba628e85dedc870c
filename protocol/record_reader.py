"""The records inside v2 batches, for the few readers that need them, and a consumer's position.

Almost everything in tierproxy moves batches as opaque bytes (:mod:`protocol.records`). Two
readers look inside here: ListOffsets by timestamp on the remote tier (record timestamps) and
the metadata consumer (record values); the Spark data source, which turns whole batches into
columns, has its own decoder (:mod:`storage.spark_source.decode`). All of them decompress
through :func:`protocol.compression.decompress_records`. The consumer also goes through
:func:`records_from`, which is the whole of its offset bookkeeping: which records of a Fetch
answer are new, and where the next Fetch starts.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from protocol.compression import DecompressionError, decompress_records
from protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordBatchError,
    TimestampType,
    iter_batches,
)
from protocol.transaction_filter import TransactionFilter
from protocol.varint import Buffer, VarintError, decode_varint, decode_varlong

__all__ = ["ConsumedRecord", "batch_records", "records_from"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumedRecord:
    """One record as a consumer sees it (its headers are not needed here)."""

    offset: int
    timestamp: int
    """The batch's max timestamp for LOG_APPEND_TIME batches, as Kafka's
    ``DefaultRecord.timestamp`` gives it."""
    key: bytes | None
    value: bytes | None


def batch_records(buf: Buffer, position: int, header: BatchHeader) -> Iterator[ConsumedRecord]:
    """The records of the (complete, non-control) batch at ``position``, in offset order.

    :raises CorruptRecordBatchError: if the records cannot be decoded.
    """
    body = memoryview(buf)[position + BATCH_HEADER_SIZE : position + header.size]
    try:
        payload = decompress_records(header.compression, body)
        point = 0
        for _ in range(header.record_count):
            length, point = decode_varint(payload, point)
            end = point + length
            timestamp_delta, cursor = decode_varlong(payload, point + 1)  # after the attributes
            offset_delta, cursor = decode_varint(payload, cursor)
            key, cursor = _field(payload, cursor, end)
            value, cursor = _field(payload, cursor, end)
            point = end
            yield ConsumedRecord(
                offset=header.base_offset + offset_delta,
                timestamp=header.max_timestamp
                if header.timestamp_type is TimestampType.LOG_APPEND_TIME
                else header.first_timestamp + timestamp_delta,
                key=key,
                value=value,
            )
    except (VarintError, ValueError, IndexError, struct.error, DecompressionError) as err:
        raise CorruptRecordBatchError(
            f"records of the batch at offset {header.base_offset} cannot be decoded: {err}"
        ) from err


def _field(payload: Buffer, cursor: int, end: int) -> tuple[bytes | None, int]:
    length, cursor = decode_varint(payload, cursor)
    if length < 0:
        return None, cursor
    if cursor + length > end:
        raise ValueError("a record's key or value overruns the record")
    return bytes(payload[cursor : cursor + length]), cursor + length


def records_from(
    records: bytes, position: int, transactions: TransactionFilter | None = None
) -> tuple[list[ConsumedRecord], int]:
    """The records of a Fetch answer at or after ``position``, and the next position.

    A Fetch answers from the start of the batch that holds ``position``, so earlier records
    are dropped; transaction markers (control batches) are no records to a consumer but move
    the position past them, and so do the batches of aborted transactions where
    ``transactions`` filters them (READ_COMMITTED); a partial batch at the end is left for
    the next Fetch. The next position never goes backwards.

    :raises CorruptRecordBatchError: if a batch or its records cannot be decoded.
    :raises LegacyMessageFormatError: at a magic 0/1 message set.
    """
    consumed: list[ConsumedRecord] = []
    for at, header in iter_batches(records):
        if header.next_offset <= position:
            continue
        keep = (
            not header.is_control
            if transactions is None
            else transactions.keeps(records, at, header)
        )
        if keep:
            consumed.extend(r for r in batch_records(records, at, header) if r.offset >= position)
        position = header.next_offset
    return consumed, position
