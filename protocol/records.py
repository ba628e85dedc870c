"""Record batch v2 (magic 2): headers, iteration, CRC, control records, and a builder.

The proxy and the pipeline move batches exactly as the broker stored them, so this
module reads only the 61-byte batch header (one :class:`struct.Struct` unpack, straight
from a ``memoryview``, no copy) and treats the records behind it as opaque bytes. The
layout is Kafka's ``DefaultRecordBatch``::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes after this field
        12     4  partitionLeaderEpoch   not covered by the CRC
        16     1  magic                  2; 0 and 1 are the legacy message sets
        17     4  crc                    CRC-32C of byte 21 to the end of the batch
        21     2  attributes             bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp          first record's timestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records (varint-framed DefaultRecord, compressed as a whole if the
                  attributes say so)

Legacy message sets (magic 0 and 1) put their magic byte at the same offset 16; they
are detected and refused with :class:`LegacyMessageFormatError` rather than misread.
The only records decoded here are control records (transaction markers), which Kafka
never compresses. :func:`build_record_batch` writes valid batches (uncompressed or
gzip) for tests and synthetic data.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

import crc32c

from protocol.buffers import Buffers
from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.varint import (
    Buffer,
    VarintError,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlType",
    "CorruptRecordBatchError",
    "LegacyMessageFormatError",
    "Record",
    "TimestampType",
    "batch_crc_ok",
    "batch_span",
    "batches_below",
    "build_control_batch",
    "build_record_batch",
    "fit_batches",
    "iter_batch_spans",
    "iter_batches",
    "next_offset_after",
    "parse_batch_header",
    "read_control_record",
]

LOG_OVERHEAD = 12
"""Bytes before ``batchLength`` counts: the base offset and the length itself."""
BATCH_HEADER_SIZE = 61
"""Bytes from the base offset to the first record (Kafka's ``RECORD_BATCH_OVERHEAD``)."""

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_CURRENT_MAGIC = 2
_LEGACY_MAGICS = (0, 1)
# Kafka refuses any size field below the smallest legacy record (LegacyRecord's
# RECORD_OVERHEAD_V0) before it even looks at the magic byte.
_MIN_SIZE_FIELD = 14

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_SPAN = struct.Struct(">qi4xb4xhi")
"""The header up to ``lastOffsetDelta``: base offset, length, (epoch), magic, (CRC),
attributes, last offset delta."""
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_CONTROL_KEY_VERSION = 0
_END_TXN_MARKER_VERSION = 0


class Compression(IntEnum):
    """Codec ids in attribute bits 0-2 (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attribute bit 3: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Type in a control record's key (Kafka's ``ControlRecordType``).

    Only the transaction markers matter for a user partition; Kafka's KRaft control types
    (2 and up, written only to the metadata log) read as ``UNKNOWN``, which Kafka's own
    consumers ignore too.
    """

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


class CorruptRecordBatchError(RemoteProtocolError):
    """Bytes that claim to be a record batch but cannot be one (bad size, magic, codec...)."""

    error_code = KafkaError.CORRUPT_MESSAGE


class LegacyMessageFormatError(RemoteProtocolError):
    """A magic 0 or 1 message set where a v2 batch was expected.

    tierproxy stores and serves only magic 2 (Kafka 0.11+ and every broker that supports
    tiered storage); old message sets are refused with this error, never reinterpreted.
    """

    error_code = KafkaError.CORRUPT_MESSAGE

    def __init__(self, *, magic: int, position: int) -> None:
        super().__init__(
            f"legacy message format (magic {magic}) at position {position}: only record "
            "batch v2 is supported"
        )
        self.magic = magic
        self.position = position


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchHeader:
    """The fixed 61-byte header of one v2 batch, as stored (no field is interpreted)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        """Offset of the last record, which survives compaction even if the record does not."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset that follows this batch."""
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Compaction set ``first_timestamp`` to the tombstone delete horizon (KIP-534)."""
        return bool(self.attributes & _DELETE_HORIZON_MASK)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """A transaction marker; ``coordinator_epoch`` is -1 for types other than ABORT/COMMIT."""

    type: ControlType
    coordinator_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One record to put in a batch built by :func:`build_record_batch`.

    ``offset_delta`` defaults to the record's index in the batch; set it to leave gaps the
    way compaction does. Header values, keys and values may be ``None`` (null on the wire).
    """

    value: bytes | None
    timestamp: int
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    offset_delta: int | None = None


def _check_magic(magic: int, position: int) -> None:
    if magic == _CURRENT_MAGIC:
        return
    if magic in _LEGACY_MAGICS:
        raise LegacyMessageFormatError(magic=magic, position=position)
    raise CorruptRecordBatchError(f"unknown record batch magic {magic} at position {position}")


def parse_batch_header(buf: Buffer, position: int = 0) -> BatchHeader:
    """Read the v2 batch header at ``position`` without copying ``buf``.

    Only the header is examined: the batch may extend past the end of ``buf``.

    :raises LocalProtocolError: if ``position`` is negative.
    :raises LegacyMessageFormatError: if the magic byte is 0 or 1.
    :raises CorruptRecordBatchError: if the header is truncated, the magic is unknown, or
        the length, codec or record count cannot be right.
    """
    if position < 0:
        raise LocalProtocolError(f"negative batch position {position}")
    available = len(buf) - position
    if available > _MAGIC_OFFSET:
        _check_magic(buf[position + _MAGIC_OFFSET], position)
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordBatchError(
            f"record batch header at position {position} is truncated: "
            f"{max(available, 0)} of {BATCH_HEADER_SIZE} bytes"
        )
    (
        base_offset,
        batch_length,
        partition_leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = _HEADER.unpack_from(buf, position)
    if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordBatchError(
            f"record batch at position {position} declares {batch_length} bytes, less than "
            f"its own header"
        )
    if attributes & _COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptRecordBatchError(
            f"record batch at position {position} has unknown compression codec "
            f"{attributes & _COMPRESSION_MASK}"
        )
    if record_count < 0:
        raise CorruptRecordBatchError(
            f"record batch at position {position} has negative record count {record_count}"
        )
    return BatchHeader(
        base_offset=base_offset,
        batch_length=batch_length,
        partition_leader_epoch=partition_leader_epoch,
        magic=magic,
        crc=crc,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=record_count,
    )


def iter_batches(buf: Buffer | Buffers, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf`` from ``start``.

    A Fetch response may end in the middle of a batch (the broker cuts at the byte limit),
    so a partial trailing batch ends the iteration quietly, as in Kafka's
    ``ByteBufferLogInputStream``. CRCs are not checked here: see :func:`batch_crc_ok`.

    :raises LocalProtocolError: if ``start`` is negative.
    :raises LegacyMessageFormatError: at a complete magic 0/1 message set.
    :raises CorruptRecordBatchError: at a size field no batch can have, or a bad header.
    """
    for position, _base, _last, _end in iter_batch_spans(buf, start):
        yield position, parse_batch_header(*_header_at(buf, position))


def _header_at(buf: Buffer | Buffers, position: int) -> tuple[Buffer, int]:
    """A buffer holding the batch header at ``position`` of ``buf``, and where it starts
    there: ``buf`` itself, or for records in pieces the piece it lies in."""
    if isinstance(buf, Buffers):
        return buf.locate(position, BATCH_HEADER_SIZE) if position >= 0 else (b"", position)
    return buf, position


def iter_batch_spans(buf: Buffer | Buffers, start: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(position, base_offset, last_offset, end)`` for each complete batch in
    ``buf`` from ``start``: :func:`iter_batches` without the header objects.

    The read path scans every batch of every Fetch it serves (high watermark, byte limits),
    so this scan builds no :class:`BatchHeader`. Headers are checked as :func:`batch_span`
    says.

    :raises LocalProtocolError: if ``start`` is negative.
    :raises LegacyMessageFormatError: at a complete magic 0/1 message set.
    :raises CorruptRecordBatchError: at a size field no batch can have, or a bad header.
    """
    if start < 0:
        raise LocalProtocolError(f"negative batch position {start}")
    position = start
    end = len(buf)
    while end - position > _MAGIC_OFFSET:
        head, at = _header_at(buf, position)
        (batch_length,) = _LENGTH.unpack_from(head, at + 8)
        if batch_length < _MIN_SIZE_FIELD:
            raise CorruptRecordBatchError(
                f"record batch at position {position} declares {batch_length} bytes, less "
                f"than the smallest record ({_MIN_SIZE_FIELD})"
            )
        if end - position < LOG_OVERHEAD + batch_length:
            return
        base_offset, last_offset, size = batch_span(head, at)
        yield position, base_offset, last_offset, position + size
        position += size


def batch_span(buf: Buffer | Buffers, position: int) -> tuple[int, int, int]:
    """``(base_offset, last_offset, size)`` of the batch whose header is at ``position``:
    where a batch starts and ends, without the header object of :func:`parse_batch_header`.

    The checks are those of :func:`parse_batch_header` but the record count's (which says
    nothing about where the batch ends); a header that fails one is handed to it, so the
    error is the same.

    :raises LegacyMessageFormatError: if the magic byte is 0 or 1.
    :raises CorruptRecordBatchError: if the header is truncated, the magic is unknown, or
        the length or codec cannot be right.
    """
    buf, position = _header_at(buf, position)
    if position < 0 or len(buf) - position < BATCH_HEADER_SIZE:
        parse_batch_header(buf, position)  # raises: negative or truncated
    base_offset, batch_length, magic, attributes, last_offset_delta = _SPAN.unpack_from(
        buf, position
    )
    if (
        magic != _CURRENT_MAGIC
        or batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD
        or attributes & _COMPRESSION_MASK > Compression.ZSTD
    ):
        parse_batch_header(buf, position)  # raises the error that fits
    return base_offset, base_offset + last_offset_delta, LOG_OVERHEAD + batch_length


_Records = TypeVar(
    "_Records",
    bytes,
    memoryview,
    bytes | memoryview,
    memoryview | Buffers,
    bytes | memoryview | Buffers,
)
"""Records as a Fetch carries them: the functions that cut them return a slice of the same
kind, so a view of a cached chunk stays a view, and records in pieces stay views of their
chunks (no copy)."""


def batches_below(records: _Records, max_offset: int) -> _Records:
    """The whole batches of ``records`` that start below ``max_offset`` (no copy if all do).

    A batch is never split: one that starts below ``max_offset`` and ends above it is kept,
    as Kafka returns whole batches up to the high watermark or last stable offset.
    """
    end = 0
    for _position, base_offset, _last, batch_end in iter_batch_spans(records):
        if base_offset >= max_offset:
            break
        end = batch_end
    return records if end == len(records) else records[:end]


def next_offset_after(records: Buffer | Buffers) -> int:
    """The offset after the last whole batch of ``records``; -1 when there is none."""
    last = -1
    for _position, _base, last_offset, _end in iter_batch_spans(records):
        last = last_offset + 1
    return last


def fit_batches(records: _Records, room: int, *, at_least_one: bool) -> _Records:
    """The leading whole batches of ``records`` that fit in ``room`` bytes; with
    ``at_least_one``, the first batch even if it alone is larger (KIP-74: a response that
    would otherwise be empty carries one batch, so a large record can always be read)."""
    if len(records) <= room:
        return records
    end = 0
    for _position, _base, _last, stop in iter_batch_spans(records):
        if stop > room and not (at_least_one and end == 0):
            break
        end = stop
    return records[:end]


def batch_crc_ok(buf: Buffer, position: int, header: BatchHeader) -> bool:
    """Whether the CRC-32C stored in ``header`` matches the batch bytes at ``position``.

    Kafka's CRC covers the attributes to the end of the batch, leaving out the partition
    leader epoch so that brokers can stamp it without recomputing. A batch that does not
    fit entirely in ``buf`` is not OK.
    """
    end = position + header.size
    if position < 0 or end > len(buf):
        return False
    computed: int = crc32c.crc32c(memoryview(buf)[position + _ATTRIBUTES_OFFSET : end])
    return computed == header.crc


def read_control_record(buf: Buffer, position: int, header: BatchHeader) -> ControlRecord:
    """Decode the transaction marker in the control batch at ``position``.

    A control batch holds exactly one record: key ``version i16, type i16``; for ABORT and
    COMMIT the value is ``version i16, coordinatorEpoch i32`` (Kafka's
    ``ControlRecordType`` and ``EndTransactionMarker``; newer versions only append fields).

    :raises LocalProtocolError: if ``header`` is not a control batch.
    :raises CorruptRecordBatchError: if the batch is compressed, truncated, empty, or its
        record does not follow the control-record schema.
    """
    if not header.is_control:
        raise LocalProtocolError(f"batch at position {position} is not a control batch")
    if header.compression is not Compression.NONE:
        raise CorruptRecordBatchError(
            f"control batch at position {position} is compressed ({header.compression.name})"
        )
    if header.record_count < 1:
        raise CorruptRecordBatchError(f"control batch at position {position} has no record")
    end = position + header.size
    if position < 0 or end > len(buf):
        raise CorruptRecordBatchError(f"control batch at position {position} is truncated")
    view = memoryview(buf)[:end]
    try:
        return _read_control_record(view, position)
    except VarintError as err:
        raise CorruptRecordBatchError(
            f"control record in batch at position {position}: {err}"
        ) from err


def _read_control_record(view: memoryview, position: int) -> ControlRecord:
    body_length, cursor = decode_varint(view, position + BATCH_HEADER_SIZE)
    body_end = cursor + body_length
    if body_length < 0 or body_end > len(view):
        raise CorruptRecordBatchError(
            f"control record in batch at position {position} has bad length {body_length}"
        )
    cursor += 1  # record attributes: unused by Kafka
    _, cursor = decode_varlong(view, cursor)  # timestamp delta
    _, cursor = decode_varint(view, cursor)  # offset delta
    key, cursor = _read_field(view, cursor, body_end, position, "key")
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordBatchError(
            f"control record in batch at position {position} has no valid key"
        )
    key_version, type_id = _CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise CorruptRecordBatchError(
            f"control record in batch at position {position} has key version {key_version}"
        )
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        return ControlRecord(type=ControlType.UNKNOWN, coordinator_epoch=-1)
    value, cursor = _read_field(view, cursor, body_end, position, "value")
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptRecordBatchError(
            f"transaction marker in batch at position {position} has no valid value"
        )
    value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordBatchError(
            f"transaction marker in batch at position {position} has version {value_version}"
        )
    return ControlRecord(type=ControlType(type_id), coordinator_epoch=coordinator_epoch)


def _read_field(
    view: memoryview, cursor: int, body_end: int, position: int, name: str
) -> tuple[memoryview | None, int]:
    """A varint-length-prefixed key or value (None if null) and the position after it."""
    length, start = decode_varint(view, cursor)
    if length < 0:
        return None, start
    if start + length > body_end:
        raise CorruptRecordBatchError(
            f"control record {name} in batch at position {position} overruns the record"
        )
    return view[start : start + length], start + length


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def _encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    parts = [
        b"\x00",  # attributes: no record-level attribute is defined
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
        _encode_bytes(record.key),
        _encode_bytes(record.value),
        encode_varint(len(record.headers)),
    ]
    for header_key, header_value in record.headers:
        parts.append(_encode_bytes(header_key.encode("utf-8")))
        parts.append(_encode_bytes(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _assemble(
    *,
    base_offset: int,
    records: Sequence[Record],
    attributes: int,
    compression: Compression,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    max_timestamp: int | None,
) -> bytes:
    if not records:
        raise LocalProtocolError("a record batch needs at least one record")
    first_timestamp = records[0].timestamp
    encoded = []
    previous_delta = -1
    for index, record in enumerate(records):
        delta = index if record.offset_delta is None else record.offset_delta
        if delta <= previous_delta:
            raise LocalProtocolError(
                f"record offset deltas must increase: {delta} follows {previous_delta}"
            )
        previous_delta = delta
        encoded.append(_encode_record(record, delta, record.timestamp - first_timestamp))
    payload = b"".join(encoded)
    if compression is Compression.GZIP:
        payload = gzip.compress(payload, mtime=0)
    elif compression is not Compression.NONE:
        raise LocalProtocolError(
            f"the batch builder supports NONE and GZIP, not {compression.name}"
        )
    if max_timestamp is None:
        max_timestamp = max(record.timestamp for record in records)
    batch = bytearray(BATCH_HEADER_SIZE)
    try:
        _HEADER.pack_into(
            batch,
            0,
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            _CURRENT_MAGIC,
            0,
            attributes | compression,
            previous_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as err:
        raise LocalProtocolError(f"record batch field out of range: {err}") from err
    batch += payload
    struct.pack_into(
        ">I", batch, _CRC_OFFSET, crc32c.crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:])
    )
    return bytes(batch)


def build_record_batch(
    *,
    base_offset: int,
    records: Sequence[Record],
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
) -> bytes:
    """A valid v2 batch holding ``records``, as a producer (or a broker's log) would have it.

    Tests and synthetic data need batches that real brokers and clients accept without a
    Java toolchain. ``max_timestamp`` defaults to the largest record timestamp (set it to
    the append time for ``LOG_APPEND_TIME``); ``first_timestamp`` is the first record's.

    :raises LocalProtocolError: if ``records`` is empty, offset deltas do not increase, a
        field is out of range, or ``compression`` is other than NONE or GZIP.
    """
    attributes = _TRANSACTIONAL_MASK if is_transactional else 0
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_MASK
    return _assemble(
        base_offset=base_offset,
        records=records,
        attributes=attributes,
        compression=compression,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        max_timestamp=max_timestamp,
    )


def build_control_batch(
    *,
    base_offset: int,
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (transactional + control, one uncompressed record).

    This is what a broker appends when a transaction ends; tests use it to build
    partitions with aborted and committed transactions.

    :raises LocalProtocolError: if ``control_type`` is not ABORT or COMMIT, or a field is
        out of range.
    """
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise LocalProtocolError(f"a transaction marker is ABORT or COMMIT, not {control_type}")
    try:
        key = _CONTROL_KEY.pack(_CONTROL_KEY_VERSION, control_type)
        value = _CONTROL_VALUE.pack(_END_TXN_MARKER_VERSION, coordinator_epoch)
    except struct.error as err:
        raise LocalProtocolError(f"control record field out of range: {err}") from err
    return _assemble(
        base_offset=base_offset,
        records=[Record(key=key, value=value, timestamp=timestamp)],
        attributes=_TRANSACTIONAL_MASK | _CONTROL_MASK,
        compression=Compression.NONE,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        max_timestamp=timestamp,
    )
