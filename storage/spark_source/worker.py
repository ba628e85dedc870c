"""What a Spark Python worker keeps from one task to the next: one event loop, running in a
thread of its own, and one remote storage manager (and index cache) per storage
configuration.

Spark reuses its Python workers (``spark.python.worker.reuse``, on by default), so a worker
reads many slices. Creating an S3 client per task costs botocore's service model (JSON
parsing) and a new connection every time; keeping it costs nothing. Running every task on
one loop with ``run_until_complete`` also avoids ``asyncio.run``'s SIGINT handling, which
on CPython 3.11 formats the ``repr`` of the finished task, result included (the slice's
whole byte range: about half a second of CPU per 64 MiB, twice per call).

The driver's planning runs in such a worker too (PySpark's planner runner, reused from one
query to the next), on the same loop: a query's planning read its segments' indexes through a
storage manager created for it, and botocore's client (its endpoint rules and service model,
JSON parsed again every time) was most of the 0.4 to 0.5 s a 512 MiB scan spent planning
(cProfile of ``TierproxyReader.partitions``, three plans in one process). Remote indexes
never change, so one cache of them serves every query of the worker.

The loop runs in its own thread so that a slice's next GET is received while the task's
thread decodes the current one (:func:`start`): read one after the other, each of a slice's
16 MiB GETs waited for the server's answer with the worker idle (in a 512 MiB scan the
workers used 1.2 of the two cores, and the scan took a third longer than with one 64 MiB
GET per slice). Socket reads release the GIL; the loop's own Python work per read is small.

Everything is closed when the worker exits.

The worker's long-lived heap is frozen out of the garbage collector (:func:`freeze_heap`):
PySpark's daemon runs a full ``gc.collect()`` after every task (``pyspark/daemon.py``), which
walks every object the worker holds (PySpark, pyarrow, numpy, botocore's service model). In a
512 MiB scan (12 slices on ``local[2]``) that collection was 46 % of the Python workers'
CPU samples (``perf record`` of both workers: ``gc_collect_main``, ``visit_reachable``,
``visit_decref`` and the ``*_traverse`` functions) and py-spy put a third of the workers'
samples on the daemon's ``gc.collect()`` line.

glibc's allocator is told to keep freed memory (:func:`keep_freed_memory`): every GET's body
is a new ``bytearray`` (then of up to 16 MiB, now 64 MiB), and with glibc's defaults (the
heap is trimmed once 32 MiB at its top are free) each one was handed back to the kernel and
faulted in again, zeroed, page by page: page faults and the kernel's ``clear_page_erms``
were about a fifth of the Python workers' CPU samples (``perf record``, after the heap was
frozen). Reading a 512 MiB topic's slices twice in one process: 116,000 minor faults and 1.6
CPU-s with the defaults, 20,000 and 1.3-1.4 CPU-s keeping up to 128 MiB.

That kept only what the main thread allocates: GET bodies are allocated on the loop's thread,
whose own glibc arena grows in heaps of at most 64 MiB, unmapped as they empty, and maps a
larger body on its own whatever the thresholds. A ``perf record`` of both workers in a 512
MiB scan still had about a sixth of their samples in page faults under the socket's copy into
new bodies (``exc_page_fault``, ``do_anonymous_page``, ``clear_page_erms`` under
``_copy_to_iter``). The loop's thread now allocates from the main heap too (one arena): in
alternating 512 MiB scans in one process (load 4 to 8), the workers' CPU per GiB fell from a
median of 1.81 (1.66 to 2.76, 12 rounds) to 1.50 (1.30 to 1.82).
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
