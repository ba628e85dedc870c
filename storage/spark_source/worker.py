"""What a Spark Python worker keeps from one task to the next: one event loop, running in a
thread of its own, and one remote storage manager (and index cache) per storage
configuration.

Spark reuses its Python workers (``spark.python.worker.reuse``, on by default), so a worker
reads many slices. Creating an S3 client per task costs botocore's service model (JSON
parsing) and a new connection every time; keeping it costs nothing. Running every task on
one loop with ``run_until_complete`` also avoids ``asyncio.run``'s SIGINT handling, which
on CPython 3.11 formats the ``repr`` of the finished task, result included (the slice's
whole byte range).

The driver's planning runs in such a worker too (PySpark's planner runner, reused from one
query to the next), on the same loop, so botocore's client (its endpoint rules and service
model) is built once, not per query. Remote indexes never change, so one cache of them
serves every query of the worker.

The loop runs in its own thread so that a slice's next GET is received while the task's
thread decodes the current one (:func:`start`). Socket reads release the GIL; the loop's
own Python work per read is small.

Everything is closed when the worker exits.

The worker's long-lived heap is frozen out of the garbage collector (:func:`freeze_heap`):
PySpark's daemon runs a full ``gc.collect()`` after every task (``pyspark/daemon.py``), which
would walk every object the worker holds (PySpark, pyarrow, numpy, botocore's service model).

glibc's allocator is told to keep freed memory (:func:`keep_freed_memory`), and the loop's
thread allocates from the main heap (one arena): every GET's body (up to 64 MiB) is a new
``bytearray`` allocated on the loop's thread, and with glibc's defaults each would be handed
back to the kernel and faulted in again, zeroed, page by page (:mod:`storage.glibc_malloc`).

The profiles and A/Bs behind these choices:
``docs/decisions/0011-spark-workers-tasks-and-reads.md``.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, Final, TypeVar

from storage.glibc_malloc import keep_freed_buffers
from storage.index_cache import RemoteIndexCache
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import create_remote_storage

__all__ = ["freeze_heap", "index_cache", "keep_freed_memory", "remote_storage", "run", "start"]

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_storages: dict[RemoteStorageConfig, RemoteStorageManager] = {}
_indexes: dict[RemoteStorageConfig, RemoteIndexCache] = {}
_INDEX_CACHE_BYTES: Final = 64 * 1024 * 1024
_INDEX_TTL_SECONDS: Final = 600.0
_frozen_with: int | None = None
"""How many storage managers the worker had when it last froze its heap (``None``: never)."""


_KEPT_FREE_BYTES: Final = 192 * 1024 * 1024
"""Free memory glibc keeps at the heap's top: a few GET bodies (a task's current and
next read, and the Arrow copies of a group)."""
_MMAP_ABOVE_BYTES: Final = 96 * 1024 * 1024
"""Allocations above this are mapped on their own (and unmapped when freed): none of a
slice's reads (at most 64 MiB each, where batches allow; a ``bytearray`` asks one byte
more)."""
_tuned = False


def keep_freed_memory() -> None:
    """Have glibc's ``malloc`` keep the memory of freed GET bodies for the next ones, also
    those the loop's thread allocates (once per worker, before that thread starts; nothing
    under another C library, whose ``mallopt`` numbers differ)."""
    global _tuned  # noqa: PLW0603 (one allocator per worker process)
    if _tuned:
        return
    _tuned = True
    keep_freed_buffers(
        trim_threshold_bytes=_KEPT_FREE_BYTES,
        mmap_threshold_bytes=_MMAP_ABOVE_BYTES,
        one_arena=True,
    )


def freeze_heap() -> None:
    """Move what the worker keeps for good out of the collector's reach, at the start of a
    task, when it holds little else: the daemon collected the last task's garbage just
    before (``gc.collect()`` between tasks).

    It freezes the heap when it grew by what stays: on the first task (the modules its read
    imported) and after a task created a storage manager (botocore's client and service
    model). Frozen objects are still freed when no one refers to them; only cycles among
    them that become garbage later are never collected, and what is frozen here lives as
    long as the worker anyway.
    """
    global _frozen_with  # noqa: PLW0603 (one heap per worker process)
    if _frozen_with != len(_storages):
        gc.freeze()
        _frozen_with = len(_storages)


def start(coroutine: Coroutine[Any, Any, T]) -> Future[T]:
    """Run ``coroutine`` on the worker's loop; its future, to wait for later."""
    global _loop  # noqa: PLW0603 (one loop per worker process)
    if _loop is None or _loop.is_closed():
        keep_freed_memory()
        _loop = asyncio.new_event_loop()
        threading.Thread(target=_loop.run_forever, name="tierproxy-io", daemon=True).start()
        atexit.register(_close)
    return asyncio.run_coroutine_threadsafe(coroutine, _loop)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on the worker's loop."""
    return start(coroutine).result()


def remote_storage(config: RemoteStorageConfig) -> RemoteStorageManager:
    """The worker's storage manager for ``config`` (created on first use, on the worker's
    loop: call it from a coroutine passed to :func:`run`)."""
    found = _storages.get(config)
    if found is None:
        found = _storages[config] = create_remote_storage(config)
    return found


def index_cache(config: RemoteStorageConfig) -> RemoteIndexCache:
    """The worker's cache of the remote indexes of ``config``'s storage (created on first
    use: call it on the worker's loop, as :func:`remote_storage`)."""
    found = _indexes.get(config)
    if found is None:
        found = _indexes[config] = RemoteIndexCache(
            remote_storage(config), max_bytes=_INDEX_CACHE_BYTES, ttl_seconds=_INDEX_TTL_SECONDS
        )
    return found


def _close() -> None:
    loop = _loop
    if loop is None or loop.is_closed():
        return
    indexes = list(_indexes.values())
    _indexes.clear()
    for cache in indexes:
        asyncio.run_coroutine_threadsafe(cache.close(), loop).result()
    storages = list(_storages.values())
    _storages.clear()
    for storage in storages:
        asyncio.run_coroutine_threadsafe(storage.close(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
