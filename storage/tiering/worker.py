"""One event loop per Spark Python worker process, and the storage clients built on it.

Both stages run their asyncio code here (:func:`worker_runtime`), and the copy stage takes
its remote storage manager from it, so that building an S3 client is paid once per worker
process instead of once per task.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig

__all__ = ["StorageFactory", "WorkerRuntime", "worker_runtime"]

StorageFactory = Callable[[RemoteStorageConfig], RemoteStorageManager]
T = TypeVar("T")


class WorkerRuntime:
    """One event loop per Python worker process, and the storage clients built on it.

    Spark reuses its Python worker processes from task to task. Building an S3 client costs
    about 0.2 s of CPU (botocore loads its service model), so copy tasks share one remote
    storage manager per worker and configuration instead of building one each; that needs
    the event loop it is bound to to outlive the task. Clients are never closed explicitly:
    Spark ends idle workers, and the operating system releases their sockets.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._storage: dict[tuple[object, RemoteStorageConfig], RemoteStorageManager] = {}

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def storage(self, factory: StorageFactory, config: RemoteStorageConfig) -> RemoteStorageManager:
        try:
            key = (factory, config)
            hash(key)
        except TypeError:
            return factory(config)
        if key not in self._storage:
            self._storage[key] = factory(config)
        return self._storage[key]


_runtime: WorkerRuntime | None = None


def worker_runtime() -> WorkerRuntime:
    """This process's runtime (a forked child gets its own)."""
    global _runtime  # noqa: PLW0603 (one runtime per worker process, by design)
    if _runtime is None or _runtime.pid != os.getpid():
        _runtime = WorkerRuntime()
    return _runtime
