"""The broker sees the proxy, not the client: the proxy says who the client was, and can
refuse client networks itself.

Against Apache Kafka with the proxy as a real subprocess. 127.0.0.2 is a loopback address
the tests bind their client sockets to, so the proxy sees two client networks on one host.

- Every connection pair logs ``event=connection.audit`` with the client's address, the
  proxy's listener port and the proxy's own local address towards the broker (what the
  broker logs as the client), and the TLS subject of a client certificate (mTLS).
- ``listeners.deny.cidrs`` / ``listeners.allow.cidrs`` refuse a client network at accept,
  before any TLS work: the connection is closed, logged and counted
  (``tierproxy_bad_connections_total{reason="client_network_denied"}``); other clients
  are served.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from tests.certificates import Pki
from tests.conditions import wait_until
from tests.integration.proxy.conftest import start_proxy
from tests.integration.proxy.records import read_aiokafka
from tests.integration.proxy.tls_proxy import client_context, log_text, series, tls_proxy

pytestmark = [pytest.mark.integration]

NewTopicFactory = Callable[..., Awaitable[str]]
OTHER_CLIENT = "127.0.0.2"
# ApiVersions v0, correlation id 1, client id null.
API_VERSIONS = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"


def api_versions_from(
    source: str, proxy: TierproxyServer, tls: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    """Send ApiVersions from a socket bound to ``source``: its local port and the answer
    (empty when the proxy closed the connection)."""
    sock = socket.socket()
    sock.settimeout(30)
    sock.bind((source, 0))
    with sock:
        sock.connect((proxy.host, proxy.port))
        port = int(sock.getsockname()[1])
        try:
            conn = sock if tls is None else tls.wrap_socket(sock, server_hostname=proxy.host)
        except (ConnectionError, ssl.SSLError):
            return port, b""
        with conn:
            try:
                conn.sendall(API_VERSIONS)
                header = _read(conn, 4)
                if len(header) < 4:
                    return port, b""
                return port, _read(conn, struct.unpack(">i", header)[0])
            except (ConnectionError, ssl.SSLError):
                return port, b""


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def audit_line(proxy: TierproxyServer, client: str) -> str:
    lines = [
        line
        for line in log_text(proxy).splitlines()
        if "event=connection.audit" in line and f"client={client}" in line
    ]
    assert lines, f"no audit line for {client}"
    return lines[-1]


@pytest.fixture
def plain_proxy(broker: BrokerInfo, tmp_path: Path) -> Iterator[TierproxyServer]:
    config = tmp_path / "networks.toml"
    config.write_text(
        f'listeners.allow.cidrs = "127.0.0.0/8, ::1"\nlisteners.deny.cidrs = "{OTHER_CLIENT}/32"\n',
        encoding="utf-8",
    )
    proxy = start_proxy(broker, tmp_path, "--config", str(config))
    try:
        yield proxy
    finally:
        proxy.stop()


async def test_a_denied_network_is_refused_at_accept_and_others_are_audited(
    plain_proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"hello", partition=0)
    finally:
        await producer.stop()

    port, answer = api_versions_from(OTHER_CLIENT, plain_proxy)
    assert answer == b""
    wait_until(
        lambda: (
            series(plain_proxy, "tierproxy_bad_connections_total", reason="client_network_denied")
            == 1
        ),
        timeout_s=30,
        what="the refused connection counted",
    )
    assert f"client={OTHER_CLIENT}:{port}" in log_text(plain_proxy)

    port, answer = api_versions_from("127.0.0.1", plain_proxy)
    assert answer[4:6] == b"\x00\x00"  # error code NONE: served
    line = audit_line(plain_proxy, f"127.0.0.1:{port}")
    assert f"listener_port={plain_proxy.port}" in line
    assert f"broker={broker.bootstrap}" in line
    assert re.search(r"upstream_local=127\.0\.0\.1:\d+", line), line

    seen = await read_aiokafka(plain_proxy.bootstrap, topic, 1, 1)
    assert [record.value for record in seen] == [b"hello"]


async def test_without_lists_the_broker_sees_the_proxy_and_the_audit_line_says_who(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    proxy = start_proxy(broker, tmp_path)
    try:
        port, answer = api_versions_from(OTHER_CLIENT, proxy)
        assert answer[4:6] == b"\x00\x00"
        line = audit_line(proxy, f"{OTHER_CLIENT}:{port}")
        # The broker is reached from the proxy's own address: host ACLs see 127.0.0.1.
        assert re.search(r"upstream_local=127\.0\.0\.1:\d+", line), line
    finally:
        proxy.stop()


def test_a_denied_network_gets_no_tls_handshake_and_mtls_subjects_are_audited(
    broker: BrokerInfo, pki: Pki, tmp_path: Path
) -> None:
    # Clients, and the harness's readiness probe, present a certificate the CA signed.
    tls = client_context(pki)
    tls.load_cert_chain(pki.broker.certificate, pki.broker.key)
    proxy = tls_proxy(
        broker,
        pki,
        tmp_path,
        {
            "listeners.deny.cidrs": f"{OTHER_CLIENT}/32",
            "ssl.client.auth": "required",
            "ssl.ca.location": str(pki.ca),
        },
        client_tls=tls,
    )
    proxy.start()
    try:
        port, answer = api_versions_from(OTHER_CLIENT, proxy, tls)
        assert answer == b""
        wait_until(
            lambda: (
                series(proxy, "tierproxy_bad_connections_total", reason="client_network_denied")
                == 1
            ),
            timeout_s=30,
            what="the refused connection counted",
        )
        handshakes = [
            series(proxy, "tierproxy_bad_connections_total", reason=reason)
            for reason in ("tls_handshake_failed", "tls_handshake_abandoned")
        ]
        assert handshakes == [0, 0]

        port, answer = api_versions_from("127.0.0.1", proxy, tls)
        assert answer[4:6] == b"\x00\x00"
        line = audit_line(proxy, f"127.0.0.1:{port}")
        assert 'tls_subject="CN=localhost"' in line, line
    finally:
        proxy.stop()
