"""Turn record batches into the columns of Spark's Kafka source, in the executor.

The batch header is read once (:func:`protocol.records.iter_batches`) and decides
everything that holds for the whole batch: batches wholly outside the offset range, control
batches and aborted transactional batches are skipped without decompressing them. Only
the records of the batches that are kept are decompressed and split, with the varint
framing decoded inline (a one-byte varint, the usual case for lengths and deltas, costs one
comparison). Rows go straight into column lists that become one Arrow batch, so there is no
Python object per row beyond its key, value and headers.

READ_COMMITTED follows Kafka's consumer (``CompletedFetch.nextFetchedBatch``): the aborted
transactions of the range, ordered by first offset, become active when a batch at or after
their first offset is reached, and stay active for their producer until its ABORT marker.
A transactional batch of an active producer is skipped.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from protocol.compression import DecompressionError, decompress_records
from protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    ControlType,
    CorruptRecordBatchError,
    TimestampType,
    iter_batches,
    read_control_record,
)
from protocol.varint import VarintError, decode_varint, decode_varlong

__all__ = ["AbortedRange", "Columns", "TransactionFilter", "decode_batches"]

Header = tuple[str, bytes | None]

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


@dataclass(slots=True, kw_only=True)
class Columns:
    """Rows of one partition as columns, in offset order."""

    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    """Milliseconds since the epoch, as Kafka stores them."""
    timestamp_types: list[int] = field(default_factory=list)
    headers: list[list[Header] | None] = field(default_factory=list)
    """Filled only when headers are asked for; ``None`` for a record without headers,
    as Spark's Kafka source gives."""

    def __len__(self) -> int:
        return len(self.offsets)


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

    def keeps(self, buf: bytes | memoryview, position: int, header: BatchHeader) -> bool:
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


def decode_batches(
    buf: bytes,
    columns: Columns,
    *,
    from_offset: int,
    until_offset: int,
    transactions: TransactionFilter | None,
    include_headers: bool,
) -> int | None:
    """Append the records of ``buf``'s whole batches in ``[from_offset, until_offset)``.

    A partial batch at the end is left alone (the caller reads on from the returned
    position). ``transactions`` is ``None`` for READ_UNCOMMITTED, where only control
    batches are skipped.

    :returns: the offset after the last whole batch looked at (``None``: no whole batch).
    :raises CorruptRecordBatchError: if a batch cannot be decoded.
    :raises LegacyMessageFormatError: at a magic 0/1 message set.
    """
    next_offset = None
    for position, header in iter_batches(buf):
        next_offset = header.next_offset
        if header.base_offset >= until_offset:
            return next_offset
        if header.last_offset < from_offset:
            continue
        if transactions is not None:
            if not transactions.keeps(buf, position, header):
                continue
        elif header.is_control:
            continue
        try:
            _decode_records(
                buf,
                position,
                header,
                columns,
                from_offset=from_offset,
                until_offset=until_offset,
                include_headers=include_headers,
            )
        except (VarintError, ValueError, IndexError, struct.error, DecompressionError) as err:
            raise CorruptRecordBatchError(
                f"records of the batch at offset {header.base_offset} cannot be decoded: {err}"
            ) from err
    return next_offset


def _decode_records(
    buf: bytes,
    position: int,
    header: BatchHeader,
    columns: Columns,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
) -> None:
    """Split one batch's records into ``columns``; the per-record cost of the whole source."""
    body = memoryview(buf)[position + BATCH_HEADER_SIZE : position + header.size]
    data = bytes(decompress_records(header.compression, body))
    base_offset = header.base_offset
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    base_timestamp = header.max_timestamp if log_append else header.first_timestamp
    timestamp_type = int(header.timestamp_type)
    keys, values, offsets = columns.keys, columns.values, columns.offsets
    timestamps, types, all_headers = columns.timestamps, columns.timestamp_types, columns.headers
    point = 0
    for _ in range(header.record_count):
        byte = data[point]
        if byte < 0x80:
            length, point = (byte >> 1) ^ -(byte & 1), point + 1
        else:
            length, point = decode_varint(data, point)
        end = point + length
        point += 1  # record attributes: none defined
        byte = data[point]
        if byte < 0x80:
            timestamp_delta, point = (byte >> 1) ^ -(byte & 1), point + 1
        else:
            timestamp_delta, point = decode_varlong(data, point)
        byte = data[point]
        if byte < 0x80:
            offset_delta, point = (byte >> 1) ^ -(byte & 1), point + 1
        else:
            offset_delta, point = decode_varint(data, point)
        offset = base_offset + offset_delta
        if offset < from_offset or offset >= until_offset:
            point = end
            continue
        key, point = _nullable_bytes(data, point)
        value, point = _nullable_bytes(data, point)
        if point > end:
            raise ValueError(f"record at offset {offset} overruns its length")
        keys.append(key)
        values.append(value)
        offsets.append(offset)
        timestamps.append(base_timestamp if log_append else base_timestamp + timestamp_delta)
        types.append(timestamp_type)
        if include_headers:
            all_headers.append(_headers(data, point, end))
        point = end


def _nullable_bytes(data: bytes, point: int) -> tuple[bytes | None, int]:
    """A varint-length-prefixed key or value (``None`` for length -1) and what follows."""
    byte = data[point]
    if byte < 0x80:
        size, point = (byte >> 1) ^ -(byte & 1), point + 1
    else:
        size, point = decode_varint(data, point)
    if size < 0:
        return None, point
    return data[point : point + size], point + size


def _headers(data: bytes, point: int, end: int) -> list[Header] | None:
    """The record headers from ``point`` (their count) to the record's ``end``."""
    count, point = decode_varint(data, point)
    if count <= 0:
        return None
    found: list[Header] = []
    for _ in range(count):
        name, point = _nullable_bytes(data, point)
        value, point = _nullable_bytes(data, point)
        found.append(((name or b"").decode("utf-8"), value))
    if point > end:
        raise ValueError("record headers overrun the record")
    return found
