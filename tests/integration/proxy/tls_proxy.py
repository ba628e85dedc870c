"""A ``tierproxy serve`` subprocess with an SSL listener (the ``pki`` fixture's proxy
certificate) in front of Apache Kafka, and what the tests read of it from outside: its
Prometheus series by label, its open file descriptors, its log."""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proxy.embedded import BrokerInfo, free_port
from proxy.embedded.tierproxy import TierproxyServer, write_config
from tests.certificates import Pki


def client_context(pki: Pki) -> ssl.SSLContext:
    """What a client that trusts the test CA uses."""
    return ssl.create_default_context(cafile=str(pki.ca))


def tls_proxy(
    broker: BrokerInfo,
    pki: Pki,
    work: Path,
    settings: Mapping[str, Any] | None = None,
    *,
    client_tls: ssl.SSLContext | None = None,
) -> TierproxyServer:
    """A (not yet started) proxy whose listener is SSL, with ``settings`` on top;
    ``client_tls`` is what its readiness probe connects with (:func:`client_context`
    when None)."""
    port = free_port()
    config = write_config(
        work / f"tierproxy-{port}.toml",
        {
            "ssl.certificate.location": str(pki.proxy.certificate),
            "ssl.key.location": str(pki.proxy.key),
            **(settings or {}),
        },
    )
    return TierproxyServer(
        config=config,
        log_path=work / f"tierproxy-{port}.log",
        bootstrap=broker.bootstrap,
        port=port,
        listener="SSL",
        client_tls=client_tls or client_context(pki),
        start_timeout_s=60,
    )


def series(proxy: TierproxyServer, name: str, **labels: str) -> float:
    """The sum of the series of ``name`` whose labels include ``labels``."""
    url = f"http://{proxy.host}:{proxy.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}(\{{[^}}]*\}})? (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group(2))
    return total


def open_fds(proxy: TierproxyServer) -> int:
    """File descriptors the proxy process holds open."""
    pid = proxy.process.pid
    assert pid is not None, "the proxy is not running"
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def resident_bytes(proxy: TierproxyServer) -> int:
    """The proxy process's resident memory."""
    pid = proxy.process.pid
    assert pid is not None, "the proxy is not running"
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def log_text(proxy: TierproxyServer) -> str:
    return proxy.process.log_path.read_text(encoding="utf-8", errors="replace")
