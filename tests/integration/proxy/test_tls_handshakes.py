"""Connections that never finish a TLS handshake are bounded, closed, logged and counted.

A ``tierproxy serve`` with an SSL listener in front of Apache Kafka gets thousands of
connections that never complete a handshake — TCP opened and left silent (a port scan, a
tcpSocket probe that hangs), a ClientHello begun and never finished (a slow-handshake
flood), a plaintext Kafka client on the TLS port, TCP opened and closed at once (a health
check) — while a CPU hog runs beside it and a consumer reads through the same listener.
The consumer reads every record as the broker has it; each flood connection is closed and
counted under exactly one ``tls_handshake_*`` reason; the proxy's file descriptors come
back and the handshakes in progress never exceed ``ssl.handshake.max.pending``; a proxy
stopped with stalled handshakes open stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from tests.certificates import Pki
from tests.conditions import wait_until
from tests.integration.proxy.records import read_aiokafka, sample_records
from tests.integration.proxy.tls_proxy import (
    client_context,
    log_text,
    open_fds,
    resident_bytes,
    series,
    tls_proxy,
)

pytestmark = [pytest.mark.integration]

NewTopicFactory = Callable[..., Awaitable[str]]
PARTITIONS = 2
COUNT = 400
HANDSHAKE_TIMEOUT_MS = 3000
MAX_PENDING = 400
SILENT = 1500
SLOW = 500
PLAINTEXT = 200
CLOSED_AT_ONCE = 300
FLOOD = SILENT + SLOW + PLAINTEXT + CLOSED_AT_ONCE
REASONS = (
    "tls_handshake_timeout",
    "tls_handshake_shed",
    "tls_handshake_failed",
    "tls_handshake_abandoned",
)
# A TLS record header announcing a 16 KiB handshake message, and its first byte: a
# ClientHello begun and never finished.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x40\x00\x01"
# ApiVersions v0 as a plaintext Kafka client sends it first.
KAFKA_API_VERSIONS = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """A process that keeps one of the machine's cores busy for the test's length."""
    spin = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"
    hog = subprocess.Popen([sys.executable, "-c", spin])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


@contextlib.contextmanager
def running(
    broker: BrokerInfo, pki: Pki, work: Path, *, handshake_timeout_ms: int
) -> Iterator[TierproxyServer]:
    server = tls_proxy(
        broker,
        pki,
        work,
        {
            "ssl.handshake.timeout.ms": handshake_timeout_ms,
            "ssl.handshake.max.pending": MAX_PENDING,
            # Longer than the harness's 5 s grace: a shutdown that waited for handshakes
            # would be killed before it logs proxy.stopped.
            "shutdown.timeout.ms": 11_000,
        },
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxy(broker: BrokerInfo, pki: Pki, tmp_path: Path) -> Iterator[TierproxyServer]:
    with running(broker, pki, tmp_path, handshake_timeout_ms=HANDSHAKE_TIMEOUT_MS) as server:
        yield server


def open_connection(proxy: TierproxyServer) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=30)


def flood(proxy: TierproxyServer, held: list[socket.socket]) -> None:
    """Open every kind of connection that never completes a handshake; the ones that stay
    open are appended to ``held`` (the caller closes them)."""
    for _ in range(SILENT):
        held.append(open_connection(proxy))
    for _ in range(SLOW):
        sock = open_connection(proxy)
        held.append(sock)
        sock.sendall(PARTIAL_CLIENT_HELLO)
    for _ in range(PLAINTEXT):
        sock = open_connection(proxy)
        held.append(sock)
        sock.sendall(KAFKA_API_VERSIONS)
    for _ in range(CLOSED_AT_ONCE):
        open_connection(proxy).close()


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the proxy has closed ``sock`` (without blocking)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def tls_closes(proxy: TierproxyServer) -> float:
    return sum(series(proxy, "tierproxy_bad_connections_total", reason=r) for r in REASONS)


async def test_a_handshake_flood_is_closed_and_counted_while_a_consumer_reads(
    proxy: TierproxyServer,
    broker: BrokerInfo,
    pki: Pki,
    new_topic: NewTopicFactory,
    cpu_hog: None,
) -> None:
    topic = await new_topic(partitions=PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for record in sample_records(COUNT, partitions=PARTITIONS, tag="tls"):
            await producer.send(topic, record.value, key=record.key, partition=record.partition)
        await producer.flush()
    finally:
        await producer.stop()
    direct = await read_aiokafka(broker.bootstrap, topic, PARTITIONS, COUNT)
    tls = {"security_protocol": "SSL", "ssl_context": client_context(pki)}
    fds_before = open_fds(proxy)
    rss_before = resident_bytes(proxy)
    counted_before = tls_closes(proxy)

    held: list[socket.socket] = []
    try:
        flooding = asyncio.create_task(asyncio.to_thread(flood, proxy, held))
        reads = 0
        while not flooding.done() or reads < 2:
            assert await read_aiokafka(proxy.bootstrap, topic, PARTITIONS, COUNT, **tls) == direct
            reads += 1
        await flooding
        peak_fds = open_fds(proxy)

        wait_until(
            lambda: tls_closes(proxy) - counted_before >= FLOOD,
            timeout_s=120,
            what=f"{FLOOD} flood connections closed and counted",
        )
        assert tls_closes(proxy) - counted_before == FLOOD
        assert series(proxy, "tierproxy_tls_handshakes_pending") == 0
        assert series(proxy, "tierproxy_connections_active") == 0
        assert series(proxy, "tierproxy_bad_connections_total", reason="tls_handshake_failed") >= (
            PLAINTEXT
        )
        wait_until(
            lambda: all(closed_by_peer(sock) for sock in held),
            timeout_s=60,
            what="the proxy closed every flood connection",
        )
    finally:
        for sock in held:
            sock.close()
    wait_until(
        lambda: open_fds(proxy) <= fds_before + 2,
        timeout_s=60,
        what=f"the proxy's descriptors back to {fds_before}",
    )
    rss_after = resident_bytes(proxy)
    # The figures, for the report (-s): descriptors bounded by the pending cap, memory kept.
    print(
        f"\nfds before={fds_before} during={peak_fds} after={open_fds(proxy)}; "
        f"rss before={rss_before >> 20} MiB after={rss_after >> 20} MiB"
    )
    assert peak_fds <= fds_before + MAX_PENDING + 64
    # One more full read after the flood: the listener still serves.
    assert await read_aiokafka(proxy.bootstrap, topic, PARTITIONS, COUNT, **tls) == direct
    log = log_text(proxy)
    assert "bad=tls_handshake_timeout" in log
    assert "plaintext client on an SSL listener" in log


def test_a_proxy_with_stalled_handshakes_stops_at_once(
    broker: BrokerInfo, pki: Pki, tmp_path: Path
) -> None:
    with (
        running(broker, pki, tmp_path, handshake_timeout_ms=120_000) as proxy,
        contextlib.ExitStack() as stack,
    ):
        for _ in range(MAX_PENDING // 2):
            stack.enter_context(open_connection(proxy)).sendall(PARTIAL_CLIENT_HELLO)
        wait_until(
            lambda: series(proxy, "tierproxy_tls_handshakes_pending") == MAX_PENDING // 2,
            timeout_s=60,
            what="every stalled handshake in progress at the proxy",
        )
        started = time.monotonic()
        proxy.stop()
        stopped_s = time.monotonic() - started
    log = log_text(proxy)
    assert "event=proxy.stopped" in log, f"killed after {stopped_s:.1f} s:\n{log[-2000:]}"
