"""The executor's decoder against batches built independently, record by record."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.records import (
    Compression,
    ControlType,
    Record,
    TimestampType,
    build_control_batch,
    build_record_batch,
)
from storage.spark_source.decode import AbortedRange, Columns, TransactionFilter, decode_batches

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


def decoded(buf: bytes, **kwargs: object) -> Columns:
    columns = Columns()
    options = {
        "from_offset": 0,
        "until_offset": 2**62,
        "transactions": None,
        "include_headers": True,
        **kwargs,
    }
    decode_batches(buf, columns, **options)  # type: ignore[arg-type]
    return columns


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
    columns = Columns()
    after = decode_batches(
        one + two, columns, from_offset=2, until_offset=4, transactions=None, include_headers=False
    )
    assert columns.offsets == [2, 3]
    assert columns.headers == []
    assert after == 6  # stopped at the first batch past the range, after looking at it


def test_partial_trailing_batch_is_left_for_the_next_read() -> None:
    whole = build_record_batch(base_offset=0, records=[Record(value=b"a", timestamp=1)])
    columns = Columns()
    after = decode_batches(
        whole + whole[:20],
        columns,
        from_offset=0,
        until_offset=10,
        transactions=None,
        include_headers=False,
    )
    assert columns.offsets == [0]
    assert after == 1


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


def test_repeated_aborted_transactions_count_once() -> None:
    transactions = TransactionFilter([AbortedRange(producer_id=7, first_offset=0)])
    transactions.add([AbortedRange(producer_id=7, first_offset=0)])
    assert decoded(LOG, transactions=transactions).offsets == [2, 3, 6, 7]
