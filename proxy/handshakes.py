"""TLS handshakes of accepted client connections: bounded in time and in number, each end
logged and counted.

asyncio and uvloop hand a connection to its protocol only once its TLS handshake has
succeeded, and drop a failed one silently: a port scan, a TCP health check, a plaintext
client on an SSL listener or a client that stalls mid-handshake would never be seen, and
would hold a file descriptor for the loop's default 60 s. So the SSL listeners accept plain
sockets themselves (:mod:`proxy.listeners`) and run each handshake here as a task:

- it must finish within ``ssl.handshake.timeout.ms``, or the connection is closed
  (``bad=tls_handshake_timeout``);
- at most ``ssl.handshake.max.pending`` run at once; one more closes the oldest
  (``bad=tls_handshake_shed``): a flood of stalled handshakes costs bounded memory and file
  descriptors, and a real client, whose handshake takes milliseconds, is hardly ever the
  oldest;
- a TLS error (a plaintext or HTTP client, no common protocol or cipher, a client
  certificate that does not verify) closes it (``bad=tls_handshake_failed``), and a client
  that closes or resets first is ``bad=tls_handshake_abandoned`` (logged at INFO: a TCP
  health check looks like that);
- every close goes through :class:`~proxy.bad_connections.BadConnectionLog` (one line each,
  rate-limited per reason; counted in ``tierproxy_bad_connections_total``);
- on success the connection's protocol is made then (:class:`Handoff`), so nothing of a
  connection pair exists for a connection that never completed its handshake.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, cast

from proxy import bad_connections as reasons
from proxy.bad_connections import BadConnectionLog
from proxy.metrics import ProxyMetrics

__all__ = ["Handoff", "Handshakes", "PairFactory"]

PairFactory = Callable[[], asyncio.Protocol]
"""Makes (and registers) the protocol that serves a connection once it is admitted."""

_LOOP_TIMEOUT_MARGIN_S: Final = 5.0
"""The loop's own handshake timeout is set this much later than ours, so that ours, which
is logged and counted, is the one that fires."""

_NOT_TLS: Final = {
    "WRONG_VERSION_NUMBER": "the client does not speak TLS (a plaintext client on an SSL "
    "listener?)",
    "HTTP_REQUEST": "the client spoke HTTP, not TLS",
    "HTTPS_PROXY_REQUEST": "the client spoke HTTP, not TLS",
}
"""OpenSSL's reasons for a first record that is not TLS at all, in words."""


class Handoff(asyncio.Protocol):
    """The protocol a transport starts with: makes the real one when the connection is
    admitted (after its handshake, for TLS) and hands the transport over to it."""

    __slots__ = ("_make",)

    def __init__(self, make: PairFactory) -> None:
        self._make = make

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        protocol = self._make()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class _Attempt:
    """An accepted socket and whether the loop has taken it over."""

    __slots__ = ("owned", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.owned = False
        """Once the loop has made a transport of the socket, the transport owns it (and
        closes it); a task cancelled before that never ran, and the socket is closed here."""

    def done(self, _: object) -> None:
        if not self.owned:
            self.sock.close()


class Handshakes:
    """The TLS handshakes in progress, oldest first."""

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        timeout: float,
        max_pending: int,
        bad_log: BadConnectionLog,
        metrics: ProxyMetrics,
    ) -> None:
        self._context = context
        self._timeout = timeout
        self._max_pending = max_pending
        self._bad_log = bad_log
        self._metrics = metrics
        # Insertion order is age order: the first is the oldest.
        self._pending: dict[asyncio.Task[None], str] = {}
        # Why a task was cancelled by us (shed, shutdown); absent: cancelled from outside.
        self._cancelled: dict[asyncio.Task[None], str] = {}
        # Every task not yet ended, pending or cancelled.
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Handshakes in progress."""
        return len(self._pending)

    def start(self, sock: socket.socket, *, client: str, node_id: int, make: PairFactory) -> None:
        """Run the handshake of accepted socket ``sock`` (nonblocking); closes the oldest
        handshake first when ``ssl.handshake.max.pending`` are already running."""
        while len(self._pending) >= self._max_pending:
            self._cancel(next(iter(self._pending)), reasons.TLS_HANDSHAKE_SHED)
        attempt = _Attempt(sock)
        task = asyncio.get_running_loop().create_task(
            self._handshake(attempt, client=client, node_id=node_id, make=make)
        )
        task.add_done_callback(attempt.done)
        task.add_done_callback(self._tasks.discard)
        self._tasks.add(task)
        self._pending[task] = client
        self._metrics.tls_handshakes_pending(len(self._pending))

    def close(self) -> None:
        """Abort every handshake in progress (shutdown): they have nothing in flight."""
        for task in list(self._pending):
            self._cancel(task, "shutdown")

    async def wait_closed(self) -> None:
        """Return once every handshake task has ended."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    def _cancel(self, task: asyncio.Task[None], why: str) -> None:
        self._cancelled[task] = why
        self._forget(task)
        task.cancel()

    def _forget(self, task: asyncio.Task[None]) -> None:
        if self._pending.pop(task, None) is not None:
            self._metrics.tls_handshakes_pending(len(self._pending))

    async def _handshake(
        self, attempt: _Attempt, *, client: str, node_id: int, make: PairFactory
    ) -> None:
        task = cast(asyncio.Task[None], asyncio.current_task())
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        fields: dict[str, Any] = {"client": client, "node": node_id}
        try:
            async with asyncio.timeout(self._timeout):
                attempt.owned = True
                await loop.connect_accepted_socket(
                    lambda: Handoff(make),
                    attempt.sock,
                    ssl=self._context,
                    ssl_handshake_timeout=self._timeout + _LOOP_TIMEOUT_MARGIN_S,
                )
        except asyncio.CancelledError:
            why = self._cancelled.pop(task, None)
            if why is None:
                raise
            if why == reasons.TLS_HANDSHAKE_SHED:
                self._closed(
                    logging.WARNING,
                    why,
                    fields,
                    started,
                    reason="too many TLS handshakes in progress: the oldest is closed",
                    limit=self._max_pending,
                )
        except TimeoutError:
            self._closed(
                logging.WARNING,
                reasons.TLS_HANDSHAKE_TIMEOUT,
                fields,
                started,
                reason="TLS handshake not finished in time",
                timeout_s=self._timeout,
            )
        except ssl.SSLError as err:
            self._closed(
                logging.WARNING,
                reasons.TLS_HANDSHAKE_FAILED,
                fields,
                started,
                reason=_NOT_TLS.get(err.reason or "", "TLS handshake failed"),
                error=str(err),
            )
        except OSError as err:
            self._closed(
                logging.INFO,
                reasons.TLS_HANDSHAKE_ABANDONED,
                fields,
                started,
                reason="the client closed before finishing the TLS handshake",
                error=str(err) or type(err).__name__,
            )
        finally:
            self._forget(task)

    def _closed(
        self, level: int, bad: str, fields: dict[str, Any], started: float, **more: Any
    ) -> None:
        self._bad_log.closed(
            level, bad, **fields, **more, after_s=round(time.monotonic() - started, 3)
        )
