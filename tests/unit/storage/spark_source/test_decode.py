"""The executor's decoder against batches built independently, record by record."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    ControlType,
    CorruptRecordBatchError,
    Record,
    TimestampType,
    build_control_batch,
    build_record_batch,
    parse_batch_header,
)
from storage.spark_source.decode import (
    GROUP_BYTES,
    AbortedRange,
    Decoding,
    TransactionFilter,
    decode_batches,
)
from storage.spark_source.split import Columns, Header, split_records

records = st.lists(
    st.builds(
        Record,
        value=st.none() | st.binary(max_size=300),
        key=st.none() | st.binary(max_size=200),
        timestamp=st.integers(0, 2**40),
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@dataclass(frozen=True, slots=True)
class Rows:
    """Decoded columns as Python lists, over every group."""

    keys: list[bytes | None]
    values: list[bytes | None]
    offsets: list[int]
    timestamps: list[int]
    timestamp_types: list[int]
    headers: list[list[Header] | None]


def rows_of(groups: Iterable[Columns]) -> Rows:
    rows = Rows([], [], [], [], [], [])
    for columns in groups:
        rows.keys.extend(columns.keys.to_pylist())
        rows.values.extend(columns.values.to_pylist())
        rows.offsets.extend(columns.offsets.tolist())
        rows.timestamps.extend(columns.timestamps.tolist())
        rows.timestamp_types.extend(columns.timestamp_types.tolist())
        rows.headers.extend(columns.headers or [])
    return rows


def decoding(buf: bytes | bytearray, **kwargs: object) -> Decoding:
    options = {
        "from_offset": 0,
        "until_offset": 2**62,
        "transactions": None,
        "include_headers": True,
        **kwargs,
    }
    return decode_batches(buf, **options)  # type: ignore[arg-type]


def decoded(buf: bytes | bytearray, **kwargs: object) -> Rows:
    return rows_of(decoding(buf, **kwargs).columns())


@given(batch=records, base=st.integers(0, 2**40), compressed=st.booleans())
def test_every_field_of_every_record(batch: list[Record], base: int, compressed: bool) -> None:
    buf = build_record_batch(
        base_offset=base,
        records=batch,
        compression=Compression.GZIP if compressed else Compression.NONE,
    )
    columns = decoded(buf)
    first = batch[0].timestamp
    assert columns.offsets == [base + i for i in range(len(batch))]
    assert columns.keys == [r.key for r in batch]
    assert columns.values == [r.value for r in batch]
    assert columns.timestamps == [first + (r.timestamp - first) for r in batch]
    assert columns.timestamp_types == [0] * len(batch)
    assert columns.headers == [list(r.headers) or None for r in batch]


_CODECS: dict[Compression, Callable[[bytes], Any]] = {
    Compression.SNAPPY: cramjam.snappy.compress_raw,
    Compression.LZ4: cramjam.lz4.compress,
    Compression.ZSTD: cramjam.zstd.compress,
}


def compressed_batch(base_offset: int, batch: list[Record], compression: Compression) -> bytes:
    """A batch in any codec: the builder writes NONE and GZIP; the others are the
    uncompressed batch's records compressed, with the header's length, codec and CRC set."""
    if compression not in _CODECS:
        return build_record_batch(base_offset=base_offset, records=batch, compression=compression)
    plain = build_record_batch(base_offset=base_offset, records=batch)
    body = bytes(_CODECS[compression](plain[BATCH_HEADER_SIZE:]))
    out = bytearray(plain[:BATCH_HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)  # batch length: after offset and length
    struct.pack_into(">h", out, 21, compression)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.tuples(records, st.sampled_from(list(Compression)), st.integers(0, 3)), max_size=6
    ),
    window=st.tuples(st.integers(0, 150), st.integers(0, 150)),
    group_bytes=st.sampled_from([1, 500, GROUP_BYTES]),
    include_headers=st.booleans(),
    cut=st.integers(0, BATCH_HEADER_SIZE - 1),
    received=st.booleans(),
)
def test_many_batches_every_codec_any_window_any_grouping(
    batches: list[tuple[list[Record], Compression, int]],
    window: tuple[int, int],
    group_bytes: int,
    include_headers: bool,
    cut: int,
    received: bool,
) -> None:
    """Batches of every codec, with gaps between their offsets (as after compaction), cut
    by any offset window and grouped any way: exactly the records of the window, in order.
    The buffer ends at the last batch (``cut`` 0) or with part of the next one, left for a
    later read; it is ``bytes``, or the ``bytearray`` an S3 GET fills (``received``)."""
    buf = b""
    expected: list[tuple[int, Record]] = []
    offset = 0
    for batch, compression, gap in batches:
        offset += gap
        buf += compressed_batch(offset, batch, compression)
        expected += [(offset + i, r) for i, r in enumerate(batch)]
        offset += len(batch)
    buf += compressed_batch(offset, [Record(value=b"next", timestamp=0)], Compression.NONE)[:cut]
    start, until = min(window), max(window)
    wanted = [(o, r) for o, r in expected if start <= o < until]
    found = decoding(
        bytearray(buf) if received else buf,
        from_offset=start,
        until_offset=until,
        include_headers=include_headers,
    )
    rows = rows_of(found.columns(group_bytes))
    assert rows.offsets == [o for o, _ in wanted]
    assert rows.keys == [r.key for _, r in wanted]
    assert rows.values == [r.value for _, r in wanted]
    assert rows.timestamps == [r.timestamp for _, r in wanted]
    assert rows.headers == ([list(r.headers) or None for _, r in wanted] if include_headers else [])


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(1, 90),
    size=st.integers(0, 300),
    odd=st.none() | st.integers(0, 89),
    compression=st.sampled_from(list(Compression)),
)
def test_batches_of_equal_records_and_with_an_odd_one(
    count: int, size: int, odd: int | None, compression: Compression
) -> None:
    """Records of one length are framed together, others one by one: a record one byte
    longer, or offset deltas from 64 on (two bytes), break the equal lengths."""
    batch = [Record(value=b"v" * (size + (i == odd)), key=b"k", timestamp=7) for i in range(count)]
    rows = decoded(bytearray(compressed_batch(3, batch, compression)), include_headers=False)
    assert rows.offsets == list(range(3, 3 + count))
    assert rows.values == [r.value for r in batch]
    assert rows.keys == [b"k"] * count


@given(value=st.binary(min_size=1, max_size=50), cut=st.integers(1, 40))
def test_a_record_cut_short_is_a_corrupt_batch(value: bytes, cut: int) -> None:
    """A batch whose records end early (its header still counts them) is refused, never
    read past its end."""
    whole = build_record_batch(
        base_offset=0, records=[Record(value=value, timestamp=1), Record(value=value, timestamp=1)]
    )
    header = parse_batch_header(whole)
    keep = max(len(whole) - cut, BATCH_HEADER_SIZE + 1)
    with pytest.raises(CorruptRecordBatchError):
        split_records(
            whole[:keep], [(0, header)], from_offset=0, until_offset=9, include_headers=True
        )


def test_log_append_time_gives_every_record_the_batch_timestamp() -> None:
    buf = build_record_batch(
        base_offset=0,
        records=[Record(value=b"a", timestamp=5), Record(value=b"b", timestamp=6)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=99,
    )
    columns = decoded(buf)
    assert columns.timestamps == [99, 99]
    assert columns.timestamp_types == [1, 1]


def test_offset_range_cuts_inside_batches_and_stops_after_it() -> None:
    one = build_record_batch(
        base_offset=0, records=[Record(value=b"%d" % i, timestamp=i) for i in range(5)]
    )
    two = build_record_batch(base_offset=5, records=[Record(value=b"x", timestamp=9)])
    found = decoding(one + two, from_offset=2, until_offset=4, include_headers=False)
    rows = rows_of(found.columns())
    assert rows.offsets == [2, 3]
    assert rows.headers == []
    assert found.next_offset == 6  # stopped at the first batch past the range, after looking at it


def test_partial_trailing_batch_is_left_for_the_next_read() -> None:
    whole = build_record_batch(base_offset=0, records=[Record(value=b"a", timestamp=1)])
    found = decoding(whole + whole[:20], until_offset=10, include_headers=False)
    assert rows_of(found.columns()).offsets == [0]
    assert found.next_offset == 1


def _txn(base: int, producer: int, values: int) -> bytes:
    return build_record_batch(
        base_offset=base,
        records=[Record(value=b"t", timestamp=1) for _ in range(values)],
        producer_id=producer,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _marker(base: int, producer: int, kind: ControlType) -> bytes:
    return build_control_batch(
        base_offset=base, control_type=kind, producer_id=producer, producer_epoch=0, timestamp=1
    )


LOG = (
    _txn(0, 7, 2)  # 0-1 aborted
    + _txn(2, 8, 2)  # 2-3 committed
    + _marker(4, 7, ControlType.ABORT)
    + _marker(5, 8, ControlType.COMMIT)
    + _txn(6, 7, 2)  # 6-7 committed: the same producer, after its abort
    + _marker(8, 7, ControlType.COMMIT)
)


@pytest.mark.parametrize("last_offset", [4, None])
def test_read_committed_skips_aborted_batches_and_markers(last_offset: int | None) -> None:
    aborted = [AbortedRange(producer_id=7, first_offset=0, last_offset=last_offset)]
    columns = decoded(LOG, transactions=TransactionFilter(aborted))
    assert columns.offsets == [2, 3, 6, 7]


def test_read_uncommitted_skips_only_markers() -> None:
    assert decoded(LOG).offsets == [0, 1, 2, 3, 6, 7]


def test_a_slice_after_the_marker_keeps_the_producers_later_batches() -> None:
    """The slice never sees the ABORT marker: the index's last offset retires the txn."""
    after_marker = _txn(6, 7, 2) + _marker(8, 7, ControlType.COMMIT)
    aborted = [AbortedRange(producer_id=7, first_offset=0, last_offset=4)]
    columns = decoded(after_marker, from_offset=6, transactions=TransactionFilter(aborted))
    assert columns.offsets == [6, 7]


@pytest.mark.parametrize("cut", range(1, 6))
def test_one_filter_over_a_slices_reads_is_one_read(cut: int) -> None:
    """A slice read in several GETs keeps one filter: producer 7's abort, seen in one read,
    ends its aborted transaction for the next read's batches (a Fetch answer's aborted
    transactions have no last offset: only the marker ends them)."""
    batches = [_txn(0, 7, 2), _txn(2, 8, 2), _marker(4, 7, ControlType.ABORT)]
    batches += [_marker(5, 8, ControlType.COMMIT), _txn(6, 7, 2), _marker(8, 7, ControlType.COMMIT)]
    transactions = TransactionFilter([AbortedRange(producer_id=7, first_offset=0)])
    offsets = []
    for read in (b"".join(batches[:cut]), b"".join(batches[cut:])):
        offsets += decoded(bytearray(read), transactions=transactions).offsets
    assert offsets == [2, 3, 6, 7]


def test_repeated_aborted_transactions_count_once() -> None:
    transactions = TransactionFilter([AbortedRange(producer_id=7, first_offset=0)])
    transactions.add([AbortedRange(producer_id=7, first_offset=0)])
    assert decoded(LOG, transactions=transactions).offsets == [2, 3, 6, 7]


def test_uncompressed_groups_read_in_place_give_every_field() -> None:
    """Uncompressed batches are read where they lie (no copy of their bodies), also when
    a batch cut short follows them."""
    batch = [
        Record(value=b"v" * n, key=b"k" * (n % 3), timestamp=n, headers=(("h", b"x" * n),))
        for n in range(1, 6)
    ]
    buf = b"".join(compressed_batch(5 * n, batch, Compression.NONE) for n in range(3))
    buf += compressed_batch(15, batch, Compression.NONE)[: BATCH_HEADER_SIZE - 1]
    found = decoding(buf, from_offset=2, until_offset=14, include_headers=True)
    rows = rows_of(found.columns(1))
    wanted = [(5 * n + i, r) for n in range(3) for i, r in enumerate(batch)][2:14]
    assert rows.offsets == [o for o, _ in wanted]
    assert rows.keys == [r.key for _, r in wanted]
    assert rows.values == [r.value for _, r in wanted]
    assert rows.headers == [list(r.headers) for _, r in wanted]
