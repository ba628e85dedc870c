"""Records in pieces (:class:`protocol.buffers.Buffers`, a read across chunks of the chunk
cache) scan, cut and encode exactly as the same bytes joined, wherever the pieces end."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.buffers import BY_REFERENCE_BYTES, Buffers, BufferSink, contiguous
from protocol.errors import RemoteProtocolError
from protocol.messages import ApiKey, encode_response, encode_response_buffers, response_class
from protocol.records import (
    batches_below,
    build_record_batch,
    fit_batches,
    iter_batch_spans,
    iter_batches,
    next_offset_after,
)
from tests.unit.protocol.test_buffers import FETCH_VERSIONS, few_examples, replace_records
from tests.unit.protocol.test_records import batch_inputs


def in_pieces(data: bytes, cuts: list[int]) -> memoryview | Buffers:
    """``data`` cut at ``cuts`` (positions, any order, repeats allowed), each piece a view of
    a buffer of its own, as chunks are."""
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    parts = tuple(memoryview(bytearray(data[a:b])) for a, b in itertools.pairwise(bounds))
    return Buffers.of(parts)


cuts = st.lists(st.integers(0, 1 << 16), max_size=6)


def _outcome(scan: Any) -> object:
    try:
        return list(scan)
    except RemoteProtocolError as err:
        return type(err)


@given(st.binary(max_size=300), cuts, st.integers(-20, 320), st.integers(-20, 320))
def test_slices_are_the_joined_bytes_slices_and_views_of_the_pieces(
    data: bytes, at: list[int], start: int, stop: int
) -> None:
    pieces = in_pieces(data, at)
    got = pieces[start:stop]
    assert bytes(got) == data[start:stop]
    assert len(got) == len(data[start:stop])
    if isinstance(pieces, Buffers):
        owners = [part.obj for part in pieces.parts if isinstance(part, memoryview)]
        parts = got.parts if isinstance(got, Buffers) else (got,)
        assert all(
            isinstance(p, memoryview) and any(p.obj is o for o in owners) for p in parts if len(p)
        )


@given(st.binary(max_size=300), cuts, st.integers(0, 320), st.integers(0, 70))
def test_locate_finds_the_bytes_where_they_lie(
    data: bytes, at: list[int], position: int, size: int
) -> None:
    pieces = in_pieces(data, at)
    if not isinstance(pieces, Buffers):
        return
    buffer, offset = pieces.locate(position, size)
    assert bytes(buffer[offset : offset + size]) == data[position : position + size]


def test_slices_with_a_step_are_refused() -> None:
    pieces = in_pieces(b"abcdef", [3])
    assert isinstance(pieces, Buffers)
    with pytest.raises(ValueError, match="contiguous"):
        pieces[::2]


@given(st.lists(batch_inputs(), min_size=1, max_size=4), cuts, st.data())
def test_scans_and_cuts_equal_those_of_the_joined_bytes(
    all_inputs: list[dict[str, object]], at: list[int], data: st.DataObject
) -> None:
    joined = b"".join(build_record_batch(**i) for i in all_inputs)  # type: ignore[arg-type]
    end = data.draw(st.integers(0, len(joined)), label="end")
    whole = memoryview(joined)[:end]
    pieces = in_pieces(joined[:end], at)
    assert list(iter_batch_spans(pieces)) == list(iter_batch_spans(whole))
    assert list(iter_batches(pieces)) == list(iter_batches(whole))
    assert next_offset_after(pieces) == next_offset_after(whole)
    bound = data.draw(st.integers(-1, 200), label="bound")
    assert bytes(batches_below(pieces, bound)) == bytes(batches_below(whole, bound))
    room = data.draw(st.integers(0, len(joined) + 1), label="room")
    first = data.draw(st.booleans(), label="at_least_one")
    assert bytes(fit_batches(pieces, room, at_least_one=first)) == bytes(
        fit_batches(whole, room, at_least_one=first)
    )


@given(st.binary(max_size=2000), cuts, st.integers(0, 2000))
def test_damaged_records_fail_in_pieces_as_joined(noise: bytes, at: list[int], start: int) -> None:
    start = min(start, len(noise))
    pieces = in_pieces(noise, at)
    assert _outcome(iter_batch_spans(pieces, start)) == _outcome(iter_batch_spans(noise, start))


@given(st.binary(min_size=1, max_size=20_000), cuts, st.binary(max_size=9))
def test_a_sink_keeps_the_pieces_of_a_value_in_pieces(
    data: bytes, at: list[int], head: bytes
) -> None:
    pieces = in_pieces(data, at)
    sink = BufferSink(head)
    assert sink.write(b"x") == 1
    assert sink.write(pieces) == len(data)
    out = sink.buffers()
    assert bytes(out) == head + b"x" + data
    assert len(out) == len(head) + 1 + len(data)
    assert not any(isinstance(part, Buffers) for part in out.parts)
    large = pieces.parts if isinstance(pieces, Buffers) else (pieces,)
    assert all(
        any(part is piece for part in out.parts)
        for piece in large
        if len(piece) >= BY_REFERENCE_BYTES
    )
    assert contiguous(pieces) == data


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@few_examples
@given(data=st.data(), at=cuts)
def test_a_fetch_response_with_records_in_pieces_encodes_as_with_them_joined(
    version: int, data: st.DataObject, at: list[int]
) -> None:
    response = data.draw(st.from_type(response_class(ApiKey.FETCH, version)))
    split = replace_records(response, lambda records: in_pieces(bytes(records) * 70, at))
    joined = replace_records(response, lambda records: bytes(records) * 70)
    expected = encode_response(joined)
    assert bytes(encode_response_buffers(split, head=b"h")) == b"h" + expected
    assert encode_response(split) == expected
