"""``tierproxy serve`` pointed at something that is not Kafka says what it found.

A common slip is a bootstrap address that is a web or S3 endpoint. The proxy keeps retrying
discovery (the right cluster may come up), and its log says what the peer did: an HTTP
server that waits for a request line gives no answer in time, one that answers at once is
named as HTTP rather than reported as a 1.2 GB frame (the ASCII of "HTTP" read as a size).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from proxy.embedded import S3Info
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.tierproxy import TierproxyServer, write_config

pytestmark = [pytest.mark.integration]


@pytest.fixture
def answers_http_at_once() -> Iterator[str]:
    """A listener that answers every connection with an HTTP 400 and closes it, as HTTP
    servers do when the first bytes cannot be a request line."""
    listener = socket.create_server((LOOPBACK, 0))
    listener.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                peer, _ = listener.accept()
            except TimeoutError:
                continue
            with peer:
                peer.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"{LOOPBACK}:{listener.getsockname()[1]}"
    stopping.set()
    thread.join(5)
    listener.close()


def discovery_failure(bootstrap: str, tmp_path: Path) -> str:
    """The first ``discovery.failed`` line of a proxy pointed at ``bootstrap``."""
    proxy = TierproxyServer(
        config=write_config(tmp_path / "proxy.toml", {}),
        log_path=tmp_path / "proxy.log",
        bootstrap=bootstrap,
    )
    proxy.process.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            log = proxy.process.log_path.read_text()
            failures = [line for line in log.splitlines() if "discovery.failed" in line]
            if failures:
                assert proxy.process.running  # it keeps retrying
                return failures[0]
            assert proxy.process.running, log[-2000:]
            assert time.monotonic() < deadline, log[-2000:]
            time.sleep(0.2)
    finally:
        proxy.stop()


def test_a_peer_answering_http_is_named(answers_http_at_once: str, tmp_path: Path) -> None:
    line = discovery_failure(answers_http_at_once, tmp_path)
    assert "the peer spoke HTTP, not the Kafka protocol" in line, line


def test_an_s3_endpoint_is_named_as_http(s3: S3Info, tmp_path: Path) -> None:
    """SeaweedFS answers the client's ApiVersions v3 with an HTTP error (it stayed silent on
    the v0 that discovery sent before it shared the one Kafka client)."""
    endpoint = urlsplit(s3.endpoint_url)
    line = discovery_failure(f"{endpoint.hostname}:{endpoint.port}", tmp_path)
    assert "the peer spoke HTTP, not the Kafka protocol" in line, line
