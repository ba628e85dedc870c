"""Single flight: concurrent misses for one key share one load.

The index cache and the chunk cache both load from object storage on a miss. Two readers
missing the same key at once must not cost two GETs, and a load whose callers all gave up
(a purgatory timeout cancels them) must still finish, so that the cache is warm for the
retry. This is that mechanism, once: a task per key in flight, which callers await through
:func:`asyncio.shield`, dropped from the table when it settles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """At most one load in flight per key; every caller of that key gets its result."""

    def __init__(self, name: str) -> None:
        """:param name: prefix of the tasks' names, for debugging."""
        self._name = name
        self._inflight: dict[K, asyncio.Task[V]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._inflight

    def start(self, key: K, load: Callable[[], Coroutine[Any, Any, V]]) -> asyncio.Task[V]:
        """The task loading ``key``: the one in flight, or a new one running ``load()``."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(load(), name=f"{self._name}-{key}")
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._settled(key, done))
        return task

    async def get(self, key: K, load: Callable[[], Coroutine[Any, Any, V]]) -> V:
        """The result of loading ``key``; cancelling the caller does not cancel the load.

        :raises Exception: whatever the load raised (every waiter gets the same error).
        """
        return await asyncio.shield(self.start(key, load))

    async def close(self) -> None:
        """Cancel the loads in flight and wait for them to finish."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _settled(self, key: K, task: asyncio.Task[V]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            # Mark the error retrieved: the waiters that saw it may all have gone.
            task.exception()
