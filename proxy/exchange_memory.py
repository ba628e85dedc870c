"""The memory that intercepted requests in flight hold, against one bound for the process.

Rules of this file:

- An exchange's bytes (:attr:`~proxy.interceptors.base.Exchange.held_bytes`: a Fetch's plan
  above all) are charged when its request is routed and freed when the connection's entry
  for the request goes: outstanding work is never dropped to make room.
- Over the bound, new work is refused instead: no connection reads its next request until
  responses have brought the total back within the bound (Kafka's broker stops reading
  requests the same way when ``queued.max.request.bytes`` is used up). The request being
  read when the bound is crossed is admitted whole, so the total exceeds the bound by at
  most one request per connection.
- Connections waiting to read are resumed in the order they started waiting, once the total
  is within the bound; each checks again before it reads (and waits again if others took
  the room first).
- Crossing the bound is logged (rate-limited), not each connection held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from proxy.bad_connections import LOG_BURST, LOG_PER_SECOND, TokenBucket
from proxy.config import DEFAULT_REQUEST_PLANS_MAX_BYTES
from proxy.logs import event

__all__ = ["ExchangeMemory"]

_log = logging.getLogger("tierproxy.router")


class ExchangeMemory:
    """Bytes held by the exchanges in flight, and the connections waiting to read."""

    __slots__ = ("_held", "_lines", "_max_bytes", "_suppressed", "_waiting")

    def __init__(
        self,
        max_bytes: int = DEFAULT_REQUEST_PLANS_MAX_BYTES,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """:param max_bytes: the bound (``request.plans.max.bytes``); 0 admits a request
        only when nothing is held."""
        self._max_bytes = max_bytes
        self._held = 0
        self._waiting: dict[int, Callable[[], None]] = {}
        self._lines = TokenBucket(LOG_BURST, LOG_PER_SECOND, clock)
        self._suppressed = 0

    @property
    def held(self) -> int:
        """Bytes held by the exchanges in flight."""
        return self._held

    @property
    def waiting(self) -> int:
        """Connections waiting to read their next request."""
        return len(self._waiting)

    @property
    def admits(self) -> bool:
        """Whether a connection may read its next request now."""
        return self._held <= self._max_bytes

    def charge(self, size: int) -> None:
        """An exchange holding ``size`` bytes was routed."""
        was_within = self._held <= self._max_bytes
        self._held += size
        if was_within and self._held > self._max_bytes:
            self._log_full()

    def free(self, size: int) -> None:
        """An exchange holding ``size`` bytes was released; wake waiting connections."""
        self._held -= size
        while self._waiting and self._held <= self._max_bytes:
            connection_id = next(iter(self._waiting))
            self._waiting.pop(connection_id)()

    def wait(self, connection_id: int, resume: Callable[[], None]) -> None:
        """Call ``resume`` once the connection may read its next request again. It is called
        from :meth:`free`, inside another connection's work: it must only schedule."""
        self._waiting[connection_id] = resume

    def stop_waiting(self, connection_id: int) -> None:
        """The connection closed: it no longer waits."""
        self._waiting.pop(connection_id, None)

    def _log_full(self) -> None:
        if not self._lines.take():
            self._suppressed += 1
            return
        suppressed, self._suppressed = self._suppressed, 0
        event(
            _log,
            logging.WARNING,
            "request.plans.full",
            held=self._held,
            limit=self._max_bytes,
            meaning="no connection reads its next request until responses free memory",
            **({"suppressed_before": suppressed} if suppressed else {}),
        )
