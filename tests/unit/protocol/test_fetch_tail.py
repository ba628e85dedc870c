"""Finding a streamed response's tail (Fetch, ShareFetch, ShareAcknowledge), and rewriting its
node endpoints in place."""

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
    NodeEndpoint,
    ResponseTail,
    TailFinder,
    TailLayout,
    body_tail,
    encode_tail,
    is_empty_tail,
    read_tail,
    tail_layout,
    walkable,
)
from protocol.headers import encode_response_header
from protocol.messages import ApiKey, encode_response, response_class
from protocol.varint import encode_unsigned_varint

WALKED = [
    *((ApiKey.FETCH, version) for version in range(12, 19)),
    *(
        (key, version)
        for key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
        for version in (1, 2)
    ),
]
"""Every API version whose tail the proxy finds while the response streams."""

# Record bytes longer than most pieces, so the walk skips them across pieces.
st.register_type_strategy(Records, st.binary(max_size=3000).map(Records))


def chunked(payload: bytes, cuts: list[int]) -> list[bytes]:
    """``payload`` in pieces cut at ``cuts`` (positions, any order, repeats allowed)."""
    edges = sorted({0, len(payload), *(c % (len(payload) + 1) for c in cuts)})
    return [payload[a:b] for a, b in itertools.pairwise(edges)]


def walk(
    api_key: ApiKey, version: int, payload: bytes, cuts: list[int]
) -> tuple[bytes, bytes, TailFinder]:
    """Feed ``payload`` in pieces: (bytes released before the tail, the held rest, finder)."""
    finder = TailFinder(api_key, version)
    released = bytearray()
    held = bytearray()
    for piece in chunked(payload, cuts):
        count = finder.feed(memoryview(piece))
        released += piece[:count]
        held += piece[count:]
    return bytes(released), bytes(held), finder


def responses_in_pieces(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` on random responses (drawn from ``data``) cut at random ``cuts``."""
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


@pytest.mark.parametrize(("api_key", "version"), WALKED)
@responses_in_pieces
def test_the_tail_is_exactly_the_node_endpoints_and_tagged_fields_in_pieces_of_any_size(
    api_key: ApiKey, version: int, data: st.DataObject, cuts: list[int]
) -> None:
    response = data.draw(st.from_type(response_class(api_key, version)))
    body = encode_response(response)
    payload = encode_response_header(7, 1) + body
    released, held, finder = walk(api_key, version, payload, cuts)
    assert released + held == payload
    assert finder.tail_start == len(released)
    assert read_tail(held, tail_layout(api_key)).node_endpoints == endpoints_of(response)
    assert bytes(body_tail(api_key, version, body)) == held
    assert is_empty_tail(held, tail_layout(api_key)) == (
        not endpoints_of(response) and held in (b"\x00", b"\x01\x00")
    )


@pytest.mark.parametrize(("api_key", "version"), WALKED)
@responses_in_pieces
def test_skipping_what_the_walk_skips_finds_the_same_tail(
    api_key: ApiKey, version: int, data: st.DataObject, cuts: list[int]
) -> None:
    response = data.draw(st.from_type(response_class(api_key, version)))
    payload = encode_response_header(7, 1) + encode_response(response)
    finder = TailFinder(api_key, version)
    position = 0
    edges = sorted({len(payload), *(c % (len(payload) + 1) for c in cuts)})
    for edge in edges:
        if edge > position:
            position += finder.feed(memoryview(payload[position:edge]))
        # Pass a skippable run unfed (at most what is left), as a splice does.
        count = min(finder.skippable, len(payload) - position)
        finder.skip(count)
        position += count
    _, held, plain = walk(api_key, version, payload, [])
    assert finder.tail_start == plain.tail_start
    assert payload[position:] == held
    with pytest.raises(LocalProtocolError):
        finder.skip(1)


@pytest.mark.parametrize(("api_key", "version"), WALKED)
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_response_cut_short_never_reaches_its_tail(
    api_key: ApiKey, version: int, data: st.DataObject
) -> None:
    response = data.draw(st.from_type(response_class(api_key, version)))
    payload = encode_response_header(7, 1) + encode_response(response)
    released, _, _ = walk(api_key, version, payload, [])
    end = data.draw(st.integers(min_value=0, max_value=len(released) - 1))
    _, _, finder = walk(api_key, version, payload[:end], [])
    assert finder.tail_start is None
    with pytest.raises(RemoteProtocolError, match="ends before its tail"):
        body_tail(api_key, version, payload[5:end])


endpoint_strategy = st.builds(
    NodeEndpoint,
    node_id=st.integers(min_value=0, max_value=1 << 20),
    host=st.text(min_size=1, max_size=40),
    port=st.integers(min_value=1, max_value=65535),
    rack=st.none() | st.text(max_size=10),
)


@pytest.mark.parametrize("layout", list(TailLayout))
@settings(max_examples=200, deadline=None)
@given(
    endpoints=st.lists(endpoint_strategy, min_size=1, max_size=4).map(tuple),
    extra=st.integers(min_value=0, max_value=300),
)
def test_a_rewritten_tail_keeps_the_length_it_is_given(
    layout: TailLayout, endpoints: tuple[NodeEndpoint, ...], extra: int
) -> None:
    tail = ResponseTail(node_endpoints=endpoints, others=())
    shortest = next(
        n for n in range(1, 1 << 12) if encode_tail(tail, length=n, layout=layout) is not None
    )
    encoded = encode_tail(tail, length=shortest + extra, layout=layout)
    if extra in (1, 2):
        assert encoded is None  # no pad field is that small
        return
    assert encoded is not None
    assert len(encoded) == shortest + extra
    read = read_tail(encoded, layout)
    assert read.node_endpoints == endpoints
    pads = [tag for tag, _ in read.others]
    assert pads == [] if extra == 0 else (len(pads) == 1 and pads[0] in PADDING_TAGS)


def test_a_tail_with_no_room_for_its_fields_is_refused() -> None:
    endpoint = NodeEndpoint(node_id=2, host="a-much-longer-proxy-host-name", port=19093, rack=None)
    for layout in TailLayout:
        tail = ResponseTail(node_endpoints=(endpoint,), others=())
        assert encode_tail(tail, length=20, layout=layout) is None
    empty = ResponseTail(node_endpoints=(), others=())
    assert encode_tail(empty, length=1) == b"\x00"
    assert encode_tail(empty, length=2, layout=TailLayout.LAST_FIELD) == b"\x01\x00"
    assert encode_tail(empty, length=1, layout=TailLayout.LAST_FIELD) is None


def test_only_flexible_fetch_and_the_share_apis_are_walked() -> None:
    assert [v for v in range(20) if walkable(ApiKey.FETCH, v)] == list(range(12, 20))
    assert walkable(ApiKey.SHARE_FETCH, 1) and walkable(ApiKey.SHARE_ACKNOWLEDGE, 2)
    assert not walkable(ApiKey.PRODUCE, 13) and not walkable(ApiKey.METADATA, 13)
    with pytest.raises(LocalProtocolError):
        TailFinder(ApiKey.FETCH, 11)


def test_a_malformed_tail_is_refused_with_the_reason() -> None:
    with pytest.raises(RemoteProtocolError, match="runs past"):
        read_tail(b"\x01\x00" + encode_unsigned_varint(9) + b"\x02")
    with pytest.raises(RemoteProtocolError, match="after the top-level tags"):
        read_tail(b"\x00\x00")
    with pytest.raises(RemoteProtocolError, match="after the top-level tags"):
        read_tail(b"\x01\x00\x00", TailLayout.LAST_FIELD)
    with pytest.raises(RemoteProtocolError, match="malformed"):
        read_tail(b"\x02\x00\x00\x00", TailLayout.LAST_FIELD)  # an endpoint cut short
