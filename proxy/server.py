"""The running proxy: one listener per broker, the connection pairs, graceful shutdown.

Start-up asks the bootstrap brokers for the cluster's brokers and listens for each (see
:mod:`proxy.discovery`); brokers that appear later in a Metadata, FindCoordinator or
DescribeCluster response get a listener before that response reaches the client.

Shutdown goes in stages: stop accepting, ask every pair to finish the requests it has
in flight (reading no new ones), wait up to the deadline, then cut what is left.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Final

from proxy.bad_connections import BadConnectionLog
from proxy.broker_map import BrokerMap, BrokerMapError, BrokerRoute
from proxy.broker_versions import BrokerVersions
from proxy.config import HostPort, ProxyConfig, bootstrap_addresses
from proxy.connection import ConnectionPair, PairSettings
from proxy.discovery import DiscoveryError, discover_brokers
from proxy.interceptors.addresses import AddressRewriter
from proxy.interceptors.api_versions import ApiVersionsInterceptor
from proxy.interceptors.base import Interceptor
from proxy.logs import event
from proxy.loop_lag import watch_loop_lag
from proxy.metrics import MetricsServer, ProxyMetrics
from proxy.router import Router, served_above_broker
from proxy.tls import server_context
from storage.kafka_client import BrokerAddress
from storage.kafka_security import KafkaSecurityConfig

__all__ = ["ProxyServer", "run_until_stopped"]

_log = logging.getLogger("tierproxy.server")

# Pending connections per listener: a burst of clients (a consumer group starting, the
# idle-connections benchmark) should queue, not see refused connections.
_BACKLOG: Final = 1024
# Retry delays while no bootstrap broker answers at start-up.
_DISCOVERY_BACKOFF_S: Final = 0.25
_DISCOVERY_BACKOFF_MAX_S: Final = 5.0
# How often every pair's idle and request clocks are checked: timeouts are enforced to within
# this, and a sweep of 10 000 connections costs a few milliseconds.
_SWEEP_INTERVAL_S: Final = 1.0


class ProxyServer:
    """Listeners, connection pairs and broker map of one proxy.

    ``interceptors`` are registered after the built-in ones (ApiVersions restriction and
    address rewriting), so their ``on_response`` runs first.
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        interceptors: Sequence[Interceptor] = (),
        metrics: ProxyMetrics | None = None,
        security: KafkaSecurityConfig | None = None,
    ) -> None:
        """:param security: how the proxy's own connections (discovery) log in, and whether
        every connection to the brokers uses TLS."""
        self._config = config
        self._security = security or KafkaSecurityConfig()
        self.metrics = ProxyMetrics() if metrics is None else metrics
        self._map = BrokerMap(
            listen=config.listener.address,
            advertised=config.advertised_base(),
            explicit=config.explicit_brokers(),
        )
        broker_versions = BrokerVersions()
        self._router = Router(
            [
                ApiVersionsInterceptor(broker_versions, served_above_broker(interceptors)),
                AddressRewriter(self),
                *interceptors,
            ],
            broker_versions=broker_versions,
        )
        self._server_ssl = server_context(config)
        self._settings = PairSettings(
            upstream_ssl=self._security.ssl_context(),
            max_request_bytes=config.socket_request_max_bytes,
            high_water=config.buffer_high_water_bytes,
            low_water=config.buffer_low_water_bytes,
            connect_timeout=config.connection_setup_timeout_ms / 1000,
            idle_timeout=_seconds_or_none(config.connections_max_idle_ms),
            request_receive_timeout=_seconds_or_none(config.request_receive_timeout_ms),
            bad_log=BadConnectionLog(logging.getLogger("tierproxy.connection"), self.metrics),
            splice=config.splice_enable,
        )
        self._listeners: dict[int, asyncio.Server] = {}
        self._pairs: set[ConnectionPair] = set()
        self._ids = itertools.count(1)
        self._listen_lock = asyncio.Lock()
        self._metrics_server: MetricsServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._lag_probe: asyncio.Task[None] | None = None

    @property
    def routes(self) -> tuple[BrokerRoute, ...]:
        """Every broker the proxy fronts, with its proxy and broker addresses."""
        return self._map.routes()

    @property
    def bootstrap_servers(self) -> str:
        """The proxy's addresses, as a client's ``bootstrap.servers`` value."""
        return ",".join(str(route.advertised) for route in self._map.routes())

    @property
    def connections(self) -> int:
        """Client connections currently open."""
        return len(self._pairs)

    async def start(self) -> None:
        """Learn the brokers, listen for each, and start the metrics endpoint.

        :raises DiscoveryError: when no bootstrap broker answers.
        """
        config = self._config
        brokers = await discover_brokers(
            bootstrap_addresses(config),
            security=self._security,
            attempt_seconds=self._settings.connect_timeout,
        )
        await self.advertise(brokers)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        self._lag_probe = asyncio.get_running_loop().create_task(
            watch_loop_lag(self.metrics.loop_lag)
        )
        if self._config.metrics_port:
            self._metrics_server = MetricsServer(
                self.metrics, self._config.metrics_host, self._config.metrics_port
            )
        event(
            _log,
            logging.INFO,
            "proxy.started",
            bootstrap=self.bootstrap_servers,
            brokers=len(self._map.routes()),
            metrics_port=self._config.metrics_port or "off",
        )

    async def advertise(self, brokers: Sequence[BrokerAddress]) -> Mapping[int, HostPort]:
        """The proxy address of each broker; brokers seen for the first time get a listener.

        This is the :class:`~proxy.interceptors.addresses.AddressBook` of the address
        rewriting interceptor.
        """
        async with self._listen_lock:
            pairs = [(b.node_id, HostPort(host=b.host, port=b.port)) for b in brokers]
            try:
                if not self._map.routes():
                    new = self._map.observe_all(pairs)
                else:
                    observed = (self._map.observe(node_id, address) for node_id, address in pairs)
                    new = [route for route, is_new in observed if is_new]
            except BrokerMapError as err:
                event(_log, logging.ERROR, "broker.unmapped", error=str(err))
                new = []
            for route in new:
                await self._listen(route)
        routes = {broker.node_id: self._map.get(broker.node_id) for broker in brokers}
        return {node_id: r.advertised for node_id, r in routes.items() if r is not None}

    async def _listen(self, route: BrokerRoute) -> None:
        node_id = route.node_id
        loop = asyncio.get_running_loop()
        try:
            listener = await loop.create_server(
                lambda: self._accept(node_id),
                route.listener.host,
                route.listener.port,
                ssl=self._server_ssl,
                backlog=_BACKLOG,
                reuse_address=True,
            )
        except OSError as err:
            event(
                _log,
                logging.ERROR,
                "listener.failed",
                node=node_id,
                listen=str(route.listener),
                error=str(err),
            )
            return
        route = self._map.bound(node_id, listener.sockets[0].getsockname()[1])
        self._listeners[node_id] = listener
        event(
            _log,
            logging.INFO,
            "listener.started",
            node=node_id,
            listen=str(route.listener),
            advertised=str(route.advertised),
            upstream=str(route.upstream),
            tls=self._server_ssl is not None,
        )

    async def _sweep(self) -> None:
        """Close pairs past their idle or request deadline; log suppressed bad-close lines."""
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL_S)
            now = time.monotonic()
            for pair in list(self._pairs):
                try:
                    pair.expire(now)
                except Exception:  # one pair's failure must not end the sweep for all
                    _log.exception("closing an expired connection failed")
            self._settings.bad_log.report_suppressed()

    def _accept(self, node_id: int) -> ConnectionPair:
        route = self._map.get(node_id)
        assert route is not None
        pair = ConnectionPair(
            connection_id=next(self._ids),
            node_id=node_id,
            upstream=route.upstream,
            router=self._router,
            metrics=self.metrics,
            settings=self._settings,
            on_closed=self._pairs.discard,
        )
        self._pairs.add(pair)
        return pair

    async def close(self, grace_seconds: float) -> None:
        """Stop listening, let in-flight requests finish for up to ``grace_seconds``, then
        cut the remaining connections."""
        for listener in self._listeners.values():
            listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._lag_probe is not None:
            self._lag_probe.cancel()
            self._lag_probe = None
        pairs = list(self._pairs)
        event(_log, logging.INFO, "proxy.stopping", connections=len(pairs), grace_s=grace_seconds)
        for pair in pairs:
            pair.drain()
        try:
            async with asyncio.timeout(grace_seconds), asyncio.TaskGroup() as group:
                for pair in pairs:
                    group.create_task(pair.wait_closed())
        except TimeoutError:
            for pair in list(self._pairs):
                pair.abort("shutdown deadline passed")
        for listener in self._listeners.values():
            await listener.wait_closed()
        self._listeners.clear()
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        event(_log, logging.INFO, "proxy.stopped")


def _seconds_or_none(milliseconds: int) -> float | None:
    """A timeout setting in seconds; a negative one (Kafka's "no limit") is None."""
    return None if milliseconds < 0 else milliseconds / 1000


async def run_until_stopped(
    config: ProxyConfig,
    *,
    interceptors: Sequence[Interceptor] = (),
    metrics: ProxyMetrics | None = None,
    security: KafkaSecurityConfig | None = None,
) -> None:
    """Run a proxy until SIGTERM or SIGINT, then shut it down gracefully.

    While no bootstrap broker answers, retries with backoff (and still stops on a signal).
    ``metrics`` lets extensions (the remote tier) register their series in the same registry.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = ProxyServer(config, interceptors=interceptors, metrics=metrics, security=security)
    try:
        delay = _DISCOVERY_BACKOFF_S
        while True:
            try:
                await server.start()
                break
            except DiscoveryError as err:
                event(_log, logging.WARNING, "discovery.failed", error=str(err), retry_s=delay)
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
                return
            except TimeoutError:
                delay = min(delay * 2, _DISCOVERY_BACKOFF_MAX_S)
        await stop.wait()
        await server.close(config.shutdown_timeout_ms / 1000)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
