"""What a Spark Python worker keeps from one task to the next: one event loop, and one remote
storage manager per storage configuration.

Spark reuses its Python workers (``spark.python.worker.reuse``, on by default), so a worker
reads many slices. Creating an S3 client per task costs botocore's service model (JSON
parsing) and a new connection every time; keeping it costs nothing. Running every task on
one loop with ``run_until_complete`` also avoids ``asyncio.run``'s SIGINT handling, which
on CPython 3.11 formats the ``repr`` of the finished task, result included (the slice's
whole byte range: about half a second of CPU per 64 MiB, twice per call).

Everything is closed when the worker exits.
"""

from __future__ import annotations

import asyncio
import atexit
from collections.abc import Coroutine
from typing import Any, TypeVar

from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import create_remote_storage

__all__ = ["remote_storage", "run"]

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_storages: dict[RemoteStorageConfig, RemoteStorageManager] = {}


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on the worker's loop."""
    global _loop  # noqa: PLW0603 (one loop per worker process)
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
        atexit.register(_close)
    return _loop.run_until_complete(coroutine)


def remote_storage(config: RemoteStorageConfig) -> RemoteStorageManager:
    """The worker's storage manager for ``config`` (created on first use, on the worker's
    loop: call it from a coroutine passed to :func:`run`)."""
    found = _storages.get(config)
    if found is None:
        found = _storages[config] = create_remote_storage(config)
    return found


def _close() -> None:
    if _loop is None or _loop.is_closed():
        return
    storages = list(_storages.values())
    _storages.clear()
    for storage in storages:
        _loop.run_until_complete(storage.close())
    _loop.close()
