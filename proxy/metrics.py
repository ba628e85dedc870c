"""Prometheus metrics of the proxy: connections, requests, bytes, latency, upstream errors,
bad connections.

Each :class:`ProxyMetrics` owns its registry, so several proxies in one process (tests) do not
collide. Per-API series are resolved once per API key and cached: the request path pays a
dict lookup and two counter increments, not a label lookup.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from protocol.messages import ApiKey

__all__ = ["ProxyMetrics", "api_name"]

# Latency through the proxy, request forwarded to response written: from a sub-millisecond
# pass-through up to Fetch long-polls (fetch.max.wait.ms, 500 ms by default) and slow remote reads.
_LATENCY_BUCKETS: Final = (
    0.0002,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


def api_name(api_key: int) -> str:
    """Label value for an API key: Kafka's name in snake case, or the number if unknown."""
    try:
        return ApiKey(api_key).name.lower()
    except ValueError:
        return str(api_key)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _ApiSeries:
    requests: Counter
    request_bytes: Counter
    response_bytes: Counter
    latency: Histogram


class ProxyMetrics:
    """The proxy's Prometheus series, in their own registry."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series
        self.registry = CollectorRegistry()
        self._connections_active = Gauge(
            "tierproxy_connections_active",
            "Client connections currently open.",
            registry=self.registry,
        )
        self._connections = Counter(
            "tierproxy_connections",
            "Client connections accepted.",
            registry=self.registry,
        )
        self._requests = Counter(
            "tierproxy_requests",
            "Requests received from clients, per API.",
            ["api"],
            registry=self.registry,
        )
        self._request_bytes = Counter(
            "tierproxy_request_bytes",
            "Request bytes from clients to the broker, per API (frames with size prefix).",
            ["api"],
            registry=self.registry,
        )
        self._response_bytes = Counter(
            "tierproxy_response_bytes",
            "Response bytes from the broker to clients, per API (frames with size prefix).",
            ["api"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "tierproxy_request_latency_seconds",
            "Time from receiving a request to writing its response, per API.",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._upstream_errors = Counter(
            "tierproxy_upstream_errors",
            "Failures talking to the broker: connect, reset, protocol.",
            ["kind"],
            registry=self.registry,
        )
        self._bad_connections = Counter(
            "tierproxy_bad_connections",
            "Client connections closed for bad input or timeouts, per reason "
            "(frame_too_large, malformed_request, idle, slow_request, ...).",
            ["reason"],
            registry=self.registry,
        )
        self._loop_lag = Histogram(
            "tierproxy_event_loop_lag_seconds",
            "How late the event loop woke a 10 ms timer: the delay every request on the loop "
            "shares (see proxy.loop_lag).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._tls_handshakes = Gauge(
            "tierproxy_tls_handshakes_pending",
            "Client connections in their TLS handshake (at most ssl.handshake.max.pending).",
            registry=self.registry,
        )
        self._series: dict[int, _ApiSeries] = {}

    def _for(self, api_key: int) -> _ApiSeries:
        series = self._series.get(api_key)
        if series is None:
            name = api_name(api_key)
            series = _ApiSeries(
                requests=self._requests.labels(name),
                request_bytes=self._request_bytes.labels(name),
                response_bytes=self._response_bytes.labels(name),
                latency=self._latency.labels(name),
            )
            self._series[api_key] = series
        return series

    def connection_opened(self) -> None:
        """A client connection was accepted."""
        self._connections.inc()
        self._connections_active.inc()

    def connection_closed(self) -> None:
        """A client connection was closed (by either side)."""
        self._connections_active.dec()

    def request(self, api_key: int, size: int) -> None:
        """A request frame of ``size`` bytes arrived from a client."""
        series = self._for(api_key)
        series.requests.inc()
        series.request_bytes.inc(size)

    def response(self, api_key: int, size: int, seconds: float) -> None:
        """A response frame of ``size`` bytes went back, ``seconds`` after its request came."""
        series = self._for(api_key)
        series.response_bytes.inc(size)
        series.latency.observe(seconds)

    def loop_lag(self, seconds: float) -> None:
        """The event loop ran a timer ``seconds`` late."""
        self._loop_lag.observe(seconds)

    def tls_handshakes_pending(self, count: int) -> None:
        """``count`` client connections are in their TLS handshake."""
        self._tls_handshakes.set(count)

    def upstream_error(self, kind: str) -> None:
        """Talking to the broker failed (``kind``: connect, closed, protocol)."""
        self._upstream_errors.labels(kind).inc()

    def bad_connection(self, reason: str) -> None:
        """A client connection was closed for ``reason`` (see :mod:`proxy.bad_connections`)."""
        self._bad_connections.labels(reason).inc()
