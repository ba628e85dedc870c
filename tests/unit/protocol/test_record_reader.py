"""Record decoding and the consumer's offset bookkeeping (protocol.record_reader)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.record_reader import ConsumedRecord, records_from
from protocol.records import (
    Compression,
    ControlType,
    CorruptRecordBatchError,
    Record,
    build_control_batch,
    build_record_batch,
)

KEYS = st.none() | st.binary(max_size=12)
VALUES = st.none() | st.binary(max_size=40)


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytes, list[ConsumedRecord], list[int], int]:
    """A partition's log from some offset: data batches (with compaction's offset gaps,
    plain or gzip) and transaction markers; its records; each batch's next offset; and a
    position to fetch from, around and inside the log."""
    offset = start = draw(st.integers(0, 2**40))
    data, records, next_offsets = b"", [], []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.integers(0, 4)) == 0:
            data += build_control_batch(
                base_offset=offset,
                control_type=ControlType.COMMIT,
                producer_id=1,
                producer_epoch=0,
                timestamp=5,
            )
            offset += 1
        else:
            gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=5))
            deltas = [sum(gaps[:i]) for i in range(len(gaps))]
            rows = [(draw(KEYS), draw(VALUES)) for _ in deltas]
            data += build_record_batch(
                base_offset=offset,
                records=[
                    Record(key=k, value=v, timestamp=7, offset_delta=d)
                    for (k, v), d in zip(rows, deltas, strict=True)
                ],
                compression=draw(st.sampled_from([Compression.NONE, Compression.GZIP])),
            )
            records += [
                ConsumedRecord(offset=offset + d, timestamp=7, key=k, value=v)
                for (k, v), d in zip(rows, deltas, strict=True)
            ]
            offset += deltas[-1] + 1
        next_offsets.append(offset)
    position = max(start + draw(st.integers(-3, offset - start + 3)), 0)
    return data, records, next_offsets, position


@given(logs(), st.integers(0, 400))
def test_a_fetch_answer_yields_the_new_records_and_the_next_position(
    log: tuple[bytes, list[ConsumedRecord], list[int], int], cut: int
) -> None:
    data, records, next_offsets, position = log
    truncated = data[: max(len(data) - cut, 0)]  # the broker may cut the last batch short
    complete = next_offsets[: _complete_batches(truncated, data, next_offsets)]

    found, next_position = records_from(truncated, position)

    last_whole = complete[-1] if complete else position
    assert found == [r for r in records if position <= r.offset < last_whole]
    assert next_position == max(position, last_whole)
    # Fetching again from the next position with the same answer finds nothing new.
    assert records_from(truncated, next_position) == ([], next_position)


def _complete_batches(truncated: bytes, data: bytes, next_offsets: list[int]) -> int:
    """How many of the log's batches lie entirely inside ``truncated``."""
    count, position = 0, 0
    while count < len(next_offsets):
        size = 12 + int.from_bytes(data[position + 8 : position + 12], "big")
        if position + size > len(truncated):
            break
        position += size
        count += 1
    return count


def test_undecodable_records_are_named_with_their_batch() -> None:
    batch = bytearray(build_record_batch(base_offset=9, records=[Record(value=b"v", timestamp=1)]))
    batch[61] = 0x7F  # the first record now claims more bytes than the batch holds
    batch[62:] = b"\xff" * (len(batch) - 62)
    with pytest.raises(CorruptRecordBatchError, match="batch at offset 9"):
        records_from(bytes(batch), 0)
