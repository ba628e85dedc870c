"""The router: raw pass-through, acks=0, interceptor chains, local answers, bad input."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.headers import (
    encode_request_header,
    encode_response_header,
    parse_request_header,
)
from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from proxy.bad_connections import LOG_BURST, LOG_PER_SECOND
from proxy.broker_versions import BrokerVersions
from proxy.exchange_memory import ExchangeMemory
from proxy.interceptors.base import (
    Answer,
    Call,
    ConnectionInfo,
    Exchange,
    Forward,
    Interceptor,
    OnResponse,
)
from proxy.router import Router
from tests.fakes.kafka_requests import list_offsets_request
from tests.fakes.kafka_responses import list_offsets_response

CONNECTION = ConnectionInfo(connection_id=1, client="127.0.0.1:1", node_id=1)


def request_frame(api_key: int, version: int, body: Any, correlation_id: int = 7) -> bytes:
    return encode_request_header(api_key, version, correlation_id, "client") + encode_request(body)


def response_payload(body: Any, correlation_id: int = 7) -> bytes:
    return encode_response_header(correlation_id, 0) + encode_response(body)


class Recorder(Interceptor):
    """Records the order of calls; optionally rewrites or answers."""

    def __init__(
        self, name: str, log: list[str], *, rewrite: bool = False, answer: bool = False
    ) -> None:
        self.name = name
        self.log = log
        self.rewrite = rewrite
        self.answer = answer

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(1, 2)}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward | Answer:
        self.log.append(f"request:{self.name}")
        then = OnResponse(self._on_response)
        if self.answer:
            return Answer(response=list_offsets_response(offset=42), then=then)
        if self.rewrite:
            request: Any = call.request
            topic = request.topics[0]
            partition = dataclasses.replace(topic.partitions[0], timestamp=-2)
            topic = dataclasses.replace(topic, partitions=(partition,))
            return Forward(request=dataclasses.replace(request, topics=(topic,)), then=then)
        return Forward(request=call.request, then=then)

    async def _on_response(self, response: Any) -> Any:
        self.log.append(f"response:{self.name}")
        if self.rewrite:
            topic = response.topics[0]
            partition = dataclasses.replace(topic.partitions[0], offset=99)
            return dataclasses.replace(
                response, topics=(dataclasses.replace(topic, partitions=(partition,)),)
            )
        return response


def test_a_raw_request_is_routed_without_decoding() -> None:
    frame = struct.pack(">hhih", 12, 0, 3, -1) + b"\xff\xff opaque, not a heartbeat"
    route = Router([]).route(frame, CONNECTION)
    assert route.exchange is None
    assert (route.api_key, route.api_version, route.correlation_id) == (12, 0, 3)
    assert route.expects_response


@pytest.mark.parametrize(
    ("version", "acks", "expected"), [(3, 0, False), (3, 1, True), (9, 0, False), (9, -1, True)]
)
def test_produce_acks_zero_expects_no_response(version: int, acks: int, expected: bool) -> None:
    if version >= 9:
        body = b"\x00" + struct.pack(">hi", acks, 1000) + b"\x01\x00"
    else:
        body = struct.pack(">hhii", -1, acks, 1000, 0)
    frame = encode_request_header(ApiKey.PRODUCE, version, 1, "c") + body
    assert Router([]).route(frame, CONNECTION).expects_response is expected


async def test_chain_order_is_middleware_like() -> None:
    log: list[str] = []
    router = Router([Recorder("a", log), Recorder("b", log)])
    frame = request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request())
    route = router.route(frame, CONNECTION)
    assert route.exchange is not None
    assert route.exchange.forward == frame  # unchanged: the client's own bytes
    payload = response_payload(list_offsets_response())
    assert await route.exchange.respond(payload) == payload  # unchanged: the broker's bytes
    assert log == ["request:a", "request:b", "response:b", "response:a"]


async def test_rewritten_requests_and_responses_are_re_encoded() -> None:
    router = Router([Recorder("r", [], rewrite=True)])
    frame = request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request(timestamp=-1))
    route = router.route(frame, CONNECTION)
    assert route.exchange is not None
    forward = route.exchange.forward
    assert forward is not None and forward != frame
    assert forward.startswith(frame[: len(frame) - len(encode_request(list_offsets_request()))])
    assert forward.endswith(encode_request(list_offsets_request(timestamp=-2)))
    out = await route.exchange.respond(response_payload(list_offsets_response()))
    answer = decode_response(ApiKey.LIST_OFFSETS, 1, bytes(out)[4:])
    assert answer.topics[0].partitions[0].offset == 99


async def test_an_answer_skips_the_broker_and_later_interceptors() -> None:
    log: list[str] = []
    router = Router([Recorder("a", log), Recorder("b", log, answer=True), Recorder("c", log)])
    route = router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)
    assert route.exchange is not None and route.exchange.forward is None
    out = await route.exchange.respond(None)
    assert struct.unpack_from(">i", bytes(out))[0] == 7
    answer = decode_response(ApiKey.LIST_OFFSETS, 1, bytes(out)[4:])
    assert answer.topics[0].partitions[0].offset == 42
    assert log == ["request:a", "request:b", "response:b", "response:a"]


async def test_an_undecodable_broker_response_is_forwarded_as_is() -> None:
    router = Router([Recorder("a", [])])
    route = router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)
    assert route.exchange is not None
    garbage = struct.pack(">i", 7) + b"\x00\x01\x02"
    assert await route.exchange.respond(garbage) == garbage


async def test_a_response_for_another_correlation_id_is_a_protocol_error() -> None:
    router = Router([Recorder("a", [])])
    route = router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)
    assert route.exchange is not None
    with pytest.raises(RemoteProtocolError):
        await route.exchange.respond(response_payload(list_offsets_response(), correlation_id=8))


def test_a_read_api_at_a_version_the_proxy_cannot_decode_reaches_the_broker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fetch v3 (clients before 0.11 never ask ApiVersions): the broker speaks it, so the
    client is not disconnected; the proxy logs, once per connection, that it is passed."""
    frame = struct.pack(">hhih", ApiKey.FETCH, 3, 1, -1) + b"\x00" * 20
    router = Router([])
    for _ in range(3):
        route = router.route(frame, CONNECTION)
        assert route.exchange is None and route.expects_response
    passed = [r for r in caplog.records if r.getMessage() == "request.version.passed"]
    assert len(passed) == 1
    router.connection_closed(CONNECTION.connection_id)
    router.route(frame, CONNECTION)
    assert len([r for r in caplog.records if r.getMessage() == "request.version.passed"]) == 2


def test_passed_version_lines_are_rate_limited_across_connections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A flood of old (or hostile) clients logs a burst, then counts what it leaves out."""
    frame = struct.pack(">hhih", ApiKey.FETCH, 3, 1, -1) + b"\x00" * 20
    now = [0.0]
    router = Router([], clock=lambda: now[0])
    for connection_id in range(LOG_BURST + 5):
        router.route(frame, dataclasses.replace(CONNECTION, connection_id=connection_id))
    now[0] += 1 / LOG_PER_SECOND
    router.route(frame, dataclasses.replace(CONNECTION, connection_id=1000))
    passed = [r for r in caplog.records if r.getMessage() == "request.version.passed"]
    assert len(passed) == LOG_BURST + 1
    assert getattr(passed[-1], "tierproxy_fields", {})["suppressed_before"] == 5


def test_an_address_carrying_api_at_a_version_the_proxy_cannot_decode_is_refused() -> None:
    """Passed on undecoded, a Metadata answer would send the client around the proxy."""
    newest = INTERCEPTED_VERSIONS[ApiKey.METADATA][-1]
    frame = struct.pack(">hhih", ApiKey.METADATA, newest + 1, 1, -1) + b"\x00" * 20
    with pytest.raises(RemoteProtocolError) as caught:
        Router([]).route(frame, CONNECTION)
    assert caught.value.error_code == KafkaError.UNSUPPORTED_VERSION


class ServedAbove(Interceptor):
    """Serves ListOffsets v7-v9 whatever the broker's maximum, as the remote tier does."""

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(7, 10)}

    @property
    def served_above_broker(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(7, 10)}

    def on_request(self, call: Call) -> Forward:
        return Forward(request=call.request)


def router_for_broker(list_offsets: range | None) -> Router:
    versions = BrokerVersions()
    if list_offsets is not None:
        versions.learn(
            CONNECTION.node_id,
            SimpleNamespace(
                error_code=0,
                api_keys=[
                    SimpleNamespace(
                        api_key=int(ApiKey.LIST_OFFSETS),
                        min_version=list_offsets[0],
                        max_version=list_offsets[-1],
                    )
                ],
            ),
        )
    return Router([ServedAbove()], broker_versions=versions)


async def test_a_version_served_above_the_broker_goes_at_the_brokers_version() -> None:
    request = list_offsets_request(version=9, timestamp=-2)
    route = router_for_broker(range(0, 8)).route(
        request_frame(ApiKey.LIST_OFFSETS, 9, request), CONNECTION
    )
    assert route.exchange is not None and route.exchange.forward is not None
    forwarded = parse_request_header(route.exchange.forward)
    assert (forwarded.api_version, forwarded.correlation_id) == (7, 7)
    body = decode_request(
        ApiKey.LIST_OFFSETS, 7, memoryview(route.exchange.forward)[forwarded.size :]
    )
    assert body.topics[0].partitions[0].timestamp == -2
    broker_answer = encode_response_header(7, 1) + encode_response(
        list_offsets_response(version=7, offset=31)
    )
    assert not route.exchange.try_pass_through(broker_answer)
    out = bytes(await route.exchange.respond(broker_answer))
    client_header_size = 5  # correlation id and no tagged fields (header v1)
    answer = decode_response(ApiKey.LIST_OFFSETS, 9, out[client_header_size:])
    assert answer.topics[0].partitions[0].offset == 31


@pytest.mark.parametrize("broker_range", [range(0, 10), None, range(0, 7)])
def test_a_served_above_version_goes_unchanged_when_the_broker_speaks_it_or_is_unknown(
    broker_range: range | None,
) -> None:
    """The broker speaks v9, nobody asked it ApiVersions yet, or it cannot take even v7
    (it answers UNSUPPORTED_VERSION itself)."""
    frame = request_frame(ApiKey.LIST_OFFSETS, 9, list_offsets_request(version=9))
    route = router_for_broker(broker_range).route(frame, CONNECTION)
    assert route.exchange is not None and route.exchange.forward == frame


def test_a_malformed_intercepted_request_is_refused() -> None:
    router = Router([Recorder("a", [])])
    frame = encode_request_header(ApiKey.LIST_OFFSETS, 1, 1, "c") + b"\x00\x01"
    with pytest.raises(RemoteProtocolError):
        router.route(frame, CONNECTION)


def test_a_frame_shorter_than_a_header_is_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        Router([]).route(b"\x00\x12\x00", CONNECTION)


async def test_a_too_new_api_versions_gets_kafkas_unsupported_version_answer() -> None:
    newest = INTERCEPTED_VERSIONS[ApiKey.API_VERSIONS][-1]
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, newest + 5, 99, -1) + b"\x00future"
    route = Router([]).route(frame, CONNECTION)
    assert route.exchange is not None and route.exchange.forward is None
    out = await route.exchange.respond(None)
    assert struct.unpack_from(">i", bytes(out))[0] == 99
    body = decode_response(ApiKey.API_VERSIONS, 0, bytes(out)[4:])
    assert body.error_code == KafkaError.UNSUPPORTED_VERSION
    assert [(e.api_key, e.min_version, e.max_version) for e in body.api_keys] == [
        (ApiKey.API_VERSIONS, 0, newest)
    ]


def test_interceptors_cannot_claim_versions_the_proxy_does_not_decode() -> None:
    class Greedy(Interceptor):
        @property
        def versions(self) -> Mapping[ApiKey, range]:
            return {ApiKey.FETCH: range(0, 18)}

        def on_request(self, call: Call) -> Forward:
            return Forward(request=call.request)

    with pytest.raises(LocalProtocolError):
        Router([Greedy()])


class Holding(Interceptor):
    """Keeps an exchange holding ``size`` bytes per request; optionally fails or rewrites
    without one."""

    def __init__(self, size: int, *, fail: bool = False, bare_rewrite: bool = False) -> None:
        self.size = size
        self.fail = fail
        self.bare_rewrite = bare_rewrite
        self.released: list[int] = []

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(1, 2)}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        if self.fail:
            raise RemoteProtocolError("refused")
        if self.bare_rewrite:
            request: Any = call.request
            return Forward(request=dataclasses.replace(request, replica_id=-1))
        return Forward(request=call.request, then=Held(self, call.header.correlation_id))


class Held(Exchange):
    def __init__(self, owner: Holding, correlation_id: int) -> None:
        self.owner = owner
        self.correlation_id = correlation_id

    @property
    def held_bytes(self) -> int:
        return self.owner.size

    def release(self) -> None:
        self.owner.released.append(self.correlation_id)


async def test_a_requests_exchanges_hold_memory_until_released_once() -> None:
    holding = Holding(300)
    router = Router([holding, Holding(200)], memory=ExchangeMemory(400))
    route = router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)
    assert route.exchange is not None
    assert router.memory.held == 500 and not router.memory.admits
    await route.exchange.respond(response_payload(list_offsets_response()))
    assert holding.released == []  # answered, not yet written: still outstanding
    route.exchange.release()
    assert holding.released == [7]
    assert router.memory.held == 0 and router.memory.admits


def test_exchanges_of_a_refused_request_are_released() -> None:
    holding = Holding(300)
    router = Router([holding, Holding(0, fail=True)])
    with pytest.raises(RemoteProtocolError):
        router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)
    assert holding.released == [7]
    assert router.memory.held == 0


def test_a_request_rewritten_without_an_exchange_is_refused() -> None:
    """Its answer could only be relayed as the broker sent it, to a question the client
    never asked."""
    router = Router([Holding(0, bare_rewrite=True)])
    with pytest.raises(LocalProtocolError):
        router.route(request_frame(ApiKey.LIST_OFFSETS, 1, list_offsets_request()), CONNECTION)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (ApiKey.FETCH, INTERCEPTED_VERSIONS[ApiKey.FETCH][-1] + 1),
        (ApiKey.PRODUCE, INTERCEPTED_VERSIONS[ApiKey.PRODUCE][-1] + 1),
        (ApiKey.SHARE_FETCH, INTERCEPTED_VERSIONS[ApiKey.SHARE_FETCH][-1] + 1),
        (ApiKey.SHARE_ACKNOWLEDGE, 0),
    ],
)
def test_a_version_that_may_name_brokers_is_refused_when_the_proxy_cannot_decode_it(
    api_key: ApiKey, version: int
) -> None:
    """A newer Fetch or Produce may carry node endpoints (KIP-951), any ShareFetch or
    ShareAcknowledge does: passed on undecoded, they could send the client to a broker."""
    frame = struct.pack(">hhih", api_key, version, 1, -1) + b"\x00" * 20
    with pytest.raises(RemoteProtocolError) as caught:
        Router([]).route(frame, CONNECTION)
    assert caught.value.error_code == KafkaError.UNSUPPORTED_VERSION


async def test_an_undecodable_answer_that_may_name_brokers_closes_the_connection() -> None:
    """Forwarded as it is, a Metadata answer kio cannot read could send the client around
    the proxy: the connection closes instead (the error is the caller's log line)."""

    class Metadata(Interceptor):
        @property
        def versions(self) -> Mapping[ApiKey, range]:
            return {ApiKey.METADATA: range(12, 13)}

        def on_request(self, call: Call) -> Forward:
            return Forward(request=call.request, then=Decoded())

    class Decoded(Exchange):
        """Wants every response decoded (the Exchange defaults)."""

    request = decode_request(ApiKey.METADATA, 12, b"\x01\x01\x00\x00")
    route = Router([Metadata()]).route(request_frame(ApiKey.METADATA, 12, request), CONNECTION)
    assert route.exchange is not None
    with pytest.raises(RemoteProtocolError, match="address-carrying"):
        await route.exchange.respond(encode_response_header(7, 1) + b"\x00\x01\x02")
