"""A ``tierproxy serve`` subprocess in front of the harness broker, shared by the module's tests.

The proxy runs as the real command (uvloop, its own process and core, logs to a file) and is
stopped by PID. It listens on a free base port; ``proxy_bootstrap`` is what clients dial.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import BrokerInfo, ManagedProcess, free_port, free_ports
from proxy.embedded.probe import api_versions


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProxyInfo:
    bootstrap: str
    host: str
    port: int
    metrics_port: int
    process: ManagedProcess


def start_proxy(broker: BrokerInfo, log_dir: Path, *extra: str) -> ProxyInfo:
    """Start ``tierproxy serve`` in front of ``broker`` and wait until it answers ApiVersions."""
    port = free_ports(1)[0]
    metrics_port = free_port()
    config = log_dir / f"tierproxy-{port}.toml"
    # Shorter than the supervisor's 5 s grace, so a stop is graceful even with a long poll open.
    config.write_text("shutdown.timeout.ms = 2000\n", encoding="utf-8")
    process = ManagedProcess(
        "tierproxy",
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(config),
            "--bootstrap",
            broker.bootstrap,
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-port",
            str(metrics_port),
            *extra,
        ],
        log_path=log_dir / f"tierproxy-{port}.log",
    )
    process.start()
    process.wait_ready(lambda: bool(api_versions("127.0.0.1", port)), timeout_s=30)
    return ProxyInfo(
        bootstrap=f"127.0.0.1:{port}",
        host="127.0.0.1",
        port=port,
        metrics_port=metrics_port,
        process=process,
    )


@pytest.fixture(scope="session")
def proxy(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyInfo]:
    info = start_proxy(broker, tmp_path_factory.mktemp("proxy"))
    try:
        yield info
    finally:
        info.process.stop()
