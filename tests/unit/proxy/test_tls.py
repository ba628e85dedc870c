"""TLS on both sides: clients terminate at the proxy, the proxy opens its own TLS to the broker.

The certificate is self-signed, made per test with the ``openssl`` command line.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from protocol.messages import ApiKey, decode_response
from proxy.app import serve
from proxy.config import ProxyConfig
from proxy.discovery import DiscoveryError
from proxy.server import ProxyServer
from proxy.settings import settings_from_flat
from storage.config import ConfigError
from storage.kafka_security import KafkaSecurityConfig
from tests.certificates import Pki
from tests.fakes.frame_client import FrameClient, metadata_frame
from tests.fakes.wire_broker import WireBroker, raw_request, raw_response_body

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command makes the test certificate"
)


def make_certificate(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def certificates(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    return {name: make_certificate(tmp_path, name) for name in ("proxy", "broker", "stranger")}


async def tls_broker(cert: Path, key: Path) -> WireBroker:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return await WireBroker().start(tls=context)


async def tls_client(proxy: ProxyServer, ca: Path) -> FrameClient:
    context = ssl.create_default_context(cafile=str(ca))
    address = proxy.routes[0].advertised
    reader, writer = await asyncio.open_connection(address.host, address.port, ssl=context)
    return FrameClient(reader, writer)


async def test_tls_to_clients_and_to_the_broker(
    certificates: dict[str, tuple[Path, Path]],
) -> None:
    proxy_cert, proxy_key = certificates["proxy"]
    broker_cert, broker_key = certificates["broker"]
    broker = await tls_broker(broker_cert, broker_key)
    config = ProxyConfig(
        bootstrap_servers=f"127.0.0.1:{broker.port}",
        listeners="SSL://127.0.0.1:0",
        ssl_certificate_location=str(proxy_cert),
        ssl_key_location=str(proxy_key),
    )
    upstream = KafkaSecurityConfig(security_protocol="SSL", ssl_ca_location=str(broker_cert))
    proxy = ProxyServer(config, security=upstream)
    try:
        await proxy.start()
        client = await tls_client(proxy, proxy_cert)
        await client.send(raw_request(1, b"secret") + metadata_frame(2))
        assert raw_response_body(await client.receive()) == (1, b"echo:secret")
        brokers = decode_response(ApiKey.METADATA, 12, (await client.receive())[5:]).brokers
        assert [(b.host, b.port) for b in brokers] == [
            ("127.0.0.1", proxy.routes[0].advertised.port)
        ]
        await client.close()
    finally:
        await proxy.close(1)
        await broker.close()


async def test_a_broker_certificate_from_an_unknown_ca_is_refused(
    certificates: dict[str, tuple[Path, Path]],
) -> None:
    broker_cert, broker_key = certificates["broker"]
    stranger_cert, _ = certificates["stranger"]
    broker = await tls_broker(broker_cert, broker_key)
    config = ProxyConfig(
        bootstrap_servers=f"127.0.0.1:{broker.port}",
        listeners="127.0.0.1:0",
        connection_setup_timeout_ms=2000,
    )
    upstream = KafkaSecurityConfig(security_protocol="SSL", ssl_ca_location=str(stranger_cert))
    try:
        with pytest.raises(DiscoveryError, match="certificate"):
            await ProxyServer(config, security=upstream).start()
    finally:
        await broker.close()


async def test_serve_stops_at_once_when_the_broker_certificate_is_refused(pki: Pki) -> None:
    """Rather than retrying discovery (or the metadata topic) for a CA that will not change."""
    broker = await tls_broker(pki.broker.certificate, pki.broker.key)
    bootstrap = f"127.0.0.1:{broker.port}"
    settings = settings_from_flat(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "127.0.0.1:0",
            "upstream.security.protocol": "SSL",
            "upstream.ssl.ca.location": str(pki.stranger_ca),
        }
    )
    try:
        with pytest.raises(ConfigError, match=r"upstream\.ssl\.ca\.location"):
            await serve(settings)
    finally:
        await broker.close()


@pytest.mark.parametrize("tls_side", ["client", "broker"])
async def test_large_responses_over_tls_are_copied_not_spliced(
    certificates: dict[str, tuple[Path, Path]], spliced: list[int], tls_side: str
) -> None:
    """splice(2) cannot encrypt: with TLS on either side every byte goes through Python."""
    cert, key = certificates["proxy"]
    broker = await (tls_broker(cert, key) if tls_side == "broker" else WireBroker().start())
    client_tls = tls_side == "client"
    config = ProxyConfig(
        bootstrap_servers=f"127.0.0.1:{broker.port}",
        listeners="SSL://127.0.0.1:0" if client_tls else "127.0.0.1:0",
        ssl_certificate_location=str(cert) if client_tls else "",
        ssl_key_location=str(key) if client_tls else "",
    )
    upstream = (
        KafkaSecurityConfig(security_protocol="SSL", ssl_ca_location=str(cert))
        if tls_side == "broker"
        else None
    )
    proxy = ProxyServer(config, security=upstream)
    big = bytes(range(251)) * (4 * 1024 * 1024 // 251)
    try:
        await proxy.start()
        client = await (tls_client(proxy, cert) if client_tls else FrameClient.connect(proxy))
        await client.send(raw_request(1, big))
        assert raw_response_body(await client.receive()) == (1, b"echo:" + big)
        await client.close()
    finally:
        await proxy.close(1)
        await broker.close()
    assert spliced == []
