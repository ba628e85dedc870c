"""Retries with exponential back-off and jitter, for every remote call tierproxy makes.

The remote storage managers, the tiering pipeline and the proxy's remote reads all talk to
services that fail transiently (an S3 endpoint restarting, a throttled bucket, a broker
re-electing). They share one policy so that the settings behave the same everywhere, named as
Kafka names them for its RemoteLogManager tasks (``remote.log.manager.task.retry.backoff.ms``,
``.backoff.max.ms``, ``.jitter``), and computed with Kafka's ``ExponentialBackoff`` formula::

    backoff(n) = min(max, initial * 2 ** min(n, log2(max / initial))
                          * uniform(1 - jitter, 1 + jitter))

where ``n`` counts retries from 0. A retry loop stops at the first non-retriable error, after
``max_attempts`` attempts, or when the next attempt could not start before the deadline; with a
deadline, each attempt is also cut off when the deadline passes, so a caller waits at most the
deadline however the remote end misbehaves.

Time comes from a :class:`Clock` so tests run the loop on a fake clock without sleeping.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "RetryPolicy",
    "SystemClock",
    "call_with_retry",
]

T = TypeVar("T")

_MULTIPLIER = 2
"""Kafka's RemoteLogManager builds its ExponentialBackoff with multiplier 2."""


class Clock(Protocol):
    """Where the retry loop reads time, sleeps, and bounds an attempt by the deadline."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        """A context that cancels its body after ``seconds`` (never, for ``None``) with
        :class:`TimeoutError`."""
        ...


class SystemClock:
    """The event loop's real time."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


SYSTEM_CLOCK = SystemClock()


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how long to retry a remote call.

    :raises ValueError: when a value is out of range (negative times, jitter outside
        Kafka's ``[0, 0.5]``, fewer than one attempt).
    """

    backoff_ms: int = 500
    """First back-off (Kafka ``remote.log.manager.task.retry.backoff.ms``)."""
    backoff_max_ms: int = 30_000
    """Longest back-off (Kafka ``remote.log.manager.task.retry.backoff.max.ms``)."""
    jitter: float = 0.2
    """Each back-off is multiplied by a random factor in ``[1 - jitter, 1 + jitter)``."""
    max_attempts: int = 5
    """Attempts in total, the first included; 1 disables retries."""
    deadline_ms: int | None = 30_000
    """Time budget for all attempts and back-offs together; ``None`` for no deadline."""

    def __post_init__(self) -> None:
        if self.backoff_ms < 0 or self.backoff_max_ms < 0:
            raise ValueError("retry back-off times must not be negative")
        if not 0.0 <= self.jitter <= 0.5:
            raise ValueError(f"retry jitter must be within [0, 0.5], not {self.jitter}")
        if self.max_attempts < 1:
            raise ValueError(f"retry max attempts must be at least 1, not {self.max_attempts}")
        if self.deadline_ms is not None and self.deadline_ms <= 0:
            raise ValueError(f"retry deadline must be positive, not {self.deadline_ms}")

    def backoff_seconds(self, retry: int, uniform: Callable[[float, float], float]) -> float:
        """The wait before retry number ``retry`` (0 for the first retry), in seconds.

        :param uniform: ``random.uniform`` or a deterministic stand-in.
        """
        initial = min(self.backoff_ms, self.backoff_max_ms)
        if self.backoff_max_ms <= initial:
            return initial / 1000
        exp_max = math.log(self.backoff_max_ms / max(initial, 1)) / math.log(_MULTIPLIER)
        term = initial * math.pow(_MULTIPLIER, min(retry, exp_max))
        factor = uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(term * factor, self.backoff_max_ms) / 1000


async def call_with_retry(
    operation: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    is_retriable: Callable[[Exception], bool],
    clock: Clock = SYSTEM_CLOCK,
    uniform: Callable[[float, float], float] = random.uniform,
    on_retry: Callable[[int, Exception, float], None] | None = None,
) -> T:
    """Await ``operation()`` until it succeeds, retrying the errors ``is_retriable`` accepts.

    ``operation`` is called afresh for every attempt, so it must be safe to repeat.
    Cancellation is never retried.

    :param on_retry: called with (attempt number that failed, its error, seconds to wait)
        before each back-off, for logging and metrics.
    :raises Exception: the last attempt's error when it is not retriable, when the attempts
        are used up, or when the deadline leaves no room for another attempt.
    :raises TimeoutError: when the deadline passes while an attempt is still running.
    """
    start = clock.monotonic()
    deadline = None if policy.deadline_ms is None else start + policy.deadline_ms / 1000
    attempt = 0
    while True:
        attempt += 1
        remaining = None if deadline is None else max(deadline - clock.monotonic(), 0.0)
        try:
            async with clock.timeout(remaining):
                return await operation()
        except Exception as err:
            if not is_retriable(err) or attempt >= policy.max_attempts:
                raise
            wait = policy.backoff_seconds(attempt - 1, uniform)
            if deadline is not None and clock.monotonic() + wait >= deadline:
                raise
            if on_retry is not None:
                on_retry(attempt, err, wait)
        await clock.sleep(wait)
