"""Finding a streamed Fetch response's tail, and rewriting its node endpoints in place."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.fetch_tail import (
    PADDING_TAGS,
    FetchTailFinder,
    NodeEndpoint,
    ResponseTail,
    encode_tail,
    read_tail,
)
from protocol.headers import encode_response_header
from protocol.messages import ApiKey, encode_response, response_class
from protocol.varint import encode_unsigned_varint

FLEXIBLE_FETCH = range(12, 18)

# Record bytes longer than most pieces, so the walk skips them across pieces.
st.register_type_strategy(Records, st.binary(max_size=3000).map(Records))


def chunked(payload: bytes, cuts: list[int]) -> list[bytes]:
    """``payload`` in pieces cut at ``cuts`` (positions, any order, repeats allowed)."""
    edges = sorted({0, len(payload), *(c % (len(payload) + 1) for c in cuts)})
    return [payload[a:b] for a, b in itertools.pairwise(edges)]


def walk(version: int, payload: bytes, cuts: list[int]) -> tuple[bytes, bytes, FetchTailFinder]:
    """Feed ``payload`` in pieces: (bytes released before the tail, the held rest, finder)."""
    finder = FetchTailFinder(version)
    released = bytearray()
    held = bytearray()
    for piece in chunked(payload, cuts):
        count = finder.feed(memoryview(piece))
        released += piece[:count]
        held += piece[count:]
    return bytes(released), bytes(held), finder


def responses_in_pieces(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` on random Fetch responses (drawn from ``data``) cut at random ``cuts``."""
    pieces = given(
        data=st.data(), cuts=st.lists(st.integers(min_value=0, max_value=1 << 16), max_size=40)
    )
    return settings(
        max_examples=15,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(pieces(test))


def endpoints_of(response: Any) -> tuple[NodeEndpoint, ...]:
    return tuple(
        NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
        for e in getattr(response, "node_endpoints", ())
    )


@pytest.mark.parametrize("version", FLEXIBLE_FETCH)
@responses_in_pieces
def test_the_tail_is_exactly_the_top_level_tagged_fields_in_pieces_of_any_size(
    version: int, data: st.DataObject, cuts: list[int]
) -> None:
    response = data.draw(st.from_type(response_class(ApiKey.FETCH, version)))
    payload = encode_response_header(7, 1) + encode_response(response)
    released, held, finder = walk(version, payload, cuts)
    assert released + held == payload
    assert finder.tail_start == len(released)
    assert read_tail(held).node_endpoints == endpoints_of(response)


@pytest.mark.parametrize("version", FLEXIBLE_FETCH)
@responses_in_pieces
def test_skipping_what_the_walk_skips_finds_the_same_tail(
    version: int, data: st.DataObject, cuts: list[int]
) -> None:
    response = data.draw(st.from_type(response_class(ApiKey.FETCH, version)))
    payload = encode_response_header(7, 1) + encode_response(response)
    finder = FetchTailFinder(version)
    position = 0
    edges = sorted({len(payload), *(c % (len(payload) + 1) for c in cuts)})
    for edge in edges:
        if edge > position:
            position += finder.feed(memoryview(payload[position:edge]))
        # Pass a skippable run unfed (at most what is left), as a splice does.
        count = min(finder.skippable, len(payload) - position)
        finder.skip(count)
        position += count
    _, held, plain = walk(version, payload, [])
    assert finder.tail_start == plain.tail_start
    assert payload[position:] == held
    with pytest.raises(LocalProtocolError):
        finder.skip(1)


@pytest.mark.parametrize("version", FLEXIBLE_FETCH)
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_response_cut_short_never_reaches_its_tail(version: int, data: st.DataObject) -> None:
    response = data.draw(st.from_type(response_class(ApiKey.FETCH, version)))
    payload = encode_response_header(7, 1) + encode_response(response)
    released, _, _ = walk(version, payload, [])
    end = data.draw(st.integers(min_value=0, max_value=len(released) - 1))
    _, _, finder = walk(version, payload[:end], [])
    assert finder.tail_start is None


endpoint_strategy = st.builds(
    NodeEndpoint,
    node_id=st.integers(min_value=0, max_value=1 << 20),
    host=st.text(min_size=1, max_size=40),
    port=st.integers(min_value=1, max_value=65535),
    rack=st.none() | st.text(max_size=10),
)


@settings(max_examples=200, deadline=None)
@given(
    endpoints=st.lists(endpoint_strategy, min_size=1, max_size=4).map(tuple),
    extra=st.integers(min_value=0, max_value=300),
)
def test_a_rewritten_tail_keeps_the_length_it_is_given(
    endpoints: tuple[NodeEndpoint, ...], extra: int
) -> None:
    tail = ResponseTail(node_endpoints=endpoints, others=())
    shortest = next(n for n in range(1, 1 << 12) if encode_tail(tail, length=n) is not None)
    encoded = encode_tail(tail, length=shortest + extra)
    if extra in (1, 2):
        assert encoded is None  # no pad field is that small
        return
    assert encoded is not None
    assert len(encoded) == shortest + extra
    read = read_tail(encoded)
    assert read.node_endpoints == endpoints
    pads = [tag for tag, _ in read.others]
    assert pads == [] if extra == 0 else (len(pads) == 1 and pads[0] in PADDING_TAGS)


def test_a_tail_with_no_room_for_its_fields_is_refused() -> None:
    endpoint = NodeEndpoint(node_id=2, host="a-much-longer-proxy-host-name", port=19093, rack=None)
    assert encode_tail(ResponseTail(node_endpoints=(endpoint,), others=()), length=20) is None
    assert encode_tail(ResponseTail(node_endpoints=(), others=()), length=1) == b"\x00"


def test_a_malformed_tail_is_refused_with_the_reason() -> None:
    with pytest.raises(RemoteProtocolError, match="runs past"):
        read_tail(b"\x01\x00" + encode_unsigned_varint(9) + b"\x02")
    with pytest.raises(RemoteProtocolError, match="after the top-level tags"):
        read_tail(b"\x00\x00")
