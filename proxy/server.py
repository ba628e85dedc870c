"""The running proxy: one listener per broker, the connection pairs, graceful shutdown.

Start-up asks the bootstrap brokers for the cluster's brokers and listens for each (see
:mod:`proxy.discovery`); brokers that appear later in a Metadata, FindCoordinator or
DescribeCluster response get a listener before that response reaches the client.

A listener that cannot bind at start-up is fatal (:class:`~proxy.listeners.ListenerError`);
one for a broker that appears later is logged and makes the proxy not ready.

Readiness (:mod:`proxy.health`) gets two checks here: ``listeners`` (every known broker has
its listener) and ``broker`` (a bootstrap broker answered the proxy's own Metadata request
within the last few ``health.check.interval.ms``).

Shutdown goes in stages: stop accepting (and abort TLS handshakes in progress), ask every
pair to drain (answer what it is asked for the first half of the deadline, then read no new
requests; close each client between requests, by a half-close after its last response),
wait up to the deadline, then cut what is left.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from proxy import audit
from proxy.bad_connections import BadConnectionLog
from proxy.broker_map import BrokerMap, BrokerMapError, BrokerRoute
from proxy.broker_versions import BrokerVersions
from proxy.config import HostPort, ProxyConfig, bootstrap_addresses
from proxy.connection import ConnectionPair, PairSettings
from proxy.discovery import DiscoveryError, discover_brokers
from proxy.exchange_memory import ExchangeMemory
from proxy.handshakes import Handshakes
from proxy.health import Liveness, Readiness, Verdict
from proxy.identities import ClientIdentities
from proxy.interceptors.addresses import AddressRewriter
from proxy.interceptors.api_versions import ApiVersionsInterceptor
from proxy.interceptors.base import Interceptor
from proxy.interceptors.sasl_identity import SaslIdentity
from proxy.listeners import Admission, Listener, ListenerError, listen
from proxy.logs import event
from proxy.loop_lag import watch_loop_lag
from proxy.metrics import ProxyMetrics
from proxy.resolver import Resolver
from proxy.router import Router, served_above_broker
from proxy.tls import server_context
from storage.kafka_client import BrokerAddress
from storage.kafka_security import KafkaSecurityConfig
from storage.retry_log import RetryLog, log_recovery

__all__ = ["SERVER_CHECKS", "ProxyServer", "run_until_stopped"]

_log = logging.getLogger("tierproxy.server")

SERVER_CHECKS: Final = ("listeners", "broker")
"""The readiness checks a server adds to the :class:`~proxy.health.Readiness` it is given."""

# Retry delays while no bootstrap broker answers at start-up.
_DISCOVERY_BACKOFF_S: Final = 0.25
_DISCOVERY_BACKOFF_MAX_S: Final = 5.0
# How often every pair's idle and request clocks are checked: timeouts are enforced to within
# this, and a sweep of 10 000 connections costs a few milliseconds.
_SWEEP_INTERVAL_S: Final = 1.0


class ProxyServer:
    """Listeners, connection pairs and broker map of one proxy.

    ``interceptors`` are registered after the built-in ones (ApiVersions restriction,
    address rewriting, and the SASL identity of each connection for the audit log), so their
    ``on_response`` runs first.
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        interceptors: Sequence[Interceptor] = (),
        metrics: ProxyMetrics | None = None,
        security: KafkaSecurityConfig | None = None,
        readiness: Readiness | None = None,
        liveness: Liveness | None = None,
        reuse_port: bool = False,
    ) -> None:
        """:param security: how the proxy's own connections (discovery) log in, and whether
        every connection to the brokers uses TLS.
        :param readiness: where the server adds its ``listeners`` and ``broker`` checks.
        :param liveness: told the event loop's lag along with the metrics.
        :param reuse_port: listeners bind with ``SO_REUSEPORT`` (one worker of several)."""
        self._config = config
        self._reuse_port = reuse_port
        self._security = security or KafkaSecurityConfig()
        self.metrics = ProxyMetrics() if metrics is None else metrics
        self._pairs: dict[int, ConnectionPair] = {}
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
                SaslIdentity(ClientIdentities(on_principal=self._principal_known)),
                *interceptors,
            ],
            broker_versions=broker_versions,
            memory=ExchangeMemory(config.request_plans_max_bytes),
        )
        self._server_ssl = server_context(config)
        bad_log = BadConnectionLog(logging.getLogger("tierproxy.connection"), self.metrics)
        self._admission = Admission(
            networks=config.client_networks(),
            handshakes=None
            if self._server_ssl is None
            else Handshakes(
                self._server_ssl,
                timeout=config.ssl_handshake_timeout_ms / 1000,
                max_pending=config.ssl_handshake_max_pending,
                bad_log=bad_log,
                metrics=self.metrics,
            ),
            bad_log=bad_log,
        )
        self._settings = PairSettings(
            upstream_ssl=self._security.ssl_context(),
            max_request_bytes=config.socket_request_max_bytes,
            high_water=config.buffer_high_water_bytes,
            low_water=config.buffer_low_water_bytes,
            connect_timeout=config.connection_setup_timeout_ms / 1000,
            idle_timeout=_seconds_or_none(config.connections_max_idle_ms),
            request_receive_timeout=_seconds_or_none(config.request_receive_timeout_ms),
            bad_log=bad_log,
            splice=config.splice_enable,
            resolver=Resolver(),
        )
        self._listeners: dict[int, Listener] = {}
        # Brokers whose listener could not bind, and why.
        self._unbound: dict[int, str] = {}
        self._ids = itertools.count(1)
        self._listen_lock = asyncio.Lock()
        self._starting = True
        self._sweeper: asyncio.Task[None] | None = None
        self._lag_probe: asyncio.Task[None] | None = None
        self._observe_lag = (
            self.metrics.loop_lag
            if liveness is None
            else _both(self.metrics.loop_lag, liveness.observe_lag)
        )
        if readiness is not None:
            listeners, broker = SERVER_CHECKS
            readiness.add(listeners, self._listeners_verdict)
            readiness.add_probe(
                broker, self._ask_broker, interval=config.health_check_interval_ms / 1000
            )

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
        """Learn the brokers and listen for each.

        :raises DiscoveryError: when no bootstrap broker answers.
        :raises ListenerError: when a listener cannot bind its address.
        """
        brokers = await self._ask_broker()
        self._starting = True
        await self.advertise(brokers)
        if self._unbound:
            await self._close_listeners()
            raise ListenerError("; ".join(self._unbound.values()))
        self._starting = False
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        self._lag_probe = asyncio.get_running_loop().create_task(watch_loop_lag(self._observe_lag))
        event(
            _log,
            logging.INFO,
            "proxy.started",
            bootstrap=self.bootstrap_servers,
            brokers=len(self._map.routes()),
            metrics_port=self._config.metrics_port or "off",
        )

    async def _ask_broker(self) -> list[BrokerAddress]:
        """The cluster's brokers, as a bootstrap broker tells them now.

        :raises DiscoveryError: when none answers.
        """
        return await discover_brokers(
            bootstrap_addresses(self._config),
            security=self._security,
            attempt_seconds=self._settings.connect_timeout,
        )

    def _listeners_verdict(self) -> Verdict:
        routes = self._map.routes()
        if not routes:
            return Verdict(ok=False, reason="the brokers are not known yet")
        if self._unbound:
            return Verdict(ok=False, reason="; ".join(self._unbound.values()))
        missing = [route.node_id for route in routes if route.node_id not in self._listeners]
        if missing:
            return Verdict(ok=False, reason=f"no listener yet for brokers {missing}")
        return Verdict(ok=True, reason=f"all {len(routes)} bound")

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
        try:
            listener = await listen(
                route.listener,
                node_id=node_id,
                admission=self._admission,
                make=lambda: self._accept(node_id),
                reuse_port=self._reuse_port,
            )
        except ListenerError as err:
            self._unbound[node_id] = str(err)
            if not self._starting:
                event(
                    _log,
                    logging.ERROR,
                    "listener.failed",
                    node=node_id,
                    listen=str(route.listener),
                    error=str(err),
                    meaning="clients of this broker cannot connect; the proxy is not ready",
                )
            return
        self._unbound.pop(node_id, None)
        route = self._map.bound(node_id, listener.port)
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
            for pair in list(self._pairs.values()):
                try:
                    pair.expire(now)
                except Exception:  # one pair's failure must not end the sweep for all
                    event(
                        _log,
                        logging.ERROR,
                        "connection.expire_failed",
                        msg="closing an expired connection failed",
                        conn=pair.connection_id,
                        exc_info=True,
                    )
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
            on_closed=self._forget,
        )
        self._pairs[pair.connection_id] = pair
        return pair

    def _forget(self, pair: ConnectionPair) -> None:
        self._pairs.pop(pair.connection_id, None)

    def _principal_known(self, connection_id: int, principal: str) -> None:
        pair = self._pairs.get(connection_id)
        client = pair.client if pair is not None else "?"
        audit.principal_known(connection_id, client=client, principal=principal)

    async def _close_listeners(self) -> None:
        for listener in self._listeners.values():
            listener.close()
        self._admission.close()
        for listener in self._listeners.values():
            await listener.wait_closed()
        await self._admission.wait_closed()
        self._listeners.clear()

    async def close(self, grace_seconds: float) -> None:
        """Stop listening, let in-flight requests finish for up to ``grace_seconds``, then
        cut the remaining connections."""
        for listener in self._listeners.values():
            listener.close()
        self._admission.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._lag_probe is not None:
            self._lag_probe.cancel()
            self._lag_probe = None
        pairs = list(self._pairs.values())
        event(_log, logging.INFO, "proxy.stopping", connections=len(pairs), grace_s=grace_seconds)
        for pair in pairs:
            pair.drain(serve_s=grace_seconds / 2)
        try:
            async with asyncio.timeout(grace_seconds), asyncio.TaskGroup() as group:
                for pair in pairs:
                    group.create_task(pair.wait_closed())
        except TimeoutError:
            for pair in list(self._pairs.values()):
                pair.abort("shutdown deadline passed")
        await self._close_listeners()
        await self._settings.resolver.close()
        event(_log, logging.INFO, "proxy.stopped")


def _both(
    first: Callable[[float], None], second: Callable[[float], None]
) -> Callable[[float], None]:
    def both(value: float) -> None:
        first(value)
        second(value)

    return both


def _seconds_or_none(milliseconds: int) -> float | None:
    """A timeout setting in seconds; a negative one (Kafka's "no limit") is None."""
    return None if milliseconds < 0 else milliseconds / 1000


async def run_until_stopped(
    config: ProxyConfig,
    *,
    interceptors: Sequence[Interceptor] = (),
    metrics: ProxyMetrics | None = None,
    security: KafkaSecurityConfig | None = None,
    readiness: Readiness | None = None,
    liveness: Liveness | None = None,
    reuse_port: bool = False,
) -> None:
    """Run a proxy until SIGTERM or SIGINT, then shut it down gracefully (readiness turns
    false first).

    While no bootstrap broker answers, retries with backoff (and still stops on a signal),
    logged with back-off too (:class:`~storage.retry_log.RetryLog`), then one
    ``discovery.reconnected`` line when a broker answers.
    ``metrics`` lets extensions (the remote tier) register their series in the same registry.

    :raises ListenerError: when a listener cannot bind at start-up.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = ProxyServer(
        config,
        interceptors=interceptors,
        metrics=metrics,
        security=security,
        readiness=readiness,
        liveness=liveness,
        reuse_port=reuse_port,
    )
    try:
        delay = _DISCOVERY_BACKOFF_S
        failures = RetryLog()
        while True:
            try:
                await server.start()
                break
            except DiscoveryError as err:
                failure = failures.record_failure()
                if failure.logged:
                    event(
                        _log,
                        logging.WARNING,
                        "discovery.failed",
                        error=str(err),
                        retry_s=delay,
                        attempt=failure.attempt,
                    )
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
                return
            except TimeoutError:
                delay = min(delay * 2, _DISCOVERY_BACKOFF_MAX_S)
        log_recovery(failures, _log, "discovery.reconnected", "bootstrap discovery")
        await stop.wait()
        if readiness is not None:
            readiness.stop_serving()
        await server.close(config.shutdown_timeout_ms / 1000)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
