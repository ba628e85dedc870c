"""KIP-405 metadata records, flat-file store and committed offsets: round trips and refusals.

The non-flexible encoding is cross-checked against kio's primitive writers (Kafka's
``string``, ``uuid``, ``int*`` and legacy array encodings) so that the layout is not
only consistent with itself.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import writers

from protocol.errors import LocalProtocolError, ProtocolError
from protocol.metadata_records import (
    FLAT_FILE_MAGIC,
    DeletePartitionStateRecord,
    DeletePartitionStateRecordStored,
    FlatFileColumns,
    FlatFileSnapshot,
    MetadataRecord,
    MetadataRecordError,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataRecordStored,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogSegmentState,
    RemoteLogStartOffsetRecord,
    RemoteLogStartOffsetRecordStored,
    RemotePartitionDeleteState,
    StoredMetadataRecord,
    decode_committed_offsets,
    decode_flat_file,
    decode_flat_file_columns,
    decode_metadata_record,
    decode_stored_record,
    encode_committed_offsets,
    encode_flat_file,
    encode_metadata_record,
    encode_stored_record,
    read_stored_record,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UUIDS = st.uuids()
TOPICS = st.text(min_size=0, max_size=40)
EPOCHS = st.lists(st.tuples(INT32, INT64), max_size=6).map(tuple)
SEGMENT_STATES = st.sampled_from(RemoteLogSegmentState)
PARTITION_STATES = st.sampled_from(RemotePartitionDeleteState)

segment_records = st.builds(
    RemoteLogSegmentMetadataRecord,
    topic=TOPICS,
    topic_id=UUIDS,
    partition=INT32,
    segment_id=UUIDS,
    start_offset=INT64,
    end_offset=INT64,
    leader_epoch=INT32,
    max_timestamp=INT64,
    event_timestamp=INT64,
    segment_leader_epochs=EPOCHS,
    segment_size_in_bytes=INT32,
    state=SEGMENT_STATES,
)
update_records = st.builds(
    RemoteLogSegmentMetadataUpdateRecord,
    topic=TOPICS,
    topic_id=UUIDS,
    partition=INT32,
    segment_id=UUIDS,
    leader_epoch=INT32,
    event_timestamp=INT64,
    state=SEGMENT_STATES,
)
partition_records = st.builds(
    DeletePartitionStateRecord,
    topic=TOPICS,
    topic_id=UUIDS,
    partition=INT32,
    epoch=INT32,
    event_timestamp=INT64,
    state=PARTITION_STATES,
)
log_start_records = st.builds(
    RemoteLogStartOffsetRecord,
    topic=TOPICS,
    topic_id=UUIDS,
    partition=INT32,
    start_offset=INT64,
    event_timestamp=INT64,
)
metadata_records = segment_records | update_records | partition_records | log_start_records


def stored_segments_with(
    epochs: st.SearchStrategy[tuple[tuple[int, int], ...]],
) -> st.SearchStrategy[RemoteLogSegmentMetadataRecordStored]:
    """Stored segment entries whose SegmentLeaderEpochs are drawn from ``epochs``."""
    return st.builds(
        RemoteLogSegmentMetadataRecordStored,
        segment_id=UUIDS,
        start_offset=INT64,
        end_offset=INT64,
        leader_epoch=INT32,
        max_timestamp=INT64,
        event_timestamp=INT64,
        segment_leader_epochs=epochs,
        segment_size_in_bytes=INT32,
        state=SEGMENT_STATES,
    )


stored_segments = stored_segments_with(EPOCHS)
stored_partition_states = st.builds(
    DeletePartitionStateRecordStored, epoch=INT32, event_timestamp=INT64, state=PARTITION_STATES
)
stored_log_starts = st.builds(
    RemoteLogStartOffsetRecordStored, start_offset=INT64, event_timestamp=INT64
)
stored_records = stored_segments | stored_partition_states | stored_log_starts


def kio_encoding(*fields: tuple[Callable[..., None], Any]) -> bytes:
    out = io.BytesIO()
    for write, value in fields:
        write(out, value)
    return out.getvalue()


def kio_epochs(epochs: tuple[tuple[int, int], ...]) -> list[tuple[Callable[..., None], Any]]:
    fields: list[tuple[Callable[..., None], Any]] = [
        (writers.write_legacy_array_length, len(epochs))
    ]
    for epoch, offset in epochs:
        fields += [(writers.write_int32, epoch), (writers.write_int64, offset)]
    return fields


def expected_topic_value(record: MetadataRecord) -> bytes:
    """The value built field by field with kio's writers, in KIP-405 schema order."""
    w = writers
    if isinstance(record, RemoteLogSegmentMetadataRecord):
        return kio_encoding(
            (w.write_unsigned_varint, 0),
            (w.write_unsigned_varint, 0),
            (w.write_legacy_string, record.topic),
            (w.write_uuid, record.topic_id),
            (w.write_int32, record.partition),
            (w.write_uuid, record.segment_id),
            (w.write_int64, record.start_offset),
            (w.write_int64, record.end_offset),
            (w.write_int32, record.leader_epoch),
            (w.write_int64, record.max_timestamp),
            (w.write_int64, record.event_timestamp),
            *kio_epochs(record.segment_leader_epochs),
            (w.write_int32, record.segment_size_in_bytes),
            (w.write_int8, record.state),
        )
    if isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
        return kio_encoding(
            (w.write_unsigned_varint, 1),
            (w.write_unsigned_varint, 0),
            (w.write_legacy_string, record.topic),
            (w.write_uuid, record.topic_id),
            (w.write_int32, record.partition),
            (w.write_uuid, record.segment_id),
            (w.write_int32, record.leader_epoch),
            (w.write_int64, record.event_timestamp),
            (w.write_int8, record.state),
        )
    if isinstance(record, RemoteLogStartOffsetRecord):
        return kio_encoding(
            (w.write_unsigned_varint, 3),
            (w.write_unsigned_varint, 0),
            (w.write_legacy_string, record.topic),
            (w.write_uuid, record.topic_id),
            (w.write_int32, record.partition),
            (w.write_int64, record.start_offset),
            (w.write_int64, record.event_timestamp),
        )
    return kio_encoding(
        (w.write_unsigned_varint, 2),
        (w.write_unsigned_varint, 0),
        (w.write_legacy_string, record.topic),
        (w.write_uuid, record.topic_id),
        (w.write_int32, record.partition),
        (w.write_int32, record.epoch),
        (w.write_int64, record.event_timestamp),
        (w.write_int8, record.state),
    )


def expected_stored_value(record: StoredMetadataRecord) -> bytes:
    w = writers
    if isinstance(record, RemoteLogSegmentMetadataRecordStored):
        return kio_encoding(
            (w.write_unsigned_varint, 0),
            (w.write_unsigned_varint, 0),
            (w.write_uuid, record.segment_id),
            (w.write_int64, record.start_offset),
            (w.write_int64, record.end_offset),
            (w.write_int32, record.leader_epoch),
            (w.write_int64, record.max_timestamp),
            (w.write_int64, record.event_timestamp),
            *kio_epochs(record.segment_leader_epochs),
            (w.write_int32, record.segment_size_in_bytes),
            (w.write_int8, record.state),
        )
    if isinstance(record, RemoteLogStartOffsetRecordStored):
        return kio_encoding(
            (w.write_unsigned_varint, 2),
            (w.write_unsigned_varint, 0),
            (w.write_int64, record.start_offset),
            (w.write_int64, record.event_timestamp),
        )
    return kio_encoding(
        (w.write_unsigned_varint, 1),
        (w.write_unsigned_varint, 0),
        (w.write_int32, record.epoch),
        (w.write_int64, record.event_timestamp),
        (w.write_int8, record.state),
    )


# --- metadata topic records -----------------------------------------------------------


@given(metadata_records)
def test_topic_records_round_trip(record: MetadataRecord) -> None:
    value = encode_metadata_record(record)
    assert decode_metadata_record(value) == record
    assert decode_metadata_record(memoryview(bytearray(value))) == record


@given(metadata_records)
def test_topic_records_match_kafkas_non_flexible_encoding(record: MetadataRecord) -> None:
    assert encode_metadata_record(record) == expected_topic_value(record)


def test_delete_partition_record_known_bytes() -> None:
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    record = DeletePartitionStateRecord(
        topic="t",
        topic_id=topic_id,
        partition=3,
        epoch=7,
        event_timestamp=1,
        state=RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    )
    assert encode_metadata_record(record) == (
        b"\x02\x00"  # type 2, version 0 (unsigned varints)
        b"\x00\x01t"  # string: int16 length + UTF-8
        + topic_id.bytes
        + b"\x00\x00\x00\x03"  # partition
        + b"\x00\x00\x00\x07"  # epoch
        + b"\x00\x00\x00\x00\x00\x00\x00\x01"  # event timestamp
        + b"\x01"  # DELETE_PARTITION_STARTED
    )


@given(metadata_records)
def test_every_truncation_is_refused(record: MetadataRecord) -> None:
    value = encode_metadata_record(record)
    for cut in range(len(value)):
        with pytest.raises(MetadataRecordError):
            decode_metadata_record(value[:cut])


@given(metadata_records, st.binary(min_size=1, max_size=4))
def test_trailing_bytes_are_refused(record: MetadataRecord, extra: bytes) -> None:
    with pytest.raises(MetadataRecordError, match="trailing bytes"):
        decode_metadata_record(encode_metadata_record(record) + extra)


@given(st.binary(max_size=120))
def test_garbage_only_raises_metadata_record_errors(data: bytes) -> None:
    try:
        record = decode_metadata_record(data)
    except MetadataRecordError as err:
        assert isinstance(err, ProtocolError)
        assert str(err)
    else:
        # Non-minimal varints decode too, so compare values, not bytes.
        assert decode_metadata_record(encode_metadata_record(record)) == record


def update_value(**overrides: int) -> bytearray:
    record = RemoteLogSegmentMetadataUpdateRecord(
        topic="orders",
        topic_id=uuid.uuid4(),
        partition=0,
        segment_id=uuid.uuid4(),
        leader_epoch=1,
        event_timestamp=2,
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )
    value = bytearray(encode_metadata_record(record))
    for index, byte in overrides.items():
        value[int(index.removeprefix("at"))] = byte
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"\x05\x00", "unknown metadata record type 5"),
        (b"\x00\x01", "type 0 has unsupported version 1"),
        (b"\x80", "metadata record frame: varint at position 0 is truncated"),
        (b"", "truncated"),
        (bytes(update_value()[:-1]), "RemoteLogSegmentMetadataRecordUpdate .*truncated"),
        (bytes(update_value(at2=0xFF, at3=0xFF)), "topic is null or has negative length -1"),
        (bytes(update_value(at4=0xFF)), "topic is not UTF-8"),
        (bytes(update_value()[:-1] + b"\x04"), "unknown RemoteLogState 4"),
    ],
)
def test_bad_topic_values_say_what_is_wrong(value: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_metadata_record(value)


def test_unknown_partition_state_is_refused() -> None:
    record = DeletePartitionStateRecord(
        topic="t",
        topic_id=uuid.uuid4(),
        partition=0,
        epoch=0,
        event_timestamp=0,
        state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
    )
    value = encode_metadata_record(record)[:-1] + b"\x03"
    with pytest.raises(MetadataRecordError, match="unknown RemotePartitionState 3"):
        decode_metadata_record(value)


@pytest.mark.parametrize("count", [-1, 2**31 - 1, 3])
def test_epoch_counts_larger_than_the_bytes_left_are_refused(count: int) -> None:
    record = RemoteLogSegmentMetadataRecordStored(
        segment_id=uuid.uuid4(),
        start_offset=0,
        end_offset=9,
        leader_epoch=0,
        max_timestamp=0,
        event_timestamp=0,
        segment_leader_epochs=((0, 0), (1, 5)),
        segment_size_in_bytes=100,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )
    value = bytearray(encode_stored_record(record))
    count_at = 2 + 16 + 8 + 8 + 4 + 8 + 8
    value[count_at : count_at + 4] = count.to_bytes(4, "big", signed=True)
    with pytest.raises(MetadataRecordError, match=f"count {count} does not fit"):
        decode_stored_record(value)


@pytest.mark.parametrize(
    "record",
    [
        DeletePartitionStateRecord(
            topic="x" * 40_000,
            topic_id=uuid.uuid4(),
            partition=0,
            epoch=0,
            event_timestamp=0,
            state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        ),
        RemoteLogSegmentMetadataUpdateRecord(
            topic="t",
            topic_id=uuid.uuid4(),
            partition=2**31,
            segment_id=uuid.uuid4(),
            leader_epoch=0,
            event_timestamp=0,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        ),
    ],
)
def test_encoding_values_that_do_not_fit_is_our_misuse(record: MetadataRecord) -> None:
    with pytest.raises(LocalProtocolError):
        encode_metadata_record(record)


# --- flat-file store ------------------------------------------------------------------


@given(stored_records)
def test_stored_records_round_trip_and_match_kafka_encoding(record: StoredMetadataRecord) -> None:
    value = encode_stored_record(record)
    assert value == expected_stored_value(record)
    assert decode_stored_record(value) == record
    for cut in range(len(value)):
        with pytest.raises(MetadataRecordError):
            decode_stored_record(value[:cut])
    with pytest.raises(MetadataRecordError, match="trailing"):
        decode_stored_record(value + b"\x00")


@given(st.lists(stored_records, max_size=5))
def test_read_stored_record_walks_a_sequence(records: list[StoredMetadataRecord]) -> None:
    buf = b"".join(encode_stored_record(r) for r in records)
    position, found = 0, []
    while position < len(buf):
        record, position = read_stored_record(buf, position)
        found.append(record)
    assert found == records


@given(UUIDS, st.integers(0, 2**63 - 1), st.lists(stored_records, max_size=5).map(tuple))
def test_flat_file_round_trip(
    topic_id: uuid.UUID, offset: int, entries: tuple[StoredMetadataRecord, ...]
) -> None:
    snapshot = FlatFileSnapshot(topic_id=topic_id, metadata_topic_offset=offset, entries=entries)
    data = encode_flat_file(snapshot)
    assert data[:1] == bytes([FLAT_FILE_MAGIC])
    assert data[1:17] == topic_id.bytes
    assert int.from_bytes(data[17:25], "big") == offset
    assert decode_flat_file(data) == snapshot


@given(st.binary(max_size=120))
def test_garbage_flat_files_only_raise_metadata_record_errors(data: bytes) -> None:
    try:
        snapshot = decode_flat_file(bytes([FLAT_FILE_MAGIC]) + data)
    except MetadataRecordError:
        pass
    else:
        assert decode_flat_file(encode_flat_file(snapshot)) == snapshot


FEW_EPOCHS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=3).map(tuple)
"""Epochs and counts alike (0 to 3), so that a count and an epoch are easily mistaken."""
common_segments = stored_segments_with(st.tuples(st.tuples(INT32, INT64)) | FEW_EPOCHS)


@st.composite
def flat_files(draw: st.DrawFn) -> bytes:
    """Flat files laid out as the writer lays them out (one-epoch segments, then a deletion
    state and a log start) or any other way."""
    if draw(st.booleans()):
        entries: list[StoredMetadataRecord] = [*draw(st.lists(common_segments, max_size=6))]
        entries += draw(st.lists(stored_partition_states, max_size=1))
        entries += draw(st.lists(stored_log_starts, max_size=1))
    else:
        entries = draw(st.lists(common_segments | stored_records, max_size=6))
    return encode_flat_file(
        FlatFileSnapshot(
            topic_id=draw(UUIDS),
            metadata_topic_offset=draw(st.integers(0, 2**63 - 1)),
            entries=tuple(entries),
        )
    )


def decoded_both_ways(data: bytes) -> tuple[object, object]:
    """What each decoder makes of ``data``: the entries as segments and others, or the
    error message."""
    try:
        snapshot = decode_flat_file(data)
    except MetadataRecordError as err:
        by_entry: object = str(err)
    else:
        by_entry = (
            snapshot.topic_id,
            snapshot.metadata_topic_offset,
            [e for e in snapshot.entries if isinstance(e, RemoteLogSegmentMetadataRecordStored)],
            [
                e
                for e in snapshot.entries
                if not isinstance(e, RemoteLogSegmentMetadataRecordStored)
            ],
        )
    try:
        columns: FlatFileColumns = decode_flat_file_columns(data)
    except MetadataRecordError as err:
        by_column: object = str(err)
    else:
        by_column = (
            columns.topic_id,
            columns.metadata_topic_offset,
            [columns.segment_entry(i) for i in range(len(columns))],
            list(columns.others),
        )
    return by_entry, by_column


@settings(max_examples=300)
@given(flat_files())
def test_columns_hold_what_the_entry_decoder_decodes(data: bytes) -> None:
    by_entry, by_column = decoded_both_ways(data)
    assert not isinstance(by_entry, str)
    assert by_column == by_entry


@settings(max_examples=300)
@given(flat_files(), st.data())
def test_damaged_flat_files_decode_the_same_both_ways(data: bytes, draw: st.DataObject) -> None:
    """A truncated file, or one with a byte changed, is refused with the same error, or
    decoded to the same entries, by both decoders."""
    damaged = bytearray(data)
    if draw.draw(st.booleans()):
        del damaged[draw.draw(st.integers(0, len(damaged))) :]
    else:
        damaged[draw.draw(st.integers(0, len(damaged) - 1))] = draw.draw(st.integers(0, 255))
    by_entry, by_column = decoded_both_ways(bytes(damaged))
    assert by_column == by_entry


def test_flat_file_refusals() -> None:
    snapshot = FlatFileSnapshot(topic_id=uuid.uuid4(), metadata_topic_offset=5, entries=())
    data = encode_flat_file(snapshot)
    with pytest.raises(MetadataRecordError, match="truncated: 24 of 25"):
        decode_flat_file(data[:-1])
    with pytest.raises(MetadataRecordError, match="unknown magic 1"):
        decode_flat_file(b"\x01" + data[1:])
    with pytest.raises(MetadataRecordError, match="unknown stored metadata entry type 3"):
        decode_flat_file(data + b"\x03\x00")
    with pytest.raises(LocalProtocolError):
        encode_flat_file(
            FlatFileSnapshot(topic_id=uuid.uuid4(), metadata_topic_offset=2**63, entries=())
        )


# --- committed offsets ----------------------------------------------------------------


def test_committed_offsets_file_matches_the_kip_example() -> None:
    text = "0 2022\n4 104\n2 498\n"
    assert decode_committed_offsets(text) == {0: 2022, 4: 104, 2: 498}
    assert encode_committed_offsets({0: 2022, 4: 104, 2: 498}) == "0 2022\n2 498\n4 104\n"


@given(st.dictionaries(st.integers(0, 1000), st.integers(0, 2**63 - 1)))
def test_committed_offsets_round_trip(offsets: dict[int, int]) -> None:
    assert decode_committed_offsets(encode_committed_offsets(offsets)) == offsets


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 1\n1\n", "line 2 is not"),
        ("0 1 2\n", "line 1 is not"),
        ("a 1\n", "line 1 is not"),
        ("0 -1\n", "line 1 is not"),
        ("0 1_000\n", "line 1 is not"),
        ("3 1\n\n3 2\n", "line 3 repeats partition 3"),
    ],
)
def test_bad_committed_offsets_are_refused(text: str, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_committed_offsets(text)


def test_committed_offsets_tolerate_blank_lines_and_no_final_newline() -> None:
    assert decode_committed_offsets("\n1 5\n  \n2 6") == {1: 5, 2: 6}


def test_negative_committed_offsets_are_our_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        encode_committed_offsets({0: -1})
