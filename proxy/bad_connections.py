"""Connections closed for bad input: one log line each, rate-limited per reason, and a counter.

A client that sends garbage loses its connection, with one ``connection.closed`` line naming
the peer and what was wrong. A flood of such clients (a scanner, a fuzzer, a broken client
in a reconnect loop) must not turn the log into the bottleneck or bury everything else, so
lines go through a token bucket per reason: a burst is logged in full, then about one line
per second per reason, and every :data:`SUPPRESSED_REPORT_SECONDS` one
``connection.bad.suppressed`` line counts what was left out. The Prometheus counter
``tierproxy_bad_connections_total{reason}`` counts every such close, logged or not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from proxy.logs import event
from proxy.metrics import ProxyMetrics

__all__ = [
    "BROKER_CLOSED",
    "CLIENT_DROPPED",
    "CLIENT_NETWORK_DENIED",
    "FOREIGN_PROTOCOL",
    "FRAME_TOO_LARGE",
    "IDLE",
    "INVALID_FRAME_SIZE",
    "LOG_BURST",
    "LOG_PER_SECOND",
    "MALFORMED_REQUEST",
    "SLOW_REQUEST",
    "SUPPRESSED_REPORT_SECONDS",
    "TLS_HANDSHAKE_ABANDONED",
    "TLS_HANDSHAKE_FAILED",
    "TLS_HANDSHAKE_SHED",
    "TLS_HANDSHAKE_TIMEOUT",
    "TRUNCATED_REQUEST",
    "BadConnectionLog",
    "TokenBucket",
]

# Reasons (the ``bad`` field of the log line and the metric's ``reason`` label).
FRAME_TOO_LARGE: Final = "frame_too_large"
FOREIGN_PROTOCOL: Final = "foreign_protocol"
INVALID_FRAME_SIZE: Final = "invalid_frame_size"
MALFORMED_REQUEST: Final = "malformed_request"
IDLE: Final = "idle"
SLOW_REQUEST: Final = "slow_request"
CLIENT_DROPPED: Final = "client_dropped"
"""The client went away while responses were still owed to it."""
TRUNCATED_REQUEST: Final = "truncated_request"
"""The client closed in the middle of sending a request frame."""
BROKER_CLOSED: Final = "broker_closed"
"""The broker closed while requests were in flight: what Kafka does to a request it cannot
parse (an unknown API key, a garbage body of an API the proxy passes through), and also
what a broker restart looks like."""
TLS_HANDSHAKE_TIMEOUT: Final = "tls_handshake_timeout"
"""The TLS handshake did not finish within ``ssl.handshake.timeout.ms``."""
TLS_HANDSHAKE_FAILED: Final = "tls_handshake_failed"
"""The TLS handshake failed: not TLS at all, no common protocol or cipher, a client
certificate that does not verify."""
TLS_HANDSHAKE_ABANDONED: Final = "tls_handshake_abandoned"
"""The client closed or reset before finishing its TLS handshake (a TCP health check)."""
TLS_HANDSHAKE_SHED: Final = "tls_handshake_shed"
"""The oldest TLS handshake, closed because ``ssl.handshake.max.pending`` were running."""
CLIENT_NETWORK_DENIED: Final = "client_network_denied"
"""The client's address is refused by ``listeners.allow.cidrs``/``listeners.deny.cidrs``."""

LOG_BURST: Final = 20
"""Lines per reason logged back to back before the limit applies: enough to show a handful
of distinct offenders (their addresses) at once, few enough to read on one screen."""
LOG_PER_SECOND: Final = 1.0
"""Lines per reason per second once the burst is spent: a flood costs a few lines a second
whatever its rate, and a slow trickle of bad clients is still logged one by one."""
SUPPRESSED_REPORT_SECONDS: Final = 10.0
"""How often the lines left out are counted in one ``connection.bad.suppressed`` line."""


class TokenBucket:
    """``burst`` tokens, refilled at ``per_second``; :meth:`take` spends one if there is one."""

    __slots__ = ("_burst", "_clock", "_per_second", "_stamp", "_tokens")

    def __init__(self, burst: int, per_second: float, clock: Callable[[], float]) -> None:
        self._burst = float(burst)
        self._per_second = per_second
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def take(self) -> bool:
        """Spend a token; False when none is left."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._per_second)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class BadConnectionLog:
    """Logs bad-connection closes through a token bucket per reason and counts them all."""

    def __init__(
        self,
        logger: logging.Logger,
        metrics: ProxyMetrics,
        *,
        burst: int = LOG_BURST,
        per_second: float = LOG_PER_SECOND,
        report_seconds: float = SUPPRESSED_REPORT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._metrics = metrics
        self._burst = burst
        self._per_second = per_second
        self._report_seconds = report_seconds
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._suppressed: dict[str, int] = {}
        self._last_report = clock()

    def closed(self, level: int, bad: str, /, **fields: Any) -> None:
        """A connection was closed for reason ``bad``: count it, and log ``connection.closed``
        with ``fields`` and ``bad`` unless this reason's lines are over their rate."""
        self._metrics.bad_connection(bad)
        bucket = self._buckets.get(bad)
        if bucket is None:
            bucket = self._buckets[bad] = TokenBucket(self._burst, self._per_second, self._clock)
        if bucket.take():
            event(self._logger, level, "connection.closed", **fields, bad=bad)
        else:
            self._suppressed[bad] = self._suppressed.get(bad, 0) + 1

    def report_suppressed(self) -> None:
        """Log how many lines were left out since the last report, once the report interval
        has passed (the server calls this about once a second)."""
        now = self._clock()
        if now - self._last_report < self._report_seconds:
            return
        self._last_report = now
        if not self._suppressed:
            return
        counts, self._suppressed = self._suppressed, {}
        event(
            self._logger,
            logging.WARNING,
            "connection.bad.suppressed",
            suppressed=sum(counts.values()),
            seconds=self._report_seconds,
            reasons=",".join(f"{reason}:{count}" for reason, count in sorted(counts.items())),
            message=f"{sum(counts.values())} more bad connections suppressed",
        )
