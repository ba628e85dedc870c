"""The proxy server against fake brokers: discovery, listeners on the fly, rewriting,
ApiVersions, metrics endpoint, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import urllib.request

import pytest

from protocol.headers import RequestHeader
from protocol.messages import ApiKey, decode_response
from proxy.config import ProxyConfig
from proxy.discovery import DiscoveryError
from proxy.embedded import free_port
from proxy.health import Readiness
from proxy.health_endpoint import serving
from proxy.server import ProxyServer
from tests.conditions import GENEROUS_S, wait_for
from tests.fakes.frame_client import FrameClient, api_versions_frame, metadata_frame
from tests.fakes.wire_broker import RAW_API, WireBroker, echo, raw_request, raw_response_body
from tests.unit.proxy.conftest import ProxyFactory


async def test_start_up_discovers_the_brokers_and_listens_for_each(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    second = await WireBroker(node_id=2).start()
    try:
        fake_broker.peers.append((2, "127.0.0.1", second.port))
        proxy = await make_proxy(fake_broker)
        assert [r.node_id for r in proxy.routes] == [1, 2]
        assert [r.upstream.port for r in proxy.routes] == [fake_broker.port, second.port]
        client = await FrameClient.connect(proxy, node_index=1)
        await client.send(raw_request(1, b"to broker 2"))
        await client.receive()
        assert second.requests[-1] == (12, 0, 1)
        await client.close()
    finally:
        await second.close()


async def test_metadata_is_rewritten_and_new_brokers_get_a_listener(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(metadata_frame(1))
    brokers = decode_response(ApiKey.METADATA, 12, (await client.receive())[5:]).brokers
    assert [(b.node_id, b.port) for b in brokers] == [(1, proxy.routes[0].advertised.port)]

    # A broker joins: the next Metadata names it, and its proxy address works at once.
    joined = await WireBroker(node_id=9).start()
    try:
        fake_broker.peers.append((9, "127.0.0.1", joined.port))
        await client.send(metadata_frame(2))
        brokers = decode_response(ApiKey.METADATA, 12, (await client.receive())[5:]).brokers
        by_id = {b.node_id: (b.host, b.port) for b in brokers}
        assert set(by_id) == {1, 9}
        assert joined.port not in {port for _, port in by_id.values()}
        host, port = by_id[9]
        reader, writer = await asyncio.open_connection(host, port)
        second = FrameClient(reader, writer)
        await second.send(raw_request(5, b"hi 9"))
        assert raw_response_body(await second.receive()) == (5, b"echo:hi 9")
        assert joined.requests[-1] == (12, 0, 5)
        await second.close()
    finally:
        await joined.close()
    await client.close()


async def test_port_per_broker_uses_base_port_plus_index(fake_broker: WireBroker) -> None:
    second = await WireBroker(node_id=2).start()
    base = free_port()
    config = ProxyConfig(
        bootstrap_servers=f"127.0.0.1:{fake_broker.port}",
        listeners=f"127.0.0.1:{base}",
        advertised_listeners=f"proxy.example.com:{base + 1000}",
    )
    proxy = ProxyServer(config)
    try:
        fake_broker.peers.append((2, "127.0.0.1", second.port))
        await proxy.start()
        assert [(r.listener.port, r.advertised.port) for r in proxy.routes] == [
            (base, base + 1000),
            (base + 1, base + 1001),
        ]
        assert {r.advertised.host for r in proxy.routes} == {"proxy.example.com"}
    finally:
        await proxy.close(1)
        await second.close()


async def test_api_versions_are_restricted_through_the_proxy(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(api_versions_frame(3))
    answer = await client.receive()
    body = decode_response(ApiKey.API_VERSIONS, 3, answer[4:])
    ranges = {e.api_key: (e.min_version, e.max_version) for e in body.api_keys}
    assert ranges[ApiKey.FETCH] == (4, 17)
    assert ranges[ApiKey.HEARTBEAT] == (0, 4)
    await client.close()


async def test_metrics_endpoint_counts_requests(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    port = free_port()
    proxy = await make_proxy(fake_broker, metrics_port=port)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"x" * 100) + api_versions_frame(2))
    await client.receive()
    await client.receive()

    def scrape() -> str:
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=GENEROUS_S) as response:
            return str(response.read().decode())

    config = ProxyConfig(metrics_port=port)
    with serving(config, registry=proxy.metrics.registry, readiness=Readiness()):
        text = await asyncio.to_thread(scrape)
    assert 'tierproxy_requests_total{api="heartbeat"} 1.0' in text
    assert 'tierproxy_requests_total{api="api_versions"} 1.0' in text
    assert 'tierproxy_request_bytes_total{api="heartbeat"} 118.0' in text
    assert "tierproxy_connections_active 1.0" in text
    assert 'tierproxy_request_latency_seconds_count{api="heartbeat"} 1.0' in text
    await client.close()


async def test_graceful_close_finishes_in_flight_requests_until_the_deadline(
    fake_broker: WireBroker, make_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async def slow(header: RequestHeader, body: bytes) -> bytes | None:
        await asyncio.sleep(float(body.decode()))
        return await echo(header, body)

    fake_broker.script = slow
    proxy = await make_proxy(fake_broker)
    quick = await FrameClient.connect(proxy)
    stuck = await FrameClient.connect(proxy)
    await quick.send(raw_request(1, b"0.2"))
    await stuck.send(raw_request(2, b"30"))
    await wait_for(
        lambda: sum(key == RAW_API for key, _version, _id in fake_broker.requests) == 2,
        what="both requests reached the broker",
    )
    caplog.set_level(logging.INFO, logger="tierproxy")
    # A grace period far longer than the quick answer's 0.2 s, however busy the machine.
    await proxy.close(5.0)
    # The quick pair drained within the grace period; the stuck one was cut by the deadline
    # (waiting for its 30 s answer would have closed it as drained instead).
    closes = {
        getattr(record, "tierproxy_fields", {}).get("reason")
        for record in caplog.records
        if record.getMessage() == "connection.closed"
    }
    assert closes == {"shutdown", "shutdown deadline passed"}
    assert raw_response_body(await quick.receive()) == (1, b"echo:0.2")
    assert await quick.closed()
    assert await stuck.closed()
    assert proxy.connections == 0


async def test_no_broker_no_start() -> None:
    config = ProxyConfig(
        bootstrap_servers=f"127.0.0.1:{free_port()}",
        listeners="127.0.0.1:0",
        connection_setup_timeout_ms=500,
    )
    with pytest.raises(DiscoveryError):
        await ProxyServer(config).start()


async def closing_with_a_request_in_flight(
    fake_broker: WireBroker, make_proxy: ProxyFactory, body: bytes
) -> tuple[ProxyServer, FrameClient, asyncio.Task[None]]:
    """A proxy whose client sent one request (``body``) that reached the broker, and the
    proxy's close (10 s to drain) started after it."""
    proxy = await make_proxy(fake_broker)
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, body))
    await wait_for(
        lambda: sum(key == RAW_API for key, _version, _id in fake_broker.requests) == 1,
        what="the request reached the broker",
    )
    return proxy, client, asyncio.get_running_loop().create_task(proxy.close(10.0))


async def test_a_drain_answers_requests_sent_after_it_then_half_closes(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    async def slow(header: RequestHeader, body: bytes) -> bytes | None:
        await asyncio.sleep(float(body.decode()))
        return await echo(header, body)

    fake_broker.script = slow
    proxy, client, closing = await closing_with_a_request_in_flight(fake_broker, make_proxy, b"1.0")
    await asyncio.sleep(0.1)
    # Sent while the pair drains and still owes an answer: read and answered (the drain's
    # serving stage), then the end of the stream, with no reset.
    await client.send(raw_request(2, b"0"))
    assert raw_response_body(await client.receive()) == (1, b"echo:1.0")
    assert raw_response_body(await client.receive()) == (2, b"echo:0")
    assert await client.closed(seconds=10)
    await closing
    assert proxy.connections == 0


async def test_a_drained_response_is_never_cut_by_a_reset(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    """A large response still in the socket buffers when the pair closes, with the client's
    next request unread: closing then would reset the connection and drop the response's
    tail. The half-close delivers all of it, then the end."""
    size = 16 * 1024 * 1024

    async def large(header: RequestHeader, body: bytes) -> bytes | None:
        return await echo(header, body * (size // len(body)) if body == b"large" else body)

    fake_broker.script = large
    _proxy, client, closing = await closing_with_a_request_in_flight(
        fake_broker, make_proxy, b"large"
    )
    await asyncio.sleep(0.2)  # the client is slow to read: the response fills the buffers
    await client.send(raw_request(2, b"next"))  # sent after reading stopped
    correlation_id, body = raw_response_body(await client.receive(seconds=20))
    assert (correlation_id, len(body)) == (1, len(b"echo:") + len(b"large") * (size // 5))
    assert await client.closed(seconds=10)
    await closing
