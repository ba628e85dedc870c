"""The upload rate limit: a token bucket of bytes per second, shared by a process's uploads.

Copying a backlog must not take the broker host's disk or network from the broker: the
pipeline reads the broker and uploads as fast as both allow, so an operator bounds the
uploads (Aiven's plugin has ``upload.rate.limit.bytes.per.second`` for the same reason).
:class:`RateLimiter` lets ``rate`` bytes through per second on average, with bursts of at
most one second's worth; an upload larger than that waits for its whole size at the rate
(it is never split: the store takes an object at once). Waiters are served in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    """At most ``rate`` bytes per second on average, first come first served."""

    def __init__(
        self,
        rate: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """:raises ValueError: for a rate below one byte per second."""
        if rate < 1:
            raise ValueError(f"rate must be at least 1 byte/s, not {rate}")
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(rate)
        self._updated = clock()
        self._turn = asyncio.Lock()
        self.waited_seconds = 0.0
        """Time uploads spent waiting for the limit, in all."""

    async def acquire(self, size: int) -> None:
        """Return once ``size`` bytes may be sent (at once if the bucket holds them)."""
        async with self._turn:
            self._refill()
            self._tokens -= size
            if self._tokens < 0:
                wait = -self._tokens / self.rate
                self.waited_seconds += wait
                await self._sleep(wait)
                self._refill()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._updated) * self.rate)
        self._updated = now
