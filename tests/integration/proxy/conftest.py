"""A ``tierproxy serve`` subprocess in front of the harness broker, shared by the module's tests.

The proxy runs as the real command (uvloop, its own process and core, logs to a file) and is
stopped by PID. It listens on a free base port; ``proxy.bootstrap`` is what clients dial.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import BrokerInfo, free_port
from proxy.embedded.tierproxy import TierproxyServer, write_config


def start_proxy(broker: BrokerInfo, log_dir: Path, *extra: str) -> TierproxyServer:
    """Start ``tierproxy serve`` in front of ``broker`` and wait until it answers ApiVersions."""
    port = free_port()
    # Shorter than the supervisor's 5 s grace, so a stop is graceful even with a long poll open.
    config = write_config(log_dir / f"tierproxy-{port}.toml", {"shutdown.timeout.ms": 2000})
    proxy = TierproxyServer(
        config=config,
        log_path=log_dir / f"tierproxy-{port}.log",
        bootstrap=broker.bootstrap,
        port=port,
        extra_args=extra,
        start_timeout_s=30,
    )
    proxy.start()
    return proxy


@pytest.fixture(scope="session")
def proxy(
    broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TierproxyServer]:
    info = start_proxy(broker, tmp_path_factory.mktemp("proxy"))
    try:
        yield info
    finally:
        info.stop()
