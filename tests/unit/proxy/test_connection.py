"""Connection pairs against the scripted fake broker: order, pipelining, back-pressure, closing.

Every test runs a real ProxyServer on 127.0.0.1 in front of a WireBroker (see
:mod:`tests.fakes.wire_broker`) and talks to it with a bare framing client.
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Mapping
from typing import Any

import pytest

from protocol.fetch_tail import read_tail
from protocol.frames import encode_frame
from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import ApiKey, encode_request
from proxy.interceptors.base import Answer, Call, Forward, Interceptor, OnResponse
from proxy.splice import SPLICE_AVAILABLE
from tests.conditions import GENEROUS_S, wait_for
from tests.fakes.frame_client import FrameClient
from tests.fakes.kafka_requests import empty_fetch_request, list_offsets_request
from tests.fakes.kafka_responses import (
    fetch_response_payload,
    list_offsets_response,
    response_payload,
)
from tests.fakes.wire_broker import WireBroker, echo, raw_request, raw_response_body
from tests.unit.proxy.conftest import ProxyFactory


def list_offsets_frame(correlation_id: int) -> bytes:
    header = encode_request_header(ApiKey.LIST_OFFSETS, 1, correlation_id, "test")
    return encode_frame(header + encode_request(list_offsets_request()))


async def list_offsets_or_echo(header: RequestHeader, body: bytes) -> bytes | None:
    if header.api_key == ApiKey.LIST_OFFSETS:
        return response_payload(header, list_offsets_response())
    return await echo(header, body)


class Gate(Interceptor):
    """Holds ListOffsets responses until the test opens the gate; answers cid 1000+ locally."""

    def __init__(self) -> None:
        self.open = asyncio.Event()

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(1, 2)}

    def on_request(self, call: Call) -> Forward | Answer:
        then = OnResponse(self._held)
        if call.header.correlation_id >= 1000:
            return Answer(response=list_offsets_response(offset=1000), then=then)
        return Forward(request=call.request, then=then)

    async def _held(self, response: Any) -> Any:
        await self.open.wait()
        return response


async def test_raw_requests_and_responses_pass_byte_for_byte(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    body = bytes(range(256)) * 4
    await client.send(raw_request(41, body))
    assert await client.receive() == struct.pack(">i", 41) + b"echo:" + body
    await client.close()


class Jitter(Interceptor):
    """Delays each ListOffsets response by a pseudo-random few milliseconds."""

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: range(1, 2)}

    def on_request(self, call: Call) -> Forward | Answer:
        then = OnResponse(functools.partial(self._delayed, call.header.correlation_id))
        if call.header.correlation_id % 7 == 0:
            return Answer(response=list_offsets_response(offset=7), then=then)
        return Forward(request=call.request, then=then)

    @staticmethod
    async def _delayed(correlation_id: int, response: Any) -> Any:
        await asyncio.sleep((correlation_id * 37 % 11) / 1000)
        return response


async def test_pipelined_requests_come_back_in_request_order(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    fake_broker.script = list_offsets_or_echo
    proxy = await make_proxy(fake_broker, interceptors=(Jitter(),))
    client = await FrameClient.connect(proxy)
    count = 300
    # Raw, intercepted (delayed by a few ms) and locally answered requests, all in flight.
    await client.send(
        b"".join(
            list_offsets_frame(i) if i % 3 == 0 or i % 7 == 0 else raw_request(i, b"r%d" % i)
            for i in range(count)
        )
    )
    for i in range(count):
        answer = await client.receive()
        assert struct.unpack_from(">i", answer)[0] == i
        if not (i % 3 == 0 or i % 7 == 0):
            assert raw_response_body(answer) == (i, b"echo:r%d" % i)
    await client.close()


async def test_a_slow_intercepted_response_holds_back_later_ones(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    fake_broker.script = list_offsets_or_echo
    gate = Gate()
    proxy = await make_proxy(fake_broker, interceptors=(gate,))
    client = await FrameClient.connect(proxy)
    await client.send(
        list_offsets_frame(1)
        + raw_request(2, b"x")
        + list_offsets_frame(1000)
        + raw_request(3, b"y")
    )
    with pytest.raises(TimeoutError):
        await client.receive(seconds=0.3)
    gate.open.set()
    answers = [struct.unpack_from(">i", await client.receive())[0] for _ in range(4)]
    assert answers == [1, 2, 1000, 3]
    # The locally answered request never reached the broker.
    assert [cid for key, _, cid in fake_broker.requests if key == ApiKey.LIST_OFFSETS] == [1]
    await client.close()


@pytest.mark.parametrize("version", [3, 10])
async def test_produce_with_acks_zero_is_never_waited_for(
    fake_broker: WireBroker, make_proxy: ProxyFactory, version: int
) -> None:
    async def no_answer_to_produce(header: RequestHeader, body: bytes) -> bytes | None:
        return None if header.api_key == ApiKey.PRODUCE else await echo(header, body)

    fake_broker.script = no_answer_to_produce
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    header = encode_request_header(ApiKey.PRODUCE, version, 5, "test")
    if version >= 9:
        body = b"\x00" + struct.pack(">hi", 0, 1000) + b"\x01\x00"
    else:
        body = struct.pack(">hhii", -1, 0, 1000, 0)
    await client.send(encode_frame(header + body) + raw_request(6, b"after"))
    assert raw_response_body(await client.receive()) == (6, b"echo:after")
    await client.close()


async def test_multi_mib_responses_and_requests_stream_through(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    big = bytes(range(251)) * (12 * 1024 * 1024 // 251)
    await client.send(raw_request(1, big) + raw_request(2, b"small"))
    assert raw_response_body(await client.receive()) == (1, b"echo:" + big)
    assert raw_response_body(await client.receive()) == (2, b"echo:small")
    await client.close()


async def test_a_client_that_stops_reading_stops_the_broker_side(
    fake_broker: WireBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    answered: list[int] = []
    chunk = b"z" * (4 * 1024 * 1024)

    async def big_answers(header: RequestHeader, body: bytes) -> bytes:
        answered.append(header.correlation_id)
        return struct.pack(">i", header.correlation_id) + chunk

    fake_broker.script = big_answers
    proxy = await make_proxy(
        fake_broker,
        buffer_high_water_bytes=256 * 1024,
        buffer_low_water_bytes=64 * 1024,
    )
    client = await FrameClient.connect(proxy)
    count = 40  # 160 MiB of answers in all
    await client.send(b"".join(raw_request(i, b"") for i in range(count)))

    def broker_blocked() -> bool:
        """The broker's writer is paused (above asyncio's 64 KiB high-water mark) and waits
        in drain(); how much of its answers the kernel's socket buffers took first depends
        on their autotuning (several MiB each way on loopback), not on the proxy."""
        return any(t.get_write_buffer_size() > 64 * 1024 for t in fake_broker.connections)

    await wait_for(broker_blocked, what="the broker blocked writing")
    # A window in which only a proxy that kept reading could let the broker answer on (a
    # busy machine cannot fail this, only make it catch less): kernel buffers and the
    # watermarks (or the splice's pipe) hold a few MiB each, so the broker stays blocked
    # long before 40.
    await asyncio.sleep(1.0)
    assert len(answered) < count // 2
    assert bool(spliced) == SPLICE_AVAILABLE
    for i in range(count):
        correlation_id, body = raw_response_body(await client.receive())
        assert correlation_id == i
        assert body == chunk
    await client.close()


async def test_a_broker_that_stops_reading_stops_the_client_side(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(
        fake_broker, buffer_high_water_bytes=256 * 1024, buffer_low_water_bytes=64 * 1024
    )
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(0, b"hello"))
    assert raw_response_body(await client.receive()) == (0, b"echo:hello")
    for transport in fake_broker.connections:
        transport.pause_reading()
    payload = b"".join(raw_request(i, b"p" * 65536) for i in range(1, 2000))  # ~128 MiB
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            await client.send(payload)
    # The client's own buffer holds most of it: the proxy read no more than a few MiB.
    assert client.writer.transport.get_write_buffer_size() > 64 * 1024 * 1024
    for transport in fake_broker.connections:
        transport.resume_reading()

    async def read_all() -> list[int]:
        return [raw_response_body(await client.receive())[0] for _ in range(1, 2000)]

    # Like a real client, read while the rest of the requests go out.
    _, answered = await asyncio.gather(client.writer.drain(), read_all())
    assert answered == list(range(1, 2000))
    await client.close()


async def test_the_broker_closing_closes_the_client_promptly(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"a"))
    await client.receive()
    for transport in fake_broker.connections:
        transport.abort()
    assert await client.closed()
    await wait_for(lambda: proxy.connections == 0, what="the proxy dropped the pair")


async def test_the_client_closing_closes_the_broker_side(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"a"))
    await client.receive()
    fake_broker.disconnected.clear()
    await client.close()
    async with asyncio.timeout(GENEROUS_S):
        await fake_broker.disconnected.wait()
    assert proxy.connections == 0


async def test_half_closed_clients_still_get_their_answers(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"a") + raw_request(2, b"b"))
    client.writer.write_eof()
    assert raw_response_body(await client.receive())[0] == 1
    assert raw_response_body(await client.receive())[0] == 2
    assert await client.closed()


async def test_an_unreachable_broker_closes_the_client(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    await fake_broker.close()
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"a"))
    assert await client.closed()


@pytest.mark.parametrize("moved", [False, True], ids=["no-endpoints", "endpoints"])
async def test_multi_mib_fetch_v16_responses_stream_with_their_endpoints_rewritten(
    fake_broker: WireBroker, make_proxy: ProxyFactory, spliced: list[int], moved: bool
) -> None:
    records = bytes(range(251)) * (3 * 1024 * 1024 // 251)
    peers = [(1, "127.0.0.1", fake_broker.port), (2, "kafka-2.internal", fake_broker.port)]
    payload = fetch_response_payload(16, 9, records=records, endpoints=peers if moved else ())

    async def fetch(header: RequestHeader, body: bytes) -> bytes | None:
        return payload if header.api_key == ApiKey.FETCH else await echo(header, body)

    fake_broker.script = fetch
    fake_broker.peers = peers[1:]
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    request = encode_request_header(ApiKey.FETCH, 16, 9, "c") + encode_request(
        empty_fetch_request(16)
    )
    await client.send(encode_frame(request) + raw_request(10, b"after"))
    answer = await client.receive()
    assert raw_response_body(await client.receive()) == (10, b"echo:after")
    await client.close()
    assert len(answer) == len(payload)
    if SPLICE_AVAILABLE:  # the records went through the pipe, the tail through Python
        assert 0 < sum(spliced) <= len(records)
    if not moved:
        assert answer == payload
        return
    head = len(fetch_response_payload(16, 9, records=records)) - 1
    assert answer[:head] == payload[:head]
    proxied = {route.node_id: route.advertised for route in proxy.routes}
    endpoints = read_tail(answer[head:]).node_endpoints
    assert {(e.node_id, e.host, e.port) for e in endpoints} == {
        (node_id, address.host, address.port)
        for node_id, address in proxied.items()
        if node_id in (1, 2)
    }
