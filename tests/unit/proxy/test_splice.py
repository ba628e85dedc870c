"""Zero-copy forwarding (proxy.splice) through a real ProxyServer in front of the FakeBroker:
responses the proxy need not read go broker socket → pipe → client socket, byte for byte,
bounded by the pipe while the client is slow, and either side closing mid-splice closes the
pair. The TLS fallback is in test_tls.py.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import ApiKey, encode_request
from proxy.splice import SPLICE_AVAILABLE
from tests.conditions import wait_for
from tests.unit.proxy.conftest import Client, ProxyFactory, frame
from tests.unit.proxy.fake_broker import (
    FakeBroker,
    echo,
    empty_fetch_request,
    fetch_response_payload,
    raw_request,
    raw_response_body,
)

pytestmark = pytest.mark.skipif(not SPLICE_AVAILABLE, reason="splice(2) is Linux only")

MIB = 1024 * 1024


@pytest.mark.parametrize("enabled", [True, False], ids=["spliced", "copied"])
async def test_large_raw_responses_pass_byte_for_byte(
    fake_broker: FakeBroker, make_proxy: ProxyFactory, spliced: list[int], enabled: bool
) -> None:
    proxy = await make_proxy(fake_broker, splice_enable=enabled)
    client = await Client.connect(proxy)
    big = bytes(range(251)) * (9 * MIB // 251)
    await client.send(
        raw_request(1, big) + raw_request(2, b"small") + raw_request(3, big[: 3 * MIB])
    )
    assert raw_response_body(await client.receive(seconds=30)) == (1, b"echo:" + big)
    assert raw_response_body(await client.receive()) == (2, b"echo:small")
    assert raw_response_body(await client.receive(seconds=30)) == (3, b"echo:" + big[: 3 * MIB])
    await client.close()
    if enabled:
        # Most of each large answer went through the pipe; the small one never did.
        assert sum(spliced) > (9 + 3) * MIB // 2
        assert min(spliced) >= 64 * 1024
    else:
        assert spliced == []


async def test_the_records_of_a_fetch_v16_are_spliced_and_its_tail_still_rewritten(
    fake_broker: FakeBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    records = bytes(range(251)) * (6 * MIB // 251)
    peers = [(1, "127.0.0.1", fake_broker.port), (2, "kafka-2.internal", fake_broker.port)]
    payload = fetch_response_payload(16, 9, records=records, endpoints=peers)

    async def fetch(header: RequestHeader, body: bytes) -> bytes | None:
        return payload if header.api_key == ApiKey.FETCH else await echo(header, body)

    fake_broker.script = fetch
    fake_broker.peers = peers[1:]
    proxy = await make_proxy(fake_broker)
    client = await Client.connect(proxy)
    request = encode_request_header(ApiKey.FETCH, 16, 9, "c") + encode_request(
        empty_fetch_request(16)
    )
    await client.send(frame(request) + raw_request(10, b"after"))
    answer = await client.receive(seconds=30)
    assert raw_response_body(await client.receive()) == (10, b"echo:after")
    await client.close()
    head = len(fetch_response_payload(16, 9, records=records)) - 1
    assert len(answer) == len(payload)
    assert answer[:head] == payload[:head]
    assert b"kafka-2.internal" not in answer  # the tail was rewritten after the splice
    assert 0 < sum(spliced) <= len(records)


async def test_a_slow_client_stops_the_splice_and_the_broker(
    fake_broker: FakeBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    answered: list[int] = []
    chunk = b"z" * (8 * MIB)

    async def big_answers(header: RequestHeader, body: bytes) -> bytes:
        answered.append(header.correlation_id)
        return struct.pack(">i", header.correlation_id) + chunk

    fake_broker.script = big_answers
    proxy = await make_proxy(
        fake_broker, buffer_high_water_bytes=256 * 1024, buffer_low_water_bytes=64 * 1024
    )
    client = await Client.connect(proxy)
    count = 20  # 160 MiB of answers in all
    await client.send(b"".join(raw_request(i, b"") for i in range(count)))
    await wait_for(
        lambda: any(t.get_write_buffer_size() >= len(chunk) // 2 for t in fake_broker.connections),
        what="the broker blocked writing",
    )
    # The pipe, the socket buffers and one answer in the broker: far from all of them.
    assert len(answered) < count // 2
    assert spliced
    for i in range(count):
        assert raw_response_body(await client.receive(seconds=30)) == (i, chunk)
    await client.close()


async def test_a_client_gone_mid_splice_closes_the_pair(
    fake_broker: FakeBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    proxy = await make_proxy(
        fake_broker, buffer_high_water_bytes=256 * 1024, buffer_low_water_bytes=64 * 1024
    )
    client = await Client.connect(proxy)
    await client.send(raw_request(1, b"x" * (32 * MIB)))
    await wait_for(lambda: bool(spliced), what="the proxy splicing the answer")
    fake_broker.disconnected.clear()
    client.writer.transport.abort()
    async with asyncio.timeout(5):
        await fake_broker.disconnected.wait()
    await wait_for(lambda: proxy.connections == 0, what="the proxy dropped the pair")


async def test_a_broker_gone_mid_splice_closes_the_client(
    fake_broker: FakeBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    async def half_an_answer(header: RequestHeader, body: bytes) -> bytes | None:
        transport = fake_broker.connections[-1]
        transport.write(struct.pack(">ii", 8 * MIB, header.correlation_id) + b"h" * (2 * MIB))
        transport.close()
        return None

    fake_broker.script = half_an_answer
    proxy = await make_proxy(fake_broker)
    client = await Client.connect(proxy)
    await client.send(raw_request(1, b""))
    assert await client.closed(seconds=10)
    await wait_for(lambda: proxy.connections == 0, what="the proxy dropped the pair")
    assert spliced
