"""Fake clocks: time that moves only when a test (or the code under test's sleep) moves it.

:class:`ManualClock` stands in for a ``Callable[[], float]`` (or ``int``) clock such as
``time.monotonic`` or a wall clock in milliseconds: calling it returns :attr:`now`, which only
the test changes. :class:`SleepingClock` also stands in for ``asyncio.sleep`` and
``asyncio.timeout`` (the shape of :class:`storage.retry.Clock`): a sleep returns at once and
moves the clock by its length, so retry and rate-limit loops run without waiting.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

__all__ = ["ManualClock", "SleepingClock"]

N = TypeVar("N", int, float)


class ManualClock(Generic[N]):
    """A clock that reads :attr:`now` and never moves by itself; in the unit of ``start``."""

    def __init__(self, start: N) -> None:
        self.now: N = start

    def __call__(self) -> N:
        return self.now

    def advance(self, step: N) -> None:
        """Move the clock on by ``step`` (never back: ``step`` is not negative)."""
        assert step >= 0, step
        self.now += step


class SleepingClock(ManualClock[float]):
    """Monotonic seconds that move only when the code under test sleeps (or a test says so).

    Every sleep is recorded in :attr:`sleeps`; ``timeout`` never fires, since no time passes
    while the code under test awaits anything else.
    """

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(start)
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()
