"""Kafka's producer state snapshot (``.snapshot``): idempotence and transaction state.

A snapshot records, for every producer id active at an offset, what Kafka's
``ProducerStateManager`` needs to resume from there: the last batch's sequence, offset and
timestamp, the producer and coordinator epochs, and the first offset of the producer's open
transaction. KIP-405 uploads the snapshot taken at a segment's end, so that the state at any
segment boundary can be restored without the earlier data.

Binary layout (``ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA``, big-endian)::

    version: int16 = 1
    crc: uint32            CRC32C of everything after this field
    producer_entries: int32 count, then per entry:
        producer_id int64, epoch int16, last_sequence int32, last_offset int64,
        offset_delta int32, timestamp int64, coordinator_epoch int32,
        current_txn_first_offset int64 (-1: no open transaction)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c

from protocol.indexes import CorruptIndexError

__all__ = [
    "NO_TXN",
    "SNAPSHOT_VERSION",
    "ProducerSnapshotEntry",
    "encode_producer_snapshot",
    "parse_producer_snapshot",
]

SNAPSHOT_VERSION = 1
NO_TXN = -1
"""``current_txn_first_offset`` of a producer without an open transaction."""
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6
"""Byte position after version and crc: the CRC covers the rest of the file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerSnapshotEntry:
    """The state of one producer id, as a snapshot stores it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    """Sequence of the last record of the producer's last data batch, or -1."""
    last_offset: int
    """Offset of the last record of the producer's last data batch, or -1."""
    offset_delta: int
    """``last_offset`` minus the first offset of that batch (0 without one)."""
    timestamp: int
    """Max timestamp of the last batch, or the last marker's timestamp."""
    coordinator_epoch: int
    current_txn_first_offset: int
    """First offset of the open transaction, or :data:`NO_TXN`."""


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The snapshot file bytes for ``entries`` (Kafka writes them in hash-map order)."""
    body = bytearray()
    count = 0
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        count += 1
    tail = struct.pack(">i", count) + body
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(tail)) + tail


def parse_producer_snapshot(data: bytes | memoryview) -> tuple[ProducerSnapshotEntry, ...]:
    """The entries of a snapshot file, after checking its version and CRC.

    :raises CorruptIndexError: for a short file, an unknown version, a CRC mismatch or a size
        that does not match the entry count (Kafka's ``CorruptSnapshotException``).
    """
    if len(data) < _HEADER.size:
        raise CorruptIndexError(f"producer snapshot of {len(data)} bytes is too short")
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptIndexError(f"unknown producer snapshot version {version}")
    computed = crc32c.crc32c(bytes(data[_CRC_START:]))
    if crc != computed:
        raise CorruptIndexError(f"producer snapshot CRC {crc:#010x} != computed {computed:#010x}")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptIndexError(
            f"producer snapshot of {len(data)} bytes cannot hold {count} entries"
        )
    return tuple(
        ProducerSnapshotEntry(
            producer_id=pid,
            producer_epoch=epoch,
            last_sequence=seq,
            last_offset=offset,
            offset_delta=delta,
            timestamp=ts,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=txn_first,
        )
        for pid, epoch, seq, offset, delta, ts, coordinator_epoch, txn_first in _ENTRY.iter_unpack(
            data[_HEADER.size :]
        )
    )
