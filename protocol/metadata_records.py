"""KIP-405 ``__remote_log_metadata`` record formats, the flat-file store, committed offsets.

Everything here follows the KIP text (seed 000), not the later drift of Kafka's shipped
manager (see docs/architecture.md "Metadata"):

- A metadata topic record has a null key and the value ``type, version, data``: ``type``
  and ``version`` are unsigned varints (the schema's ``apiKey`` and version, 0 for all),
  ``data`` is the schema in Kafka's non-flexible encoding: ``string`` = int16 length +
  UTF-8, ``uuid`` = 16 bytes (most significant half first), arrays = int32 count, and
  big-endian ``int8``/``int32``/``int64``. Types: 0 RemoteLogSegmentMetadataRecord,
  1 RemoteLogSegmentMetadataRecordUpdate, 2 DeletePartitionStateRecord, and tierproxy's
  own 3 RemoteLogStartOffsetRecord: the whole log's start moved (a DeleteRecords, or the
  broker deleting data before it was tiered), which Kafka keeps in its log (its
  ``logStartOffset``) and an unmodified broker cannot keep for the remote tier.
- The flat-file store keeps, per user partition, ``magic, topic-id,
  metadata-topic-offset`` followed by entries framed the same way, with the smaller
  "Stored" schemas (the partition is implied by the file): 0
  RemoteLogSegmentMetadataRecordStored, 1 DeletePartitionStateRecord. The KIP leaves the
  header widths open ("refine the stored format"); tierproxy uses ``magic`` int8 = 0,
  the topic id as a uuid and the offset as int64.
- The committed offsets file holds one ``<partition-no> <offset>`` line per metadata
  topic partition.

The state enums are the wire values of KIP-405's ``RemoteLogState`` and
``RemotePartitionState`` (int8 in the schemas). Decoders never trust a count or a length
they have not checked against the bytes left, and fail with :class:`MetadataRecordError`
naming the record and field.
"""

from __future__ import annotations

import operator
import re
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

from protocol.errors import LocalProtocolError, ProtocolError
from protocol.varint import Buffer, VarintError, decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "FLAT_FILE_MAGIC",
    "DeletePartitionStateRecord",
    "DeletePartitionStateRecordStored",
    "FlatFileColumns",
    "FlatFileSnapshot",
    "MetadataRecord",
    "MetadataRecordError",
    "RemoteLogSegmentMetadataRecord",
    "RemoteLogSegmentMetadataRecordStored",
    "RemoteLogSegmentMetadataUpdateRecord",
    "RemoteLogSegmentState",
    "RemoteLogStartOffsetRecord",
    "RemoteLogStartOffsetRecordStored",
    "RemotePartitionDeleteState",
    "StoredMetadataRecord",
    "decode_committed_offsets",
    "decode_flat_file",
    "decode_flat_file_columns",
    "decode_metadata_record",
    "decode_stored_record",
    "encode_committed_offsets",
    "encode_flat_file",
    "encode_metadata_record",
    "encode_stored_record",
    "read_stored_record",
]

FLAT_FILE_MAGIC = 0
"""Version of tierproxy's flat-file store layout (the KIP's ``magic``)."""

_SCHEMA_VERSION = 0
_INT16_MAX = (1 << 15) - 1


class RemoteLogSegmentState(IntEnum):
    """State of one remote log segment copy (KIP-405 ``RemoteLogState``)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(IntEnum):
    """State of a deleted partition's clean-up (KIP-405 ``RemotePartitionState``)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class MetadataRecordError(ProtocolError):
    """A metadata record value, flat-file store or committed offsets file that cannot be read.

    Whoever wrote the bytes (another proxy, the pipeline, an old version of the file) is
    at fault; the message names the record type and field so that the operator can find
    the offending record or file.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataRecord:
    """apiKey 0: a segment copy starts (or its full metadata is restated)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    leader_epoch: int
    max_timestamp: int
    event_timestamp: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    """``(leader epoch, start offset)`` pairs within the segment."""
    segment_size_in_bytes: int
    state: RemoteLogSegmentState


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataUpdateRecord:
    """apiKey 1: a segment moves to another state (copy finished, deletion...)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    leader_epoch: int
    event_timestamp: int
    state: RemoteLogSegmentState


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletePartitionStateRecord:
    """apiKey 2: a deleted partition's remote data is marked, being, or done being removed."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    epoch: int
    event_timestamp: int
    state: RemotePartitionDeleteState


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogStartOffsetRecord:
    """apiKey 3 (tierproxy): offsets below ``start_offset`` are deleted from the whole log;
    the remote tier never serves them again and their segments are to be deleted."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    event_timestamp: int


MetadataRecord: TypeAlias = (
    RemoteLogSegmentMetadataRecord
    | RemoteLogSegmentMetadataUpdateRecord
    | DeletePartitionStateRecord
    | RemoteLogStartOffsetRecord
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataRecordStored:
    """Flat-file apiKey 0: a segment's materialised metadata, partition implied by the file."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    leader_epoch: int
    max_timestamp: int
    event_timestamp: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    state: RemoteLogSegmentState


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletePartitionStateRecordStored:
    """Flat-file apiKey 1: the partition's deletion state, partition implied by the file."""

    epoch: int
    event_timestamp: int
    state: RemotePartitionDeleteState


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogStartOffsetRecordStored:
    """Flat-file apiKey 2: the whole log's start, partition implied by the file."""

    start_offset: int
    event_timestamp: int


StoredMetadataRecord: TypeAlias = (
    RemoteLogSegmentMetadataRecordStored
    | DeletePartitionStateRecordStored
    | RemoteLogStartOffsetRecordStored
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlatFileSnapshot:
    """One user partition's flat-file store: where consumption stopped, and the entries."""

    topic_id: uuid.UUID
    metadata_topic_offset: int
    """Offset in the ``__remote_log_metadata`` partition that the entries reflect."""
    entries: tuple[StoredMetadataRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FlatFileColumns:
    """A flat-file store decoded for bulk loading: the segment entries field by field (item
    ``i`` of every column belongs to the file's ``i``-th segment entry), the other entries
    as records.

    It holds what :func:`decode_flat_file` decodes from the same bytes (:meth:`segment_entry`
    rebuilds an entry), and a file that one refuses the other refuses with the same error.
    """

    topic_id: uuid.UUID
    metadata_topic_offset: int
    segment_ids: Sequence[bytes]
    """The 16 bytes of each segment UUID (``uuid.UUID(bytes=...)``)."""
    start_offsets: Sequence[int]
    end_offsets: Sequence[int]
    leader_epochs: Sequence[int]
    max_timestamps: Sequence[int]
    event_timestamps: Sequence[int]
    first_epochs: Sequence[int]
    """The epoch of each segment's first SegmentLeaderEpochs entry (-1 if it has none)."""
    first_epoch_offsets: Sequence[int]
    """The offset of that entry (-1 if it has none)."""
    sizes: Sequence[int]
    states: Sequence[int]
    """Each a :class:`RemoteLogSegmentState` value."""
    epochs: Mapping[int, tuple[tuple[int, int], ...]]
    """The whole SegmentLeaderEpochs of each segment that has not exactly one entry (the
    others have ``((first_epochs[i], first_epoch_offsets[i]),)``)."""
    others: tuple[DeletePartitionStateRecordStored | RemoteLogStartOffsetRecordStored, ...]
    """The entries that are not segments, in file order."""

    def __len__(self) -> int:
        """The number of segment entries."""
        return len(self.start_offsets)

    def segment_entry(self, i: int) -> RemoteLogSegmentMetadataRecordStored:
        """The ``i``-th segment entry, as :func:`decode_flat_file` decodes it."""
        epochs = self.epochs.get(i)
        if epochs is None:
            epochs = ((self.first_epochs[i], self.first_epoch_offsets[i]),)
        return RemoteLogSegmentMetadataRecordStored(
            segment_id=uuid.UUID(bytes=self.segment_ids[i]),
            start_offset=self.start_offsets[i],
            end_offset=self.end_offsets[i],
            leader_epoch=self.leader_epochs[i],
            max_timestamp=self.max_timestamps[i],
            event_timestamp=self.event_timestamps[i],
            segment_leader_epochs=epochs,
            segment_size_in_bytes=self.sizes[i],
            state=RemoteLogSegmentState(self.states[i]),
        )


# Fixed-width runs of each schema, in field order.
_ID_PARTITION_SEGMENT = struct.Struct(">16si16s")  # topicId, partition, segmentId
_ID_PARTITION = struct.Struct(">16si")  # topicId, partition
_SEGMENT_BODY = struct.Struct(">qqiqq")  # start, end, leaderEpoch, maxTimestamp, eventTimestamp
_EPOCH_ENTRY = struct.Struct(">iq")  # leaderEpoch, offset
_SIZE_AND_STATE = struct.Struct(">ib")  # segmentSizeInBytes, state
_UPDATE_BODY = struct.Struct(">iqb")  # leaderEpoch, eventTimestamp, state
_PARTITION_STATE_BODY = struct.Struct(">iqb")  # epoch, eventTimestamp, state
_LOG_START_BODY = struct.Struct(">qq")  # startOffset, eventTimestamp
_STORED_SEGMENT_HEAD = struct.Struct(">16sqqiqq")  # segmentId + the segment body
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FLAT_FILE_HEADER = struct.Struct(">b16sq")  # magic, topicId, metadataTopicOffset
_ONE_EPOCH_SEGMENT = struct.Struct(">2s16sqqiqqiiqib")
"""A whole stored segment entry with exactly one leader epoch, as Kafka writes nearly all
of them: frame (type 0, version 0), segment id, offsets, leader epoch, timestamps, epoch
count, the epoch and its offset, size and state (the columns of :class:`FlatFileColumns`)."""
_ONE_EPOCH_FRAME = encode_unsigned_varint(0) + encode_unsigned_varint(_SCHEMA_VERSION)
_COUNT_AT = len(_ONE_EPOCH_FRAME) + _STORED_SEGMENT_HEAD.size
"""Where a stored segment entry's epoch count is, from the entry's start."""
_OTHER_ENTRY_SIZES = (
    0,
    len(_ONE_EPOCH_FRAME) + _PARTITION_STATE_BODY.size,
    len(_ONE_EPOCH_FRAME) + _LOG_START_BODY.size,
    2 * len(_ONE_EPOCH_FRAME) + _PARTITION_STATE_BODY.size + _LOG_START_BODY.size,
)
"""Sizes of what the writer puts after the segments: nothing, a deletion state, a log
start, or both."""
_SEGMENT_STATES = frozenset(int(state) for state in RemoteLogSegmentState)
_COMMITTED_OFFSET_LINE = re.compile(r"([0-9]+)[ \t]+([0-9]+)")


# --- writing --------------------------------------------------------------------------


class _Writer:
    """Collects the parts of one encoding; struct range errors become our own misuse."""

    __slots__ = ("parts", "what")

    def __init__(self, api_key: int, what: str) -> None:
        self.what = what
        self.parts = [encode_unsigned_varint(api_key), encode_unsigned_varint(_SCHEMA_VERSION)]

    def fixed(self, layout: struct.Struct, *values: Any) -> None:
        try:
            self.parts.append(layout.pack(*values))
        except struct.error as err:
            raise LocalProtocolError(f"{self.what}: field out of range: {err}") from err

    def string(self, value: str) -> None:
        data = value.encode("utf-8")
        if len(data) > _INT16_MAX:
            raise LocalProtocolError(f"{self.what}: string of {len(data)} bytes is too long")
        self.parts.append(_INT16.pack(len(data)) + data)

    def epochs(self, entries: tuple[tuple[int, int], ...]) -> None:
        self.fixed(_INT32, len(entries))
        for epoch, offset in entries:
            self.fixed(_EPOCH_ENTRY, epoch, offset)

    def result(self) -> bytes:
        return b"".join(self.parts)


def encode_metadata_record(record: MetadataRecord) -> bytes:
    """The ``__remote_log_metadata`` record value for ``record`` (``type, version, data``).

    :raises LocalProtocolError: if a field does not fit its wire type.
    """
    if isinstance(record, RemoteLogSegmentMetadataRecord):
        writer = _Writer(0, "RemoteLogSegmentMetadataRecord")
        writer.string(record.topic)
        writer.fixed(
            _ID_PARTITION_SEGMENT, record.topic_id.bytes, record.partition, record.segment_id.bytes
        )
        writer.fixed(
            _SEGMENT_BODY,
            record.start_offset,
            record.end_offset,
            record.leader_epoch,
            record.max_timestamp,
            record.event_timestamp,
        )
        writer.epochs(record.segment_leader_epochs)
        writer.fixed(_SIZE_AND_STATE, record.segment_size_in_bytes, record.state)
    elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
        writer = _Writer(1, "RemoteLogSegmentMetadataRecordUpdate")
        writer.string(record.topic)
        writer.fixed(
            _ID_PARTITION_SEGMENT, record.topic_id.bytes, record.partition, record.segment_id.bytes
        )
        writer.fixed(_UPDATE_BODY, record.leader_epoch, record.event_timestamp, record.state)
    elif isinstance(record, DeletePartitionStateRecord):
        writer = _Writer(2, "DeletePartitionStateRecord")
        writer.string(record.topic)
        writer.fixed(_ID_PARTITION, record.topic_id.bytes, record.partition)
        writer.fixed(_PARTITION_STATE_BODY, record.epoch, record.event_timestamp, record.state)
    else:
        writer = _Writer(3, "RemoteLogStartOffsetRecord")
        writer.string(record.topic)
        writer.fixed(_ID_PARTITION, record.topic_id.bytes, record.partition)
        writer.fixed(_LOG_START_BODY, record.start_offset, record.event_timestamp)
    return writer.result()


def encode_stored_record(record: StoredMetadataRecord) -> bytes:
    """One flat-file store entry (``type, version, data`` with the "Stored" schemas).

    :raises LocalProtocolError: if a field does not fit its wire type.
    """
    if isinstance(record, RemoteLogSegmentMetadataRecordStored):
        writer = _Writer(0, "RemoteLogSegmentMetadataRecordStored")
        writer.fixed(
            _STORED_SEGMENT_HEAD,
            record.segment_id.bytes,
            record.start_offset,
            record.end_offset,
            record.leader_epoch,
            record.max_timestamp,
            record.event_timestamp,
        )
        writer.epochs(record.segment_leader_epochs)
        writer.fixed(_SIZE_AND_STATE, record.segment_size_in_bytes, record.state)
    elif isinstance(record, DeletePartitionStateRecordStored):
        writer = _Writer(1, "DeletePartitionStateRecordStored")
        writer.fixed(_PARTITION_STATE_BODY, record.epoch, record.event_timestamp, record.state)
    else:
        writer = _Writer(2, "RemoteLogStartOffsetRecordStored")
        writer.fixed(_LOG_START_BODY, record.start_offset, record.event_timestamp)
    return writer.result()


def encode_flat_file(snapshot: FlatFileSnapshot) -> bytes:
    """The whole flat-file store of one user partition.

    :raises LocalProtocolError: if a field does not fit its wire type.
    """
    try:
        header = _FLAT_FILE_HEADER.pack(
            FLAT_FILE_MAGIC, snapshot.topic_id.bytes, snapshot.metadata_topic_offset
        )
    except struct.error as err:
        raise LocalProtocolError(f"flat-file store header out of range: {err}") from err
    return header + b"".join(encode_stored_record(entry) for entry in snapshot.entries)


def encode_committed_offsets(offsets: Mapping[int, int]) -> str:
    """The committed offsets file: ``<partition-no> <offset>`` per line, by partition.

    :raises LocalProtocolError: on a negative partition or offset.
    """
    lines = []
    for partition in sorted(offsets):
        offset = offsets[partition]
        if partition < 0 or offset < 0:
            raise LocalProtocolError(f"committed offset {partition} {offset} is negative")
        lines.append(f"{partition} {offset}\n")
    return "".join(lines)


# --- reading --------------------------------------------------------------------------


class _Reader:
    """A cursor over one value that fails with a :class:`MetadataRecordError` naming ``what``."""

    __slots__ = ("buf", "position", "what")

    def __init__(self, buf: memoryview, position: int, what: str) -> None:
        self.buf = buf
        self.position = position
        self.what = what

    def error(self, problem: str) -> MetadataRecordError:
        return MetadataRecordError(f"{self.what} at byte {self.position}: {problem}")

    def fixed(self, layout: struct.Struct, field: str) -> tuple[Any, ...]:
        if self.position + layout.size > len(self.buf):
            raise self.error(f"truncated in {field}")
        values = layout.unpack_from(self.buf, self.position)
        self.position += layout.size
        return values

    def string(self, field: str) -> str:
        (length,) = self.fixed(_INT16, field)
        if length < 0:
            raise self.error(f"{field} is null or has negative length {length}")
        end = self.position + length
        if end > len(self.buf):
            raise self.error(f"truncated in {field}")
        try:
            text = str(self.buf[self.position : end], "utf-8")
        except UnicodeDecodeError as err:
            raise self.error(f"{field} is not UTF-8") from err
        self.position = end
        return text

    def epochs(self, field: str) -> tuple[tuple[int, int], ...]:
        (count,) = self.fixed(_INT32, field)
        if count < 0 or self.position + count * _EPOCH_ENTRY.size > len(self.buf):
            raise self.error(f"{field} count {count} does not fit the bytes left")
        end = self.position + count * _EPOCH_ENTRY.size
        entries = tuple(
            (epoch, offset)
            for epoch, offset in _EPOCH_ENTRY.iter_unpack(self.buf[self.position : end])
        )
        self.position = end
        return entries

    def segment_state(self, value: int) -> RemoteLogSegmentState:
        try:
            return RemoteLogSegmentState(value)
        except ValueError as err:
            raise self.error(f"unknown RemoteLogState {value}") from err

    def partition_state(self, value: int) -> RemotePartitionDeleteState:
        try:
            return RemotePartitionDeleteState(value)
        except ValueError as err:
            raise self.error(f"unknown RemotePartitionState {value}") from err


def _read_frame(buf: memoryview, position: int, kind: str) -> tuple[int, int]:
    """``(api key, position of data)`` after checking the version is one we know."""
    try:
        api_key, cursor = decode_unsigned_varint(buf, position)
        version, cursor = decode_unsigned_varint(buf, cursor)
    except VarintError as err:
        raise MetadataRecordError(f"{kind} frame: {err}") from err
    if version != _SCHEMA_VERSION:
        raise MetadataRecordError(f"{kind} type {api_key} has unsupported version {version}")
    return api_key, cursor


def _read_segment_record(reader: _Reader) -> RemoteLogSegmentMetadataRecord:
    topic = reader.string("topicName")
    topic_id, partition, segment_id = reader.fixed(_ID_PARTITION_SEGMENT, "RemoteLogSegmentId")
    start, end, leader_epoch, max_timestamp, event_timestamp = reader.fixed(
        _SEGMENT_BODY, "offsets and timestamps"
    )
    epochs = reader.epochs("SegmentLeaderEpochs")
    size, state = reader.fixed(_SIZE_AND_STATE, "SegmentSizeInBytes/RemoteLogState")
    return RemoteLogSegmentMetadataRecord(
        topic=topic,
        topic_id=uuid.UUID(bytes=topic_id),
        partition=partition,
        segment_id=uuid.UUID(bytes=segment_id),
        start_offset=start,
        end_offset=end,
        leader_epoch=leader_epoch,
        max_timestamp=max_timestamp,
        event_timestamp=event_timestamp,
        segment_leader_epochs=epochs,
        segment_size_in_bytes=size,
        state=reader.segment_state(state),
    )


def _read_update_record(reader: _Reader) -> RemoteLogSegmentMetadataUpdateRecord:
    topic = reader.string("topic")
    topic_id, partition, segment_id = reader.fixed(_ID_PARTITION_SEGMENT, "RemoteLogSegmentId")
    leader_epoch, event_timestamp, state = reader.fixed(_UPDATE_BODY, "epoch/timestamp/state")
    return RemoteLogSegmentMetadataUpdateRecord(
        topic=topic,
        topic_id=uuid.UUID(bytes=topic_id),
        partition=partition,
        segment_id=uuid.UUID(bytes=segment_id),
        leader_epoch=leader_epoch,
        event_timestamp=event_timestamp,
        state=reader.segment_state(state),
    )


def _read_partition_state_record(reader: _Reader) -> DeletePartitionStateRecord:
    topic = reader.string("name")
    topic_id, partition = reader.fixed(_ID_PARTITION, "TopicIdPartition")
    epoch, event_timestamp, state = reader.fixed(_PARTITION_STATE_BODY, "epoch/timestamp/state")
    return DeletePartitionStateRecord(
        topic=topic,
        topic_id=uuid.UUID(bytes=topic_id),
        partition=partition,
        epoch=epoch,
        event_timestamp=event_timestamp,
        state=reader.partition_state(state),
    )


def _read_stored_segment(reader: _Reader) -> RemoteLogSegmentMetadataRecordStored:
    segment_id, start, end, leader_epoch, max_timestamp, event_timestamp = reader.fixed(
        _STORED_SEGMENT_HEAD, "segment id, offsets and timestamps"
    )
    epochs = reader.epochs("SegmentLeaderEpochs")
    size, state = reader.fixed(_SIZE_AND_STATE, "SegmentSizeInBytes/RemoteLogState")
    return RemoteLogSegmentMetadataRecordStored(
        segment_id=uuid.UUID(bytes=segment_id),
        start_offset=start,
        end_offset=end,
        leader_epoch=leader_epoch,
        max_timestamp=max_timestamp,
        event_timestamp=event_timestamp,
        segment_leader_epochs=epochs,
        segment_size_in_bytes=size,
        state=reader.segment_state(state),
    )


def _read_stored_partition_state(reader: _Reader) -> DeletePartitionStateRecordStored:
    epoch, event_timestamp, state = reader.fixed(_PARTITION_STATE_BODY, "epoch/timestamp/state")
    return DeletePartitionStateRecordStored(
        epoch=epoch, event_timestamp=event_timestamp, state=reader.partition_state(state)
    )


def _read_log_start_record(reader: _Reader) -> RemoteLogStartOffsetRecord:
    topic = reader.string("topic")
    topic_id, partition = reader.fixed(_ID_PARTITION, "TopicIdPartition")
    start_offset, event_timestamp = reader.fixed(_LOG_START_BODY, "startOffset/eventTimestamp")
    return RemoteLogStartOffsetRecord(
        topic=topic,
        topic_id=uuid.UUID(bytes=topic_id),
        partition=partition,
        start_offset=start_offset,
        event_timestamp=event_timestamp,
    )


def _read_stored_log_start(reader: _Reader) -> RemoteLogStartOffsetRecordStored:
    start_offset, event_timestamp = reader.fixed(_LOG_START_BODY, "startOffset/eventTimestamp")
    return RemoteLogStartOffsetRecordStored(
        start_offset=start_offset, event_timestamp=event_timestamp
    )


_TOPIC_READERS: dict[int, tuple[str, Callable[[_Reader], MetadataRecord]]] = {
    0: ("RemoteLogSegmentMetadataRecord", _read_segment_record),
    1: ("RemoteLogSegmentMetadataRecordUpdate", _read_update_record),
    2: ("DeletePartitionStateRecord", _read_partition_state_record),
    3: ("RemoteLogStartOffsetRecord", _read_log_start_record),
}
_STORED_READERS: dict[int, tuple[str, Callable[[_Reader], StoredMetadataRecord]]] = {
    0: ("RemoteLogSegmentMetadataRecordStored", _read_stored_segment),
    1: ("DeletePartitionStateRecordStored", _read_stored_partition_state),
    2: ("RemoteLogStartOffsetRecordStored", _read_stored_log_start),
}


def decode_metadata_record(value: Buffer) -> MetadataRecord:
    """Decode a ``__remote_log_metadata`` record value written by :func:`encode_metadata_record`.

    :raises MetadataRecordError: on an unknown type or version, truncated or trailing
        bytes, an invalid string, count or state.
    """
    view = memoryview(value)
    api_key, position = _read_frame(view, 0, "metadata record")
    if api_key not in _TOPIC_READERS:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    name, read = _TOPIC_READERS[api_key]
    reader = _Reader(view, position, name)
    record = read(reader)
    if reader.position != len(view):
        raise reader.error(f"{len(view) - reader.position} trailing bytes")
    return record


def read_stored_record(buf: Buffer, position: int = 0) -> tuple[StoredMetadataRecord, int]:
    """Decode the flat-file entry at ``position``; return it and the position after it.

    Entries carry no length of their own, so a reader walks a sequence of them this way.

    :raises MetadataRecordError: on an unknown type or version, truncated bytes, or an
        invalid count or state.
    """
    view = memoryview(buf)
    api_key, cursor = _read_frame(view, position, "stored metadata entry")
    if api_key not in _STORED_READERS:
        raise MetadataRecordError(f"unknown stored metadata entry type {api_key}")
    name, read = _STORED_READERS[api_key]
    reader = _Reader(view, cursor, name)
    record = read(reader)
    return record, reader.position


def decode_stored_record(value: Buffer) -> StoredMetadataRecord:
    """Decode one flat-file entry that must span all of ``value``.

    :raises MetadataRecordError: as :func:`read_stored_record`, or on trailing bytes.
    """
    record, end = read_stored_record(value)
    if end != len(value):
        raise MetadataRecordError(f"stored metadata entry has {len(value) - end} trailing bytes")
    return record


def decode_flat_file(data: Buffer) -> FlatFileSnapshot:
    """Decode a whole flat-file store written by :func:`encode_flat_file`.

    :raises MetadataRecordError: on a short header, an unknown magic, or a bad entry.
    """
    view = memoryview(data)
    topic_id, offset = _read_flat_file_header(view)
    entries = []
    position = _FLAT_FILE_HEADER.size
    while position < len(view):
        entry, position = read_stored_record(view, position)
        entries.append(entry)
    return FlatFileSnapshot(topic_id=topic_id, metadata_topic_offset=offset, entries=tuple(entries))


def decode_flat_file_columns(data: Buffer) -> FlatFileColumns:
    """Decode a whole flat-file store as :func:`decode_flat_file` does, into columns.

    Files laid out as :func:`encode_flat_file` writes them, one-epoch segments followed by
    at most a deletion state and a log start, are decoded by one ``struct.iter_unpack``;
    anything else entry by entry.

    :raises MetadataRecordError: as :func:`decode_flat_file`, with the same message.
    """
    view = memoryview(data)
    topic_id, offset = _read_flat_file_header(view)
    rows, position = _one_epoch_run(view, _FLAT_FILE_HEADER.size)
    epochs: dict[int, tuple[tuple[int, int], ...]] = {}
    others: list[DeletePartitionStateRecordStored | RemoteLogStartOffsetRecordStored] = []
    size, end = _ONE_EPOCH_SEGMENT.size, len(view)
    while position < end:
        if (
            view[position : position + 2] == _ONE_EPOCH_FRAME
            and position + size <= end
            and _INT32.unpack_from(view, position + _COUNT_AT)[0] == 1
        ):
            row = _ONE_EPOCH_SEGMENT.unpack_from(view, position)
            if row[-1] in _SEGMENT_STATES:
                rows.append(row)
                position += size
                continue
        entry, position = read_stored_record(view, position)
        if not isinstance(entry, RemoteLogSegmentMetadataRecordStored):
            others.append(entry)
            continue
        leader_epochs = entry.segment_leader_epochs
        if len(leader_epochs) != 1:
            epochs[len(rows)] = leader_epochs
        first_epoch, first_offset = leader_epochs[0] if leader_epochs else (-1, -1)
        rows.append(
            (
                _ONE_EPOCH_FRAME,
                entry.segment_id.bytes,
                entry.start_offset,
                entry.end_offset,
                entry.leader_epoch,
                entry.max_timestamp,
                entry.event_timestamp,
                len(leader_epochs),
                first_epoch,
                first_offset,
                entry.segment_size_in_bytes,
                int(entry.state),
            )
        )
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * 12
    return FlatFileColumns(
        topic_id=topic_id,
        metadata_topic_offset=offset,
        segment_ids=columns[1],
        start_offsets=columns[2],
        end_offsets=columns[3],
        leader_epochs=columns[4],
        max_timestamps=columns[5],
        event_timestamps=columns[6],
        first_epochs=columns[8],
        first_epoch_offsets=columns[9],
        sizes=columns[10],
        states=columns[11],
        epochs=epochs,
        others=tuple(others),
    )


def _read_flat_file_header(view: memoryview) -> tuple[uuid.UUID, int]:
    """The topic id and metadata topic offset of a flat-file store."""
    if len(view) < _FLAT_FILE_HEADER.size:
        raise MetadataRecordError(
            f"flat-file store is truncated: {len(view)} of {_FLAT_FILE_HEADER.size} header bytes"
        )
    magic, topic_id, offset = _FLAT_FILE_HEADER.unpack_from(view)
    if magic != FLAT_FILE_MAGIC:
        raise MetadataRecordError(f"flat-file store has unknown magic {magic}")
    return uuid.UUID(bytes=topic_id), offset


def _one_epoch_run(view: memoryview, start: int) -> tuple[list[tuple[Any, ...]], int]:
    """The one-epoch segment entries from ``start`` up to what the writer may put after
    them, and the position after them; none if the bytes there are not such entries.

    Decoding entry by entry reads one-epoch entries exactly ``_ONE_EPOCH_SEGMENT.size``
    bytes apart, so where every row of the run has that entry's frame, an epoch count of 1
    and a known state, it reads exactly these rows and goes on where the run ends.
    """
    size = _ONE_EPOCH_SEGMENT.size
    for tail in _OTHER_ENTRY_SIZES:
        length = len(view) - start - tail
        if length <= 0 or length % size:
            continue
        rows = list(_ONE_EPOCH_SEGMENT.iter_unpack(view[start : start + length]))
        frames = set(map(operator.itemgetter(0), rows))
        counts = set(map(operator.itemgetter(7), rows))
        states = set(map(operator.itemgetter(11), rows))
        if frames == {_ONE_EPOCH_FRAME} and counts == {1} and states <= _SEGMENT_STATES:
            return rows, start + length
    return [], start


def decode_committed_offsets(text: str) -> dict[int, int]:
    """Parse the committed offsets file (``<partition-no> <offset>`` lines; blank lines ok).

    :raises MetadataRecordError: on a line that is not two non-negative integers, or a
        repeated partition.
    """
    offsets: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _COMMITTED_OFFSET_LINE.fullmatch(line.strip())
        if match is None:
            raise MetadataRecordError(
                f"committed offsets line {number} is not '<partition> <offset>': {line!r}"
            )
        partition, offset = int(match[1]), int(match[2])
        if partition in offsets:
            raise MetadataRecordError(
                f"committed offsets line {number} repeats partition {partition}"
            )
        offsets[partition] = offset
    return offsets
