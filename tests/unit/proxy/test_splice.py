"""Zero-copy forwarding (proxy.splice) through a real ProxyServer in front of the FakeBroker:
responses the proxy need not read go broker socket → pipe → client socket, byte for byte,
bounded by the pipe while the client is slow, and either side closing mid-splice closes the
pair. A slow client stopping the splice and the broker, and the records of a streamed Fetch
v16 spliced, are in test_connection.py; the TLS fallback is in test_tls.py.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from protocol.headers import RequestHeader
from proxy.splice import SPLICE_AVAILABLE
from tests.conditions import wait_for
from tests.unit.proxy.conftest import Client, ProxyFactory
from tests.unit.proxy.fake_broker import (
    FakeBroker,
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
