"""A ``tierproxy serve`` subprocess in front of each kind of broker, shared by the suite.

The proxy runs as the real command (uvloop, its own process and core, logs to a file) and is
stopped by PID. It listens on a free base port; ``proxy.bootstrap`` is what clients dial.
``proxy`` is the one in front of the test's ``broker`` (see ``broker_kind`` in
``tests/conftest.py``): one proxy per broker kind, started on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import BrokerChoice, BrokerInfo, free_port
from proxy.embedded.tierproxy import TierproxyServer, write_config
from tests.conftest import BrokerPool


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
def proxies(
    brokers: BrokerPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[BrokerChoice, TierproxyServer]]:
    started: dict[BrokerChoice, TierproxyServer] = {}
    try:
        yield started
    finally:
        for proxy in started.values():
            proxy.stop()


@pytest.fixture
def proxy(
    proxies: dict[BrokerChoice, TierproxyServer],
    broker: BrokerInfo,
    broker_kind: BrokerChoice,
    tmp_path_factory: pytest.TempPathFactory,
) -> TierproxyServer:
    if broker_kind not in proxies:
        proxies[broker_kind] = start_proxy(broker, tmp_path_factory.mktemp(f"proxy-{broker_kind}"))
    return proxies[broker_kind]
