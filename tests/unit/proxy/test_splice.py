"""Zero-copy forwarding (proxy.splice) through a real ProxyServer in front of the WireBroker:
responses the proxy need not read go broker socket → pipe → client socket, byte for byte,
bounded by the pipe while the client is slow, and either side closing mid-splice closes the
pair. A slow client stopping the splice and the broker, and the records of a streamed Fetch
v16 spliced, are in test_connection.py; the TLS fallback is in test_tls.py.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.headers import RequestHeader
from proxy.splice import SPLICE_AVAILABLE, SpliceFailure, Splicer
from tests.conditions import GENEROUS_S, wait_for
from tests.fakes.frame_client import FrameClient
from tests.fakes.wire_broker import WireBroker, raw_request, raw_response_body
from tests.unit.proxy.conftest import ProxyFactory

pytestmark = pytest.mark.skipif(not SPLICE_AVAILABLE, reason="splice(2) is Linux only")

MIB = 1024 * 1024


@pytest.mark.parametrize("enabled", [True, False], ids=["spliced", "copied"])
async def test_large_raw_responses_pass_byte_for_byte(
    fake_broker: WireBroker, make_proxy: ProxyFactory, spliced: list[int], enabled: bool
) -> None:
    proxy = await make_proxy(fake_broker, splice_enable=enabled)
    client = await FrameClient.connect(proxy)
    big = bytes(range(251)) * (9 * MIB // 251)
    await client.send(
        raw_request(1, big) + raw_request(2, b"small") + raw_request(3, big[: 3 * MIB])
    )
    assert raw_response_body(await client.receive()) == (1, b"echo:" + big)
    assert raw_response_body(await client.receive()) == (2, b"echo:small")
    assert raw_response_body(await client.receive()) == (3, b"echo:" + big[: 3 * MIB])
    await client.close()
    if enabled:
        # Most of each large answer went through the pipe; the small one never did.
        assert sum(spliced) > (9 + 3) * MIB // 2
        assert min(spliced) >= 64 * 1024
    else:
        assert spliced == []


async def test_a_client_gone_mid_splice_closes_the_pair(
    fake_broker: WireBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    proxy = await make_proxy(
        fake_broker, buffer_high_water_bytes=256 * 1024, buffer_low_water_bytes=64 * 1024
    )
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"x" * (32 * MIB)))
    await wait_for(lambda: bool(spliced), what="the proxy splicing the answer")
    fake_broker.disconnected.clear()
    client.writer.transport.abort()
    async with asyncio.timeout(GENEROUS_S):
        await fake_broker.disconnected.wait()
    await wait_for(lambda: proxy.connections == 0, what="the proxy dropped the pair")


async def test_a_broker_gone_mid_splice_closes_the_client(
    fake_broker: WireBroker, make_proxy: ProxyFactory, spliced: list[int]
) -> None:
    async def half_an_answer(header: RequestHeader, body: bytes) -> bytes | None:
        transport = fake_broker.connections[-1]
        transport.write(struct.pack(">ii", 8 * MIB, header.correlation_id) + b"h" * (2 * MIB))
        transport.close()
        return None

    fake_broker.script = half_an_answer
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b""))
    assert await client.closed()
    await wait_for(lambda: proxy.connections == 0, what="the proxy dropped the pair")
    assert spliced


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection, non-blocking."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        near = socket.create_connection(server.getsockname())
        far, _ = server.accept()
    for end in (near, far):
        end.setblocking(False)
    return near, far


async def _splice_once(
    prelude: list[bytes], body: bytes, count: int, pipe_bytes: int, *, more: bool
) -> tuple[bytes, bytes]:
    """Splice ``count`` bytes of ``body`` after ``prelude`` from one TCP connection to
    another; what reached the client, and what stayed for the broker's next reader."""
    loop = asyncio.get_running_loop()
    broker, source = _tcp_pair()
    sink, client = _tcp_pair()
    splicer = Splicer(source.fileno(), sink.fileno(), pipe_bytes=pipe_bytes)
    finished: asyncio.Future[SpliceFailure | None] = loop.create_future()
    expected = sum(map(len, prelude)) + count
    received = bytearray()

    async def read_client() -> None:
        while len(received) < expected:
            received.extend(await loop.sock_recv(client, 1 << 20))

    try:
        sending = asyncio.ensure_future(loop.sock_sendall(broker, body))
        reading = asyncio.ensure_future(read_client())
        splicer.start(count, finished.set_result, prelude, more=more)
        async with asyncio.timeout(10):
            assert await finished is None
            await asyncio.gather(sending, reading)
            rest = bytearray()
            while len(rest) < len(body) - count:
                rest.extend(await loop.sock_recv(source, 1 << 20))
        return bytes(received), bytes(rest)
    finally:
        splicer.close()
        for end in (broker, source, sink, client):
            end.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prelude=st.lists(st.binary(min_size=0, max_size=9000), max_size=4),
    count=st.integers(min_value=1, max_value=3 * MIB),
    after=st.integers(min_value=0, max_value=5000),
    pipe_bytes=st.sampled_from([4096, 65536, MIB]),
    more=st.booleans(),
)
def test_a_splice_sends_its_prelude_then_exactly_its_count(
    prelude: list[bytes], count: int, after: int, pipe_bytes: int, more: bool
) -> None:
    """The prelude first (even one larger than the pipe, which then goes in pieces), then
    the next ``count`` bytes of the broker's socket; the bytes after them stay there."""
    body = bytes(i % 251 for i in range(count + after))
    received, rest = asyncio.run(_splice_once(prelude, body, count, pipe_bytes, more=more))
    assert received == b"".join(prelude) + body[:count]
    assert rest == body[count:]
