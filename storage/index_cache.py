"""The remote index cache: segment index files held in memory (and optionally on disk).

Every remote read needs the segment's offset index (and READ_COMMITTED reads its transaction
index; ListOffsets its time index), so fetching them per read would double the round trips
to object storage. Like Kafka's ``RemoteIndexCache``, this keeps whole index files keyed by
segment copy id and file type:

- an LRU bounded by the total bytes held (``remote.log.index.file.cache.total.size.mb``);
- a time-to-live (``remote.log.index.file.cache.ttl.ms``) so the files of deleted segments do
  not linger (a segment id is never reused, so an entry is never stale before that);
- single flight (:mod:`storage.single_flight`): concurrent misses for one file share one
  download, and a download whose callers all gave up still completes and warms the cache;
- an optional directory ``remote-log-index-cache`` that mirrors the memory cache, written
  atomically and fsynced (:mod:`storage.durable` says why), so a restarted proxy starts warm.

The counters are plain ints; the proxy exports them, storage never imports Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cachetools import TLRUCache

from storage.config import setting
from storage.durable import TMP_SUFFIX, write_atomically
from storage.model import IndexType, RemoteLogSegmentMetadata
from storage.rsm.base import RemoteStorageManager
from storage.single_flight import SingleFlight

__all__ = ["CACHE_DIR_NAME", "IndexCacheConfig", "RemoteIndexCache"]

CACHE_DIR_NAME = "remote-log-index-cache"
"""Kafka's directory name for the remote index cache inside a log directory."""
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexCacheConfig:
    """Settings of the remote index cache."""

    total_size_mb: int = setting(
        "remote.log.index.file.cache.total.size.mb",
        1024,
        "Bytes of remote index files held in memory, in MiB; least recently used files are "
        "evicted beyond it.",
        kafka="remote.log.index.file.cache.total.size.bytes",
    )
    ttl_ms: int = setting(
        "remote.log.index.file.cache.ttl.ms",
        3_600_000,
        "How long a cached index file is kept after it was downloaded, so the files of "
        "deleted segments do not linger.",
    )
    dir: str = setting(
        "remote.log.index.file.cache.dir",
        "",
        "Directory under which a 'remote-log-index-cache' directory mirrors the cache so "
        "restarts stay warm; empty keeps the cache in memory only.",
    )


_Key = tuple[uuid.UUID, IndexType]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    data: bytes
    fetched_at: float
    """Clock time of the download (the file's mtime when it came from disk)."""


class _TrackingCache(TLRUCache[_Key, _Entry, float]):
    """A TLRU cache that reports every entry it drops, telling evictions from expiries."""

    def __init__(
        self,
        *,
        max_bytes: int,
        ttl: float,
        clock: Callable[[], float],
        on_drop: Callable[[_Key, bool], None],
    ) -> None:
        super().__init__(
            max_bytes,
            lambda _key, entry, _now: entry.fetched_at + ttl,
            clock,
            lambda entry: len(entry.data),
        )
        self._on_drop = on_drop

    def expire(self, time: float | None = None) -> list[tuple[_Key, _Entry]]:
        expired = super().expire(time)
        for key, _entry in expired:
            self._on_drop(key, False)
        return expired

    def popitem(self) -> tuple[_Key, _Entry]:
        key, entry = super().popitem()
        self._on_drop(key, True)
        return key, entry


class RemoteIndexCache:
    """Index files of remote segments, fetched once and shared by every reader."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        *,
        max_bytes: int,
        ttl_seconds: float,
        disk_dir: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create the cache; with ``disk_dir``, files live in ``disk_dir/remote-log-index-cache``.

        Startup removes leftovers of interrupted writes, files older than the TTL, and the
        oldest files beyond ``max_bytes``: the disk never holds more than the memory bound.
        Survivors are loaded lazily, on their first miss.

        :param clock: wall-clock seconds; file modification times are compared with it.
        """
        self._rsm = rsm
        self._ttl = ttl_seconds
        self._clock = clock
        self._max_bytes = max_bytes
        self._cache = _TrackingCache(
            max_bytes=max_bytes, ttl=ttl_seconds, clock=clock, on_drop=self._dropped
        )
        self._loads: SingleFlight[_Key, bytes] = SingleFlight("index-cache-load")
        self._dir = Path(disk_dir, CACHE_DIR_NAME) if disk_dir is not None else None
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        """Entries dropped to stay within ``max_bytes``."""
        self.expirations = 0
        """Entries dropped because their TTL passed."""
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._trim_disk(self._dir)

    @classmethod
    def from_config(cls, rsm: RemoteStorageManager, config: IndexCacheConfig) -> RemoteIndexCache:
        """The cache described by ``config``."""
        return cls(
            rsm,
            max_bytes=config.total_size_mb * _MIB,
            ttl_seconds=config.ttl_ms / 1000,
            disk_dir=config.dir or None,
        )

    @property
    def size_bytes(self) -> int:
        """Bytes of index files currently held in memory."""
        return int(self._cache.currsize)

    def __len__(self) -> int:
        return len(self._cache)

    async def get(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The file ``index_type`` of the segment, from memory, disk or remote storage.

        Cancelling a caller does not cancel a download that others (or the cache) still want.

        :raises RemoteStorageError: when the download failed (every waiter gets the error; it
            is not cached, so the next call tries again).
        """
        key = (metadata.segment_id.id, index_type)
        entry = self._cache.get(key)
        if entry is not None:
            self.hits += 1
            return entry.data
        self.misses += 1
        return await self._loads.get(key, lambda: self._load(key, metadata, index_type))

    async def close(self) -> None:
        """Cancel downloads still in flight and wait for them to finish."""
        await self._loads.close()

    async def _load(
        self, key: _Key, metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> bytes:
        path = self._path(key)
        entry = None
        if path is not None:
            entry = await asyncio.to_thread(self._read_fresh, path)
        if entry is None:
            data = await self._rsm.fetch_index(metadata, index_type)
            entry = _Entry(data=data, fetched_at=self._clock())
            if path is not None and len(data) <= self._max_bytes:
                await asyncio.to_thread(write_atomically, path, data)
        try:
            self._cache[key] = entry
        except ValueError:
            # Larger than the whole cache: serve it without keeping it.
            self._remove_file(key)
        return entry.data

    def _read_fresh(self, path: Path) -> _Entry | None:
        try:
            mtime = path.stat().st_mtime
            if mtime + self._ttl <= self._clock():
                return None
            return _Entry(data=path.read_bytes(), fetched_at=mtime)
        except FileNotFoundError:
            return None

    def _dropped(self, key: _Key, evicted: bool) -> None:
        if evicted:
            self.evictions += 1
        else:
            self.expirations += 1
        self._remove_file(key)

    def _path(self, key: _Key) -> Path | None:
        if self._dir is None:
            return None
        return self._dir / f"{key[0]}.{key[1].value}"

    def _remove_file(self, key: _Key) -> None:
        path = self._path(key)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _trim_disk(self, directory: Path) -> None:
        now = self._clock()
        files = []
        for path in directory.iterdir():
            stat = path.stat()
            if path.suffix == TMP_SUFFIX or stat.st_mtime + self._ttl <= now:
                path.unlink()
            else:
                files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _mtime, size, _path in files)
        for _mtime, size, path in sorted(files):
            if total <= self._max_bytes:
                break
            path.unlink()
            total -= size
