"""Address rewriting: every response that names brokers, at every version the proxy handles."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from protocol.errors import RemoteProtocolError
from protocol.fetch_tail import TailLayout, read_tail
from protocol.headers import RequestHeader, encode_request_header, encode_response_header
from protocol.messages import (
    ApiKey,
    ErrorCode,
    build,
    decode_response,
    encode_request,
    encode_response,
    nested_class,
)
from protocol.messages import response_class as response_of
from proxy.config import HostPort
from proxy.interceptors.addresses import AddressRewriter, BrokerAddress
from proxy.interceptors.base import Call, ConnectionInfo, Forward, Interceptor, OnResponse
from proxy.router import Router
from tests.fakes.kafka_requests import empty_fetch_request
from tests.fakes.kafka_responses import fetch_response_payload, share_response_payload

BROKERS = ((1, "kafka-1.internal", 9092), (2, "kafka-2.internal", 9093))
PROXIED = {1: HostPort(host="proxy", port=19092), 2: HostPort(host="proxy", port=19093)}


class RecordingBook:
    def __init__(self) -> None:
        self.seen: list[BrokerAddress] = []

    async def advertise(self, brokers: Sequence[BrokerAddress]) -> Mapping[int, HostPort]:
        self.seen.extend(brokers)
        return {b.node_id: PROXIED[b.node_id] for b in brokers if b.node_id in PROXIED}


def call(api_key: int, version: int) -> Call:
    header = RequestHeader(
        api_key=api_key,
        api_version=version,
        correlation_id=1,
        client_id="t",
        header_version=1,
        size=0,
    )
    connection = ConnectionInfo(connection_id=1, client="c", node_id=1)
    return Call(connection=connection, header=header, request=None)


def entries(body_class: type[Any], field: str, id_field: str) -> tuple[Any, ...]:
    entry_class = nested_class(body_class, field)
    return tuple(
        build(
            entry_class,
            **{id_field: node_id},
            host=host,
            port=port,
            rack=None,
            key=f"group-{node_id}",
            error_code=ErrorCode.none,
            error_message=None,
            is_fenced=False,
        )
        for node_id, host, port in BROKERS
    )


def response_with_brokers(api_key: ApiKey, version: int) -> tuple[Any, str | None, str]:
    body_class = response_of(api_key, version)
    common: dict[str, Any] = {
        "throttle_time": datetime.timedelta(0),
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": (),
        "responses": (),
        "cluster_id": "c",
        "controller_id": 1,
        "acquisition_lock_timeout": datetime.timedelta(0),
    }
    if api_key == ApiKey.METADATA:
        return (
            build(body_class, brokers=entries(body_class, "brokers", "node_id"), **common),
            ("brokers"),
            "node_id",
        )
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        brokers = entries(body_class, "brokers", "broker_id")
        return build(body_class, brokers=brokers, **common), "brokers", "broker_id"
    if api_key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
        endpoints = entries(body_class, "node_endpoints", "node_id")
        return build(body_class, node_endpoints=endpoints, **common), "node_endpoints", "node_id"
    if version >= 4:
        coordinators = entries(body_class, "coordinators", "node_id")
        return build(body_class, coordinators=coordinators, **common), "coordinators", "node_id"
    node_id, host, port = BROKERS[1]
    single = build(body_class, node_id=node_id, host=host, port=port, **common)
    return single, None, "node_id"


CASES = [
    pytest.param(api_key, version, id=f"{api_key.name}-v{version}")
    for api_key, versions in AddressRewriter(RecordingBook()).versions.items()
    for version in versions
]


def test_rewriter_covers_kip_951_versions_only() -> None:
    versions = AddressRewriter(RecordingBook()).versions
    assert versions[ApiKey.PRODUCE][0] == 10
    assert list(versions[ApiKey.FETCH]) == [16, 17, 18]
    assert list(versions[ApiKey.SHARE_FETCH]) == list(versions[ApiKey.SHARE_ACKNOWLEDGE]) == [1, 2]
    assert list(versions[ApiKey.FIND_COORDINATOR]) == list(range(7))
    assert versions[ApiKey.METADATA][0] == 0


@pytest.mark.parametrize(("api_key", "version"), CASES)
async def test_every_broker_address_becomes_a_proxy_address(api_key: ApiKey, version: int) -> None:
    response, field, id_field = response_with_brokers(api_key, version)
    book = RecordingBook()
    rewritten = await AddressRewriter(book).on_response(call(api_key, version), response)
    listed = (rewritten,) if field is None else getattr(rewritten, field)
    assert listed
    for entry in listed:
        assert (entry.host, entry.port) == (
            PROXIED[getattr(entry, id_field)].host,
            PROXIED[getattr(entry, id_field)].port,
        )
    # The book learned the brokers' own addresses (upstreams for new listeners).
    assert {(b.node_id, b.host, b.port) for b in book.seen} <= set(BROKERS)
    # And the rewritten response still encodes and decodes at that version.
    assert decode_response(api_key, version, encode_response(rewritten)) == rewritten


async def test_responses_without_brokers_are_returned_unchanged() -> None:
    body_class = response_of(ApiKey.FETCH, 16)
    response = build(
        body_class, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=()
    )
    book = RecordingBook()
    assert await AddressRewriter(book).on_response(call(ApiKey.FETCH, 16), response) is response
    assert book.seen == []


async def test_coordinator_errors_are_not_rewritten() -> None:
    body_class = response_of(ApiKey.FIND_COORDINATOR, 2)
    response = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.coordinator_not_available,
        error_message="not yet",
        node_id=-1,
        host="",
        port=-1,
    )
    out = await AddressRewriter(RecordingBook()).on_response(
        call(ApiKey.FIND_COORDINATOR, 2), response
    )
    assert out is response


async def test_brokers_unknown_to_the_book_keep_their_address() -> None:
    response, _, _ = response_with_brokers(ApiKey.METADATA, 12)
    extra = dataclasses.replace(response.brokers[0], node_id=7, host="kafka-7", port=9099)
    response = dataclasses.replace(response, brokers=(*response.brokers, extra))
    out = await AddressRewriter(RecordingBook()).on_response(call(ApiKey.METADATA, 12), response)
    assert (out.brokers[-1].host, out.brokers[-1].port) == ("kafka-7", 9099)


st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

SCANNED = [
    pytest.param(api_key, version, id=f"{api_key.name}-v{version}")
    for api_key in (ApiKey.FETCH, ApiKey.PRODUCE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
    for version in AddressRewriter(RecordingBook()).versions[api_key]
]


@pytest.mark.parametrize(("api_key", "version"), SCANNED)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_the_scan_sees_node_endpoints_without_decoding(
    api_key: ApiKey, version: int, data: st.DataObject
) -> None:
    response = data.draw(st.from_type(response_of(api_key, version)))
    body = memoryview(encode_response(response))
    wants = AddressRewriter(RecordingBook()).wants_response(call(api_key, version), body)
    assert wants == bool(response.node_endpoints)


@pytest.mark.parametrize("api_key", [ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE])
async def test_share_answers_without_endpoints_pass_undecoded_and_moved_ones_are_rewritten(
    api_key: ApiKey,
) -> None:
    """Not streamed (the answer waits behind another): judged by a walk of its body."""
    router = Router([AddressRewriter(RecordingBook())])
    frame = encode_request_header(api_key, 2, 9, "c")  # the body is not read
    route = router.route(frame, ConnectionInfo(connection_id=1, client="c", node_id=1))
    assert route.exchange is not None
    records = b"r" * 300 if api_key == ApiKey.SHARE_FETCH else b""
    assert route.exchange.try_pass_through(
        bytearray(share_response_payload(api_key, 2, 9, records=records))
    )
    payload = share_response_payload(api_key, 2, 9, records=records, endpoints=BROKERS)
    assert not route.exchange.try_pass_through(bytearray(payload))
    out = await route.exchange.respond(bytearray(payload))
    answer = decode_response(api_key, 2, bytes(out)[5:])
    assert {(e.host, e.port) for e in answer.node_endpoints} == {
        ("proxy", 19092),
        ("proxy", 19093),
    }
    assert bytes(getattr(answer.responses[0].partitions[0], "records", None) or b"") == records


def test_a_truncated_body_is_left_to_the_decoder() -> None:
    response, _, _ = response_with_brokers(ApiKey.FETCH, 16)
    body = memoryview(encode_response(response))[:-3]
    assert AddressRewriter(RecordingBook()).wants_response(call(ApiKey.FETCH, 16), body)


async def test_fetch_responses_without_endpoints_pass_undecoded_through_the_router() -> None:
    router = Router([AddressRewriter(RecordingBook())])
    connection = ConnectionInfo(connection_id=1, client="c", node_id=1)
    request = empty_fetch_request(16)
    frame = encode_request_header(ApiKey.FETCH, 16, 9, "c") + encode_request(request)
    route = router.route(frame, connection)
    assert route.exchange is not None
    plain = build(
        response_of(ApiKey.FETCH, 16),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        responses=(),
    )
    payload = encode_response_header(9, 1) + encode_response(plain)
    assert route.exchange.try_pass_through(bytearray(payload))
    moved, _, _ = response_with_brokers(ApiKey.FETCH, 16)
    payload = encode_response_header(9, 1) + encode_response(moved)
    assert not route.exchange.try_pass_through(bytearray(payload))
    out = await route.exchange.respond(bytearray(payload))
    endpoints = decode_response(ApiKey.FETCH, 16, bytes(out)[5:]).node_endpoints
    assert {(e.host, e.port) for e in endpoints} == {("proxy", 19092), ("proxy", 19093)}


def fetch_payload(version: int, *, moved: bool, records: bytes = b"r" * 5000) -> bytes:
    """A Fetch response with one partition, and BROKERS as node endpoints when ``moved``."""
    return fetch_response_payload(version, 9, records=records, endpoints=BROKERS if moved else ())


async def stream_through(
    router: Router, version: int, payload: bytes, cuts: list[int], api_key: ApiKey = ApiKey.FETCH
) -> bytes:
    """What a connection pair writes for ``payload`` streamed in pieces cut at ``cuts``."""
    frame = encode_request_header(api_key, version, 9, "c")
    if api_key == ApiKey.FETCH:
        frame += encode_request(empty_fetch_request(version))
    route = router.route(frame, ConnectionInfo(connection_id=1, client="c", node_id=1))
    assert route.exchange is not None
    stream = route.exchange.stream()
    assert stream is not None
    out = bytearray()
    edges = sorted({0, len(payload), *(c % (len(payload) + 1) for c in cuts)})
    for start, end in itertools.pairwise(edges):
        piece = payload[start:end]
        out += piece[: stream.feed(memoryview(piece))]
    tail = stream.end()
    return bytes(out + (tail if tail is not None else await stream.rewrite()))


@pytest.mark.parametrize("version", [16, 17, 18])
@settings(max_examples=10, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=30))
async def test_streamed_fetch_responses_without_endpoints_pass_byte_for_byte(
    version: int, cuts: list[int]
) -> None:
    payload = fetch_payload(version, moved=False)
    book = RecordingBook()
    assert await stream_through(Router([AddressRewriter(book)]), version, payload, cuts) == payload
    assert book.seen == []


@pytest.mark.parametrize("version", [16, 17, 18])
@settings(max_examples=10, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=30))
async def test_streamed_fetch_endpoints_are_rewritten_in_place(
    version: int, cuts: list[int]
) -> None:
    payload = fetch_payload(version, moved=True)
    out = await stream_through(Router([AddressRewriter(RecordingBook())]), version, payload, cuts)
    assert len(out) == len(payload)
    head = len(fetch_payload(version, moved=False)) - 1  # all but the empty tail's 00
    assert out[:head] == payload[:head]
    endpoints = read_tail(out[head:]).node_endpoints
    assert {(e.node_id, e.host, e.port) for e in endpoints} == {
        (1, "proxy", 19092),
        (2, "proxy", 19093),
    }


SHARED = [
    pytest.param(api_key, version, id=f"{api_key.name}-v{version}")
    for api_key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
    for version in (1, 2)
]


def share_payload(api_key: ApiKey, version: int, *, moved: bool) -> bytes:
    records = b"r" * 5000 if api_key == ApiKey.SHARE_FETCH else b""
    endpoints = BROKERS if moved else ()
    return share_response_payload(api_key, version, 9, records=records, endpoints=endpoints)


@pytest.mark.parametrize(("api_key", "version"), SHARED)
@settings(max_examples=10, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=30))
async def test_streamed_share_answers_pass_byte_for_byte_or_with_proxy_endpoints_in_place(
    api_key: ApiKey, version: int, cuts: list[int]
) -> None:
    book = RecordingBook()
    router = Router([AddressRewriter(book)])
    plain = share_payload(api_key, version, moved=False)
    assert await stream_through(router, version, plain, cuts, api_key) == plain
    assert book.seen == []
    payload = share_payload(api_key, version, moved=True)
    out = await stream_through(router, version, payload, cuts, api_key)
    assert len(out) == len(payload)
    head = len(plain) - 2  # all but the empty tail's 01 00
    assert out[:head] == payload[:head]
    endpoints = read_tail(out[head:], TailLayout.LAST_FIELD).node_endpoints
    assert {(e.node_id, e.host, e.port) for e in endpoints} == {
        (1, "proxy", 19092),
        (2, "proxy", 19093),
    }


async def test_a_streamed_response_that_cannot_be_walked_closes_the_connection() -> None:
    """It may name brokers where the walk could not look. (A malformed count may have let the
    walk skip to the end of the bytes: the client got them, and cannot parse them either.)"""
    router = Router([AddressRewriter(RecordingBook())])
    payload = share_payload(ApiKey.SHARE_FETCH, 2, moved=True)
    frame = encode_request_header(ApiKey.SHARE_FETCH, 2, 9, "c")
    for broken in (payload[:-40], payload[:12] + b"\xff" * 6 + payload[18:]):
        route = router.route(frame, ConnectionInfo(connection_id=1, client="c", node_id=1))
        assert route.exchange is not None
        stream = route.exchange.stream()
        assert stream is not None
        stream.feed(memoryview(broken))
        assert stream.end() is None
        with pytest.raises(RemoteProtocolError):
            await stream.rewrite()


async def test_a_malformed_fetch_tail_closes_the_connection() -> None:
    payload = fetch_payload(16, moved=True)
    head = len(fetch_payload(16, moved=False)) - 1
    # One tagged field, tag 0 (the endpoints), whose size runs past the response.
    broken = payload[: head + 2] + b"\x7f" + payload[head + 3 :]
    with pytest.raises(RemoteProtocolError):
        await stream_through(Router([AddressRewriter(RecordingBook())]), 16, broken, [])


async def test_streamed_endpoints_too_long_to_fit_are_left_out() -> None:
    class LongNames(RecordingBook):
        async def advertise(self, brokers: Sequence[BrokerAddress]) -> Mapping[int, HostPort]:
            return {
                b.node_id: HostPort(host="a-" + "very-" * 10 + "long.proxy", port=1)
                for b in brokers
            }

    payload = fetch_payload(16, moved=True)
    out = await stream_through(Router([AddressRewriter(LongNames())]), 16, payload, [])
    assert len(out) == len(payload)
    head = len(fetch_payload(16, moved=False)) - 1
    tail = read_tail(out[head:])
    assert tail.node_endpoints == ()
    assert [tag for tag, _ in tail.others] != []


async def test_fetch_responses_stream_only_when_every_interceptor_judges_the_tail_alone() -> None:
    class Reader(Interceptor):
        @property
        def versions(self) -> Mapping[ApiKey, range]:
            return {ApiKey.FETCH: range(16, 18)}

        def on_request(self, call: Call) -> Forward:
            return Forward(request=call.request, then=OnResponse(self._read))

        async def _read(self, response: Any) -> Any:
            return response

    router = Router([AddressRewriter(RecordingBook()), Reader()])
    frame = encode_request_header(ApiKey.FETCH, 16, 9, "c") + encode_request(
        empty_fetch_request(16)
    )
    route = router.route(frame, ConnectionInfo(connection_id=1, client="c", node_id=1))
    assert route.exchange is not None
    assert route.exchange.stream() is None
