"""Record batch v2: header parsing, iteration, CRC, control records, and the builder.

The builder is cross-checked against aiokafka's own record builder and reader (byte for
byte where compression is off), which is what real clients run.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    ControlRecord,
    ControlType,
    CorruptRecordBatchError,
    LegacyMessageFormatError,
    Record,
    TimestampType,
    batch_crc_ok,
    batch_span,
    build_control_batch,
    build_record_batch,
    iter_batch_spans,
    iter_batches,
    parse_batch_header,
    read_control_record,
)
from protocol.varint import encode_varint

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TIMESTAMPS = st.integers(0, 2**42)

records_strategy = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=16),
        value=st.none() | st.binary(max_size=64),
        timestamp=TIMESTAMPS,
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=8,
)


@st.composite
def batch_inputs(draw: st.DrawFn) -> dict[str, object]:
    records = draw(records_strategy)
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(records), max_size=len(records)))
    deltas = [sum(gaps[: i + 1]) - gaps[0] for i in range(len(records))]
    return {
        "base_offset": draw(st.integers(0, 2**62)),
        "records": [
            Record(
                key=r.key,
                value=r.value,
                timestamp=r.timestamp,
                headers=r.headers,
                offset_delta=d,
            )
            for r, d in zip(records, deltas, strict=True)
        ],
        "compression": draw(st.sampled_from([Compression.NONE, Compression.GZIP])),
        "timestamp_type": draw(st.sampled_from(TimestampType)),
        "partition_leader_epoch": draw(INT32),
        "producer_id": draw(INT64),
        "producer_epoch": draw(INT16),
        "base_sequence": draw(INT32),
        "is_transactional": draw(st.booleans()),
    }


def simple_batch(base_offset: int, count: int = 3, *, timestamp: int = 1_000) -> bytes:
    return build_record_batch(
        base_offset=base_offset,
        records=[
            Record(key=b"k%d" % i, value=b"value-%d" % i, timestamp=timestamp + i)
            for i in range(count)
        ],
    )


# --- header parsing -------------------------------------------------------------------


def test_header_layout_constants() -> None:
    assert LOG_OVERHEAD == 12
    assert BATCH_HEADER_SIZE == 61
    assert len(build_record_batch(base_offset=0, records=[Record(value=None, timestamp=0)])) > 61


@given(batch_inputs())
def test_built_batches_parse_back_to_their_inputs(inputs: dict[str, object]) -> None:
    batch = build_record_batch(**inputs)  # type: ignore[arg-type]
    header = parse_batch_header(memoryview(batch))
    records = inputs["records"]
    assert isinstance(records, list)
    assert header.base_offset == inputs["base_offset"]
    assert header.size == len(batch)
    assert header.partition_leader_epoch == inputs["partition_leader_epoch"]
    assert header.magic == 2
    assert header.compression is inputs["compression"]
    assert header.timestamp_type is inputs["timestamp_type"]
    assert header.is_transactional is inputs["is_transactional"]
    assert not header.is_control
    assert not header.has_delete_horizon
    assert header.last_offset_delta == records[-1].offset_delta
    assert header.last_offset == header.base_offset + records[-1].offset_delta
    assert header.next_offset == header.last_offset + 1
    assert header.first_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.producer_id == inputs["producer_id"]
    assert header.producer_epoch == inputs["producer_epoch"]
    assert header.base_sequence == inputs["base_sequence"]
    assert header.record_count == len(records)
    assert batch_crc_ok(batch, 0, header)


@given(batch_inputs(), st.data())
def test_any_flipped_byte_under_the_crc_is_detected(
    inputs: dict[str, object], data: st.DataObject
) -> None:
    batch = bytearray(build_record_batch(**inputs))  # type: ignore[arg-type]
    header = parse_batch_header(batch)
    index = data.draw(st.integers(17, len(batch) - 1), label="index")
    bit = data.draw(st.integers(0, 7), label="bit")
    batch[index] ^= 1 << bit
    if index < 21:
        # The flip hit the stored CRC itself: read it again from the damaged bytes.
        header = parse_batch_header(batch)
    assert not batch_crc_ok(batch, 0, header)


def test_partition_leader_epoch_is_outside_the_crc() -> None:
    # Brokers stamp the epoch on append without recomputing the CRC.
    batch = bytearray(simple_batch(0))
    struct.pack_into(">i", batch, 12, 42)
    header = parse_batch_header(batch)
    assert header.partition_leader_epoch == 42
    assert batch_crc_ok(batch, 0, header)


def test_crc_of_a_batch_cut_short_is_not_ok() -> None:
    batch = simple_batch(0)
    header = parse_batch_header(batch)
    assert not batch_crc_ok(batch[:-1], 0, header)


def test_parse_at_a_position_in_a_memoryview_shares_the_buffer() -> None:
    first, second = simple_batch(10), simple_batch(13, timestamp=5)
    buf = bytearray(first + second)
    view = memoryview(buf)
    header = parse_batch_header(view, len(first))
    assert header.base_offset == 13
    assert header.first_timestamp == 5
    assert batch_crc_ok(view, len(first), header)
    # The parse did not copy: a later change to the buffer is what the CRC sees.
    buf[len(first) + 70] ^= 0xFF
    assert not batch_crc_ok(view, len(first), header)


def test_attribute_bits() -> None:
    base = parse_batch_header(simple_batch(0))
    header = BatchHeader(
        **{f: getattr(base, f) for f in BatchHeader.__dataclass_fields__ if f != "attributes"},
        attributes=0x7C | Compression.ZSTD,
    )
    assert header.compression is Compression.ZSTD
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_transactional
    assert header.is_control
    assert header.has_delete_horizon


# --- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_are_reported_not_misread(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for offset in range(3):
        builder.append(offset, timestamp=1_000, key=b"key", value=b"value")
    legacy = bytes(builder.build())
    with pytest.raises(LegacyMessageFormatError) as excinfo:
        parse_batch_header(legacy)
    assert excinfo.value.magic == magic
    assert excinfo.value.error_code is KafkaError.CORRUPT_MESSAGE
    assert isinstance(excinfo.value, RemoteProtocolError)
    with pytest.raises(LegacyMessageFormatError):
        list(iter_batches(simple_batch(0) + legacy))


def test_legacy_message_is_detected_even_when_shorter_than_a_v2_header() -> None:
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=b"v")
    legacy = bytes(builder.build())
    assert len(legacy) < BATCH_HEADER_SIZE
    with pytest.raises(LegacyMessageFormatError):
        parse_batch_header(legacy)
    with pytest.raises(LegacyMessageFormatError):
        list(iter_batches(legacy))


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (16, ">b", 3, "unknown record batch magic 3"),
        (16, ">b", -1, "unknown record batch magic 255"),
        (8, ">i", 48, "less than its own header"),
        (21, ">h", 5, "unknown compression codec 5"),
        (57, ">i", -1, "negative record count"),
    ],
)
def test_corrupt_headers_are_refused(offset: int, fmt: str, value: int, message: str) -> None:
    batch = bytearray(simple_batch(0))
    struct.pack_into(fmt, batch, offset, value)
    with pytest.raises(CorruptRecordBatchError, match=message) as excinfo:
        parse_batch_header(batch)
    assert excinfo.value.error_code is KafkaError.CORRUPT_MESSAGE


def test_truncated_header_is_refused() -> None:
    with pytest.raises(CorruptRecordBatchError, match="truncated: 40 of 61"):
        parse_batch_header(simple_batch(0)[:40])
    with pytest.raises(CorruptRecordBatchError, match="truncated: 0 of 61"):
        parse_batch_header(b"")


def test_iter_batches_refuses_impossible_sizes() -> None:
    # A negative or tiny size would make a reader loop or go backwards.
    for size in (-5, 0, 13):
        batch = bytearray(simple_batch(0))
        struct.pack_into(">i", batch, 8, size)
        with pytest.raises(CorruptRecordBatchError, match="smallest record"):
            list(iter_batches(batch))


@given(st.binary(max_size=200), st.integers(0, 10))
def test_random_bytes_only_raise_our_errors(data: bytes, position: int) -> None:
    with contextlib.suppress(CorruptRecordBatchError, LegacyMessageFormatError):
        header = parse_batch_header(data, position)
        assert batch_crc_ok(data, position, header) in (True, False)
        if header.is_control:
            read_control_record(data, position, header)
    with contextlib.suppress(CorruptRecordBatchError, LegacyMessageFormatError):
        for _, header in iter_batches(data, position):
            assert header.magic == 2


# --- iteration ------------------------------------------------------------------------


@given(st.lists(batch_inputs(), min_size=1, max_size=5), st.data())
def test_iter_batches_yields_exactly_the_complete_batches(
    all_inputs: list[dict[str, object]], data: st.DataObject
) -> None:
    batches = [build_record_batch(**inputs) for inputs in all_inputs]  # type: ignore[arg-type]
    stream = b"".join(batches)
    cut = data.draw(st.integers(0, len(stream)), label="cut")
    complete = []
    position = 0
    for batch in batches:
        if position + len(batch) <= cut:
            complete.append((position, batch))
        position += len(batch)
    found = list(iter_batches(memoryview(stream)[:cut]))
    assert [p for p, _ in found] == [p for p, _ in complete]
    for (position, header), (_, batch) in zip(found, complete, strict=True):
        assert header == parse_batch_header(batch)
        assert batch_crc_ok(stream, position, header)


def _outcome(scan: object) -> object:
    try:
        return list(scan)  # type: ignore[call-overload]
    except RemoteProtocolError as err:
        return (type(err), str(err))


@given(
    st.lists(batch_inputs(), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 10_000),
)
def test_batch_spans_are_what_the_headers_say(
    all_inputs: list[dict[str, object]], flips: list[tuple[int, int]], cut: int
) -> None:
    """The header-free scan agrees with iter_batches on batches, damaged ones included:
    the same spans, or the same error (but for a negative record count, which it ignores)."""
    stream = bytearray(b"".join(build_record_batch(**i) for i in all_inputs))  # type: ignore[arg-type]
    for at, value in flips:
        if stream:
            stream[at % len(stream)] = value
    view = memoryview(bytes(stream))[: cut % (len(stream) + 1)]
    expected = _outcome(
        (p, h.base_offset, h.last_offset, p + h.size) for p, h in iter_batches(view)
    )
    got = _outcome(iter_batch_spans(view))
    if isinstance(expected, tuple) and "negative record count" in expected[1]:
        return
    assert got == expected
    for position, base, last, end in got if isinstance(got, list) else ():
        assert batch_span(view, position) == (base, last, end - position)


def test_iter_batches_from_a_start_position() -> None:
    first, second = simple_batch(0), simple_batch(3)
    found = list(iter_batches(first + second, len(first)))
    assert [(p, h.base_offset) for p, h in found] == [(len(first), 3)]


def test_negative_positions_are_our_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        parse_batch_header(simple_batch(0), -61)
    with pytest.raises(LocalProtocolError):
        list(iter_batches(simple_batch(0), -1))


def test_iter_batches_over_nothing() -> None:
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(b"\x00" * 16)) == []


# --- control records ------------------------------------------------------------------


@given(
    st.sampled_from([ControlType.ABORT, ControlType.COMMIT]),
    INT64,
    INT16,
    INT32,
    st.integers(0, 2**62),
)
def test_control_batches_round_trip(
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int,
) -> None:
    batch = build_control_batch(
        base_offset=base_offset,
        control_type=control_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp=1_700_000_000_000,
    )
    header = parse_batch_header(batch)
    assert header.is_control
    assert header.is_transactional
    assert header.record_count == 1
    assert header.last_offset == base_offset
    assert header.producer_id == producer_id
    assert header.producer_epoch == producer_epoch
    assert batch_crc_ok(batch, 0, header)
    assert read_control_record(batch, 0, header) == ControlRecord(
        type=control_type, coordinator_epoch=coordinator_epoch
    )


@pytest.mark.parametrize(
    ("control_type", "key"), [(ControlType.ABORT, b"\0\0\0\0"), (ControlType.COMMIT, b"\0\0\0\1")]
)
def test_control_batches_read_by_aiokafka(control_type: ControlType, key: bytes) -> None:
    batch = build_control_batch(
        base_offset=9,
        control_type=control_type,
        producer_id=4,
        producer_epoch=2,
        coordinator_epoch=7,
        timestamp=5,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.is_control_batch
    assert theirs.is_transactional
    (record,) = list(theirs)
    assert record.key == key
    assert record.value == b"\0\0\0\0\0\7"
    assert record.offset == 9


def control_batch_with(key: bytes | None, value: bytes | None) -> tuple[bytes, BatchHeader]:
    batch = bytearray(
        build_control_batch(
            base_offset=0,
            control_type=ControlType.COMMIT,
            producer_id=1,
            producer_epoch=0,
            timestamp=0,
        )[:BATCH_HEADER_SIZE]
    )
    body = b"\0" + b"\0" + b"\0"

    def field(data: bytes | None) -> bytes:
        return encode_varint(-1) if data is None else encode_varint(len(data)) + data

    body += field(key) + field(value) + b"\0"
    batch += encode_varint(len(body)) + body
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    return bytes(batch), parse_batch_header(batch)


def test_newer_marker_versions_with_extra_fields_still_read() -> None:
    batch, header = control_batch_with(b"\0\1\0\0extra", b"\0\1\0\0\0\3more")
    assert read_control_record(batch, 0, header) == ControlRecord(
        type=ControlType.ABORT, coordinator_epoch=3
    )


def test_other_control_types_read_as_unknown() -> None:
    # KRaft's LEADER_CHANGE (2) in a control batch: Kafka's consumers ignore it.
    batch, header = control_batch_with(b"\0\0\0\2", b"anything")
    assert read_control_record(batch, 0, header) == ControlRecord(
        type=ControlType.UNKNOWN, coordinator_epoch=-1
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\0\0\0\0\0\0", "no valid key"),
        (b"\0\0\0", b"\0\0\0\0\0\0", "no valid key"),
        (b"\xff\xff\0\0", b"\0\0\0\0\0\0", "key version -1"),
        (b"\0\0\0\1", None, "no valid value"),
        (b"\0\0\0\1", b"\0\0\0\0\0", "no valid value"),
        (b"\0\0\0\1", b"\xff\xff\0\0\0\0", "version -1"),
    ],
)
def test_malformed_control_records_are_refused(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    batch, header = control_batch_with(key, value)
    with pytest.raises(CorruptRecordBatchError, match=message):
        read_control_record(batch, 0, header)


def test_control_record_overrunning_its_batch_is_refused() -> None:
    batch, header = control_batch_with(b"\0\0\0\1", b"\0\0\0\0\0\0")
    with pytest.raises(CorruptRecordBatchError, match="truncated"):
        read_control_record(batch[:-1], 0, header)
    lying = bytearray(batch)
    lying[BATCH_HEADER_SIZE] = encode_varint(60)[0]
    with pytest.raises(CorruptRecordBatchError, match="bad length 60"):
        read_control_record(bytes(lying), 0, parse_batch_header(lying))


def test_control_record_refusals_for_the_batch_itself() -> None:
    data = simple_batch(0)
    with pytest.raises(LocalProtocolError, match="not a control batch"):
        read_control_record(data, 0, parse_batch_header(data))
    batch, _ = control_batch_with(b"\0\0\0\1", b"\0\0\0\0\0\0")
    compressed = bytearray(batch)
    struct.pack_into(">h", compressed, 21, 0x30 | Compression.GZIP)
    with pytest.raises(CorruptRecordBatchError, match="compressed"):
        read_control_record(compressed, 0, parse_batch_header(compressed))
    empty = bytearray(batch)
    struct.pack_into(">i", empty, 57, 0)
    with pytest.raises(CorruptRecordBatchError, match="no record"):
        read_control_record(empty, 0, parse_batch_header(empty))


# --- the builder and aiokafka ---------------------------------------------------------


def aiokafka_batch(inputs: dict[str, object], compression: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(bool(inputs["is_transactional"])),
        producer_id=inputs["producer_id"],
        producer_epoch=inputs["producer_epoch"],
        base_sequence=inputs["base_sequence"],
        batch_size=1 << 20,
    )
    records = inputs["records"]
    assert isinstance(records, list)
    for record in records:
        builder.append(
            record.offset_delta,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
        )
    return bytes(builder.build())


@given(batch_inputs())
def test_uncompressed_batches_are_byte_identical_to_aiokafkas(inputs: dict[str, object]) -> None:
    # aiokafka's producer writes base offset 0, leader epoch -1 and CREATE_TIME.
    inputs |= {
        "base_offset": 0,
        "partition_leader_epoch": -1,
        "compression": Compression.NONE,
        "timestamp_type": TimestampType.CREATE_TIME,
    }
    ours = build_record_batch(**inputs)  # type: ignore[arg-type]
    assert ours == aiokafka_batch(inputs, 0)


@given(batch_inputs())
def test_aiokafka_reads_our_batches_and_we_read_theirs(inputs: dict[str, object]) -> None:
    ours = build_record_batch(**inputs)  # type: ignore[arg-type]
    theirs = DefaultRecordBatch(ours)
    assert theirs.validate_crc()
    header = parse_batch_header(ours)
    assert (theirs.base_offset, theirs.crc, theirs.attributes) == (
        header.base_offset,
        header.crc,
        header.attributes,
    )
    records = inputs["records"]
    assert isinstance(records, list)
    decoded = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    append_time = header.max_timestamp
    expected = [
        (
            header.base_offset + r.offset_delta,
            append_time if header.timestamp_type is TimestampType.LOG_APPEND_TIME else r.timestamp,
            r.key,
            r.value,
            list(r.headers),
        )
        for r in records
    ]
    assert decoded == expected

    compression = int(inputs["compression"])  # type: ignore[call-overload]
    built_by_aiokafka = aiokafka_batch(inputs, compression)
    their_header = parse_batch_header(built_by_aiokafka)
    assert batch_crc_ok(built_by_aiokafka, 0, their_header)
    assert their_header.compression == compression
    assert their_header.record_count == len(records)
    assert their_header.last_offset_delta == records[-1].offset_delta
    assert their_header.first_timestamp == records[0].timestamp
    assert their_header.max_timestamp == max(r.timestamp for r in records)
    assert their_header.producer_id == inputs["producer_id"]
    assert their_header.is_transactional is inputs["is_transactional"]


def test_log_append_time_batch_carries_the_given_max_timestamp() -> None:
    batch = build_record_batch(
        base_offset=0,
        records=[Record(value=b"v", timestamp=10), Record(value=b"w", timestamp=20)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=99,
    )
    header = parse_batch_header(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert (header.first_timestamp, header.max_timestamp) == (10, 99)
    assert [r.timestamp for r in DefaultRecordBatch(batch)] == [99, 99]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"records": []}, "at least one record"),
        ({"compression": Compression.LZ4}, "NONE and GZIP, not LZ4"),
        ({"records": [Record(value=None, timestamp=0, offset_delta=-1)]}, "must increase"),
        (
            {
                "records": [
                    Record(value=None, timestamp=0, offset_delta=2),
                    Record(value=None, timestamp=0, offset_delta=2),
                ]
            },
            "must increase",
        ),
        ({"producer_epoch": 2**15}, "out of range"),
    ],
)
def test_builder_refuses_misuse(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "base_offset": 0,
        "records": [Record(value=b"v", timestamp=0)],
        **kwargs,
    }
    with pytest.raises(LocalProtocolError, match=message):
        build_record_batch(**arguments)  # type: ignore[arg-type]


def test_control_builder_refuses_misuse() -> None:
    with pytest.raises(LocalProtocolError, match="ABORT or COMMIT"):
        build_control_batch(
            base_offset=0,
            control_type=ControlType.UNKNOWN,
            producer_id=1,
            producer_epoch=0,
            timestamp=0,
        )
    with pytest.raises(LocalProtocolError, match="out of range"):
        build_control_batch(
            base_offset=0,
            control_type=ControlType.ABORT,
            producer_id=1,
            producer_epoch=0,
            timestamp=0,
            coordinator_epoch=2**31,
        )
