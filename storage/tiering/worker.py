"""One event loop per Spark Python worker process, and the storage clients built on it.

The pipeline's tasks run their asyncio code here (:func:`worker_runtime`), and take their
remote storage manager and their metadata producer from it, so that building an S3 client
and getting a producer id (InitProducerId) are paid once per worker process instead of once
per task.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar, cast

import uvloop

from storage.glibc_malloc import keep_freed_buffers
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig

__all__ = ["StorageFactory", "WorkerRuntime", "worker_runtime"]

StorageFactory = Callable[[RemoteStorageConfig], RemoteStorageManager]
T = TypeVar("T")


class WorkerRuntime:
    """One event loop per Python worker process, and the storage clients built on it.

    Spark reuses its Python worker processes from task to task. Building an S3 client costs a
    fraction of a second of CPU (botocore loads its service model), so copy tasks share one
    remote storage manager per worker and configuration instead of building one each; that needs
    the event loop it is bound to to outlive the task. Clients are never closed explicitly:
    Spark ends idle workers, and the operating system releases their sockets.

    PySpark's daemon runs a full ``gc.collect()`` in the worker after every task, which walks
    every object the worker holds: the modules of PySpark, kio, the pipeline and botocore's
    service model. They live as long as the worker, so they are moved out of the collector's sight
    (``gc.freeze``) when the runtime starts and after each task, once what the task left as
    garbage is collected: what survives a task is the worker's own (modules, the loop, the
    storage clients and their connection pools), and frozen objects are still freed when
    their last reference goes; only a reference cycle among them would now outlive its use.
    The daemon's collections then see only what the running task allocates.

    The process's large buffers are kept by malloc between uses (:func:`_keep_freed_buffers`).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        _keep_freed_buffers()
        self.loop = uvloop.new_event_loop()
        self._storage: dict[tuple[object, RemoteStorageConfig], RemoteStorageManager] = {}
        self._shared: dict[Hashable, object] = {}
        _freeze_long_lived()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self.loop.run_until_complete(coroutine)
        finally:
            _freeze_long_lived()

    def storage(self, factory: StorageFactory, config: RemoteStorageConfig) -> RemoteStorageManager:
        try:
            key = (factory, config)
            hash(key)
        except TypeError:
            return factory(config)
        if key not in self._storage:
            self._storage[key] = factory(config)
        return self._storage[key]

    def shared(self, key: Hashable, build: Callable[[], T]) -> T:
        """What ``build`` made for ``key`` in this worker, built on first use (clients bound
        to this runtime's loop, kept for the worker's life like the storage clients)."""
        if key not in self._shared:
            self._shared[key] = build()
        return cast(T, self._shared[key])


_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""glibc's largest allowed threshold: the 16 MiB S3 parts and 8 MiB Fetch records stay below."""
_TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024
"""Free heap kept before it is returned: four parts of each of two uploads, and the records."""


def _keep_freed_buffers() -> None:
    """Let glibc's malloc reuse the task's freed large buffers (the records kio copies out,
    the bytearray each S3 part is sent from) instead of returning them to the kernel, which
    would fault them in and zero them again (:mod:`storage.glibc_malloc`)."""
    keep_freed_buffers(
        trim_threshold_bytes=_TRIM_THRESHOLD_BYTES, mmap_threshold_bytes=_MMAP_THRESHOLD_BYTES
    )


def _freeze_long_lived() -> None:
    """Collect what is garbage now, then keep every object left out of later collections."""
    gc.collect()
    gc.freeze()


_runtime: WorkerRuntime | None = None


def worker_runtime() -> WorkerRuntime:
    """This process's runtime (a forked child gets its own)."""
    global _runtime  # noqa: PLW0603 (one runtime per worker process, by design)
    if _runtime is None or _runtime.pid != os.getpid():
        _runtime = WorkerRuntime()
    return _runtime
