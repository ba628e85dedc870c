"""The chunk cache: fixed-size ranges of remote ``.log`` objects, shared by every reader.

A remote read costs a round trip to object storage (tens of milliseconds) whatever its
size, while a catch-up consumer asks for one fetch's worth (about 1 MiB) at a time. Reading
aligned chunks (4 MiB by default, as Aiven's tiered-storage plugin does) turns four such
fetches into one GET, and lets every consumer of the same range share it:

- a chunk is ``[i * chunk_bytes, (i + 1) * chunk_bytes)`` of one segment copy's ``.log``,
  keyed by the copy's id (never reused, so an entry is never stale); remote storage that
  can map its files (a local directory) gives the file's pages themselves, so records go
  from the page cache to the client's socket uncopied and count against the bound all the
  same;
- memory is an LRU bounded by the total bytes held (cachetools ``LRUCache`` sized by
  ``len``); evicted chunks go back to remote storage that can read later GETs into them
  (S3's lean GET: no new buffer to zero-fill, :class:`storage.rsm.s3_ranged_get.SpareBodies`);
- single flight (:mod:`storage.single_flight`): concurrent misses for one chunk share one
  GET; a GET whose callers all gave up (a purgatory timeout) still completes and warms the
  cache;
- sequential read-ahead: a read of chunk ``i`` that follows chunk ``i - 1`` (or starts
  the segment) also loads the following chunks in the background, each with its own
  ranged GET, in parallel and nearest first, so a catch-up consumer finds its next fetch
  in memory. How many follows the GETs' measured time (a moving average of the GETs so
  far, first byte to last) and the reader's rate since its read before: twice the
  bandwidth-delay product, between ``prefetch_chunks`` and the bounds of
  :mod:`storage.read_ahead` (which says why). With slow object storage (tens of
  milliseconds to the first byte) a fast reader keeps many GETs in flight; a slow one no
  more than ``prefetch_chunks``. Chunks read ahead never reach past the segment's end, and
  only a read starts them: a reader that stopped has no more read for it. At most
  ``max_prefetch_inflight`` prefetches run at once (by default one reader's deepest
  read-ahead), so read-ahead never takes every connection from reads someone waits for;
- read-ahead memory apart from the cache's: a chunk read ahead waits in its own LRU,
  bounded by ``read_ahead_max_bytes`` together with the read-ahead GETs in flight, and
  enters the cache when a reader first reads it. So read-ahead evicts nothing from the
  cache (not the chunk a reader is in, not chunks readers behind it will read), and the
  cache's LRU never drops a chunk read ahead before its reader gets to it. When the budget
  is full, a new read-ahead drops only chunks of readers that stopped: chunks no read has
  wanted for :data:`_STOPPED_READER_SECONDS` (each read wants its reader's chunks again),
  least recently wanted first. A chunk a reader still wants is never dropped, for another
  reader or for a farther chunk of its own (readers that share the budget would otherwise
  drop each other's chunks and read them twice); the GET that needed the room is not made,
  and the next read plans it again. Memory is ``max_bytes`` plus ``read_ahead_max_bytes``;
- an optional disk tier: every chunk loaded from remote storage is also written to a
  directory (atomically and fsynced, :mod:`storage.durable` says why), bounded by
  ``disk_max_bytes``, so a restarted proxy and chunks
  evicted from memory are served without a GET.

The counters are plain ints; the proxy exports them (storage never imports Prometheus). The
profiles behind these rules: ``docs/decisions/0009-remote-read-path.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from cachetools import LRUCache

from protocol.buffers import Buffers
from storage.durable import write_atomically
from storage.model import RemoteLogSegmentMetadata
from storage.read_ahead import ReadAheadBounds, read_ahead_chunks
from storage.rsm.base import RemoteStorageManager
from storage.single_flight import SingleFlight

__all__ = ["DEFAULT_CHUNK_BYTES", "DEFAULT_READ_AHEAD_MAX_BYTES", "ChunkCache"]

DEFAULT_CHUNK_BYTES: Final = 4 * 1024 * 1024
"""Four default fetches (``max.partition.fetch.bytes`` = 1 MiB) per GET; small enough that
a miss for a random read does not cost much more than the read itself."""
DEFAULT_READ_AHEAD_MAX_BYTES: Final = 64 * 1024 * 1024
"""One reader's deepest read-ahead (:data:`storage.read_ahead.MAX_READ_AHEAD_BYTES`): at
50 ms to the first byte, twice the bandwidth-delay product of 500 MiB/s, which is about
what one proxy serves in all; readers that share it share that rate."""
_GET_SECONDS_WEIGHT: Final = 0.2
"""Weight of the newest GET in the moving average of GET durations."""
_RECENT_READS: Final = 4096
"""Chunks remembered as recently read, to tell sequential readers from random ones; a
few thousand covers every concurrent catch-up consumer a proxy serves."""
_STOPPED_READER_SECONDS: Final = 5.0
"""A reader that has not wanted its chunks read ahead for this long has stopped (or reads
elsewhere): its chunks may make room for other readers' read-ahead. Catch-up consumers
fetch many times a second; a consumer's ``fetch.max.wait.ms`` is 500 ms by default."""
_RATE_LOOKBACK: Final = 16
"""Chunks looked back for the read before a reader's latest: one read spans a fetch's
worth, three 4 MiB chunks for an 8 MiB fetch, 16 for a fetch of 60 MiB."""

_SUFFIX: Final = ".chunk"

_Key = tuple[int, int]
"""A chunk: its segment copy's id as an int (see :func:`_segment`), and its index."""


def _segment(metadata: RemoteLogSegmentMetadata) -> int:
    """The segment copy's id as the chunk keys hold it: an int, whose hash is the
    interpreter's own. ``uuid.UUID`` hashes and compares in Python code, and the read-ahead's
    bookkeeping hashes the keys dozens of times per read."""
    return metadata.segment_id.id.int


_K = TypeVar("_K")
_V = TypeVar("_V")


class _RecentLRU(Generic[_K, _V]):
    """A bounded map, least recently used out first, over an ``OrderedDict``: its lookups
    are two C calls, where cachetools' ``LRUCache.get`` runs four Python frames (the
    read-ahead's bookkeeping looks up dozens of keys per read)."""

    __slots__ = ("_entries", "_maxsize")

    def __init__(self, maxsize: int) -> None:
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._maxsize = maxsize

    def get(self, key: _K) -> _V | None:
        """The value of ``key``, now the most recently used; ``None`` if absent."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def __setitem__(self, key: _K, value: _V) -> None:
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        if len(entries) > self._maxsize:
            entries.popitem(last=False)


class _Read(NamedTuple):
    """A read of chunks ``first`` to ``last`` of a segment: when it was asked for and when
    its chunks were all there (``clock``)."""

    segment: int
    first: int
    last: int
    asked: float
    answered: float


_Chunk = bytes | bytearray | memoryview
"""A chunk as remote storage returned it (S3 reads in place, into a bytearray; a local
directory maps its file, a memoryview); never changed."""


@runtime_checkable
class _Recycles(Protocol):
    """Remote storage that reads later answers into the buffers of earlier ones
    (:meth:`storage.rsm.s3.S3RemoteStorage.recycle`)."""

    def recycle(self, data: bytes | bytearray) -> None: ...


@runtime_checkable
class _Maps(Protocol):
    """Remote storage that hands out its files' pages themselves, uncopied
    (:meth:`storage.rsm.local.LocalRemoteStorage.map_log_segment`)."""

    async def map_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview: ...

    def unmap(self, view: memoryview) -> None: ...


class _SizedLRU(LRUCache[_Key, _Chunk]):
    """An LRU of chunk bytes that reports the chunks it evicts."""

    def __init__(self, max_bytes: int, on_evict: Callable[[_Chunk], None]) -> None:
        super().__init__(max_bytes, len)
        self._on_evict = on_evict

    def popitem(self) -> tuple[_Key, _Chunk]:
        key, value = super().popitem()
        self._on_evict(value)
        return key, value


class _ReadAhead:
    """Chunks read ahead and not read yet, least recently wanted first, their bytes and
    when each was last wanted (``clock``)."""

    def __init__(
        self, max_bytes: int, on_drop: Callable[[_Chunk], None], clock: Callable[[], float]
    ) -> None:
        self.maxsize = max_bytes
        self.currsize = 0
        self._chunks: OrderedDict[_Key, _Chunk] = OrderedDict()
        self._wanted_at: dict[_Key, float] = {}
        self._on_drop = on_drop
        self._clock = clock

    def __contains__(self, key: _Key) -> bool:
        return key in self._chunks

    def __len__(self) -> int:
        return len(self._chunks)

    def put(self, key: _Key, data: _Chunk) -> None:
        """Hold ``data``, the most recently wanted (the caller keeps within ``maxsize``)."""
        self.pop(key)
        self._chunks[key] = data
        self._wanted_at[key] = self._clock()
        self.currsize += len(data)

    def pop(self, key: _Key) -> _Chunk | None:
        data = self._chunks.pop(key, None)
        if data is not None:
            self.currsize -= len(data)
            del self._wanted_at[key]
        return data

    def want(self, key: _Key) -> bool:
        """Make ``key`` the most recently wanted; whether it is held."""
        if key not in self._chunks:
            return False
        self._chunks.move_to_end(key)
        self._wanted_at[key] = self._clock()
        return True

    def oldest_stopped(self, stopped_seconds: float) -> _Key | None:
        """The least recently wanted chunk if no read has wanted it for ``stopped_seconds``."""
        oldest = next(iter(self._chunks), None)
        if oldest is None or self._wanted_at[oldest] > self._clock() - stopped_seconds:
            return None
        return oldest

    def drop_oldest(self) -> None:
        key = next(iter(self._chunks))
        data = self.pop(key)
        assert data is not None
        self._on_drop(data)


class _DiskIndex(LRUCache[_Key, int]):
    """Sizes of the chunk files on disk, LRU; evicting a key deletes its file."""

    def __init__(self, max_bytes: int, remove: Callable[[_Key], None]) -> None:
        super().__init__(max_bytes, lambda size: size)
        self._remove = remove

    def popitem(self) -> tuple[_Key, int]:
        key, size = super().popitem()
        self._remove(key)
        return key, size


class ChunkCache:
    """Byte ranges of remote segments, read through aligned chunks held in memory."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        *,
        max_bytes: int,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        prefetch_chunks: int = 0,
        read_ahead_max_bytes: int = DEFAULT_READ_AHEAD_MAX_BYTES,
        max_prefetch_inflight: int | None = None,
        disk_dir: str | os.PathLike[str] | None = None,
        disk_max_bytes: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create an empty cache (the disk tier, if any, keeps what an earlier run left).

        :param max_bytes: memory bound of the chunks read; chunks larger than it are served
            but not kept.
        :param prefetch_chunks: chunks read ahead of a sequential reader at least (0 turns
            read-ahead off).
        :param read_ahead_max_bytes: memory bound of the chunks read ahead and not read yet
            and of the read-ahead GETs in flight, across readers, apart from ``max_bytes``
            (at least ``prefetch_chunks`` chunks).
        :param max_prefetch_inflight: read-ahead GETs at once, across readers; by default
            as many as one reader's deepest read-ahead.
        :param disk_dir: directory of the disk tier; files of another chunk size are
            ignored (they live in a sibling directory named for their chunk size).
        :raises ValueError: for a chunk size below one byte or negative bounds.
        """
        if (
            chunk_bytes < 1
            or min(max_bytes, prefetch_chunks, disk_max_bytes, read_ahead_max_bytes) < 0
        ):
            raise ValueError("chunk_bytes must be positive and the bounds not negative")
        self._rsm = rsm
        self._recycle = rsm.recycle if isinstance(rsm, _Recycles) else None
        self._fetch = rsm.map_log_segment if isinstance(rsm, _Maps) else rsm.fetch_log_segment
        self._unmap = rsm.unmap if isinstance(rsm, _Maps) else None
        self.chunk_bytes = chunk_bytes
        self._bounds = ReadAheadBounds.for_budget(
            prefetch_chunks=prefetch_chunks,
            budget_bytes=read_ahead_max_bytes,
            chunk_bytes=chunk_bytes,
        )
        self._prefetch_slots = max(
            1, self._bounds.maximum if max_prefetch_inflight is None else max_prefetch_inflight
        )
        self._memory = _SizedLRU(max_bytes, self._evicted)
        self._ahead = _ReadAhead(
            max(read_ahead_max_bytes, prefetch_chunks * chunk_bytes), self._evicted, clock
        )
        """Chunks read ahead and not read yet (see the module docstring)."""
        self._loads: SingleFlight[_Key, _Chunk] = SingleFlight("chunk")
        self._prefetching: set[_Key] = set()
        self._recent: _RecentLRU[_Key, _Read] = _RecentLRU(_RECENT_READS)
        """The read that first read each recently read chunk."""
        self._follows: _RecentLRU[int, _Key] = _RecentLRU(_RECENT_READS)
        """The last chunk of the segment read before a segment (the remote reader says which,
        :meth:`prefetch`): a reader's rate carries over into the next segment."""
        self._clock = clock
        self._get_seconds: float | None = None
        """Moving average of how long a GET of one chunk takes."""
        self._last_pace: float | None = None
        """Seconds per chunk of the sequential reader measured last."""
        self._background: set[asyncio.Task[None]] = set()
        self._dir: Path | None = None
        self._disk: _DiskIndex | None = None
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.prefetches = 0
        """Chunks loaded by read-ahead (counted when the load starts)."""
        self.disk_hits = 0
        """Chunks a miss found in the disk tier instead of remote storage."""
        self.gets = 0
        """Ranged GETs of remote storage (a miss that joins a load in flight, or finds the
        chunk on disk, costs none)."""
        if disk_dir is not None and disk_max_bytes > 0:
            self._dir = Path(disk_dir, f"chunks-{chunk_bytes}")
            self._dir.mkdir(parents=True, exist_ok=True)
            self._disk = _DiskIndex(disk_max_bytes, self._remove_file)
            self._load_disk_index(self._dir, self._disk)

    @property
    def size_bytes(self) -> int:
        """Bytes of chunks currently held in memory (read, and read ahead)."""
        return int(self._memory.currsize + self._ahead.currsize)

    def __len__(self) -> int:
        return len(self._memory) + len(self._ahead)

    async def read(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview | Buffers:
        """Bytes ``[start, end)`` of the segment's ``.log``, through the cache.

        ``end`` is capped at the segment's size; fewer bytes come back if the object is
        shorter than its metadata says. The chunks of one read load in parallel. Nothing is
        copied (the records go to the client's socket from the chunks): a read within one
        chunk is a view of it, a read across chunks the views of each chunk's part, in
        order (:class:`~protocol.buffers.Buffers`).

        :raises ValueError: for a negative ``start`` or ``end < start`` (caller's bug).
        :raises RemoteResourceNotFoundError: when the segment is gone from remote storage.
        :raises RemoteStorageError: for other storage failures (nothing is cached).
        """
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")
        end = min(end, metadata.segment_size_in_bytes)
        if start >= end:
            return memoryview(b"")
        size = self.chunk_bytes
        first, last = start // size, (end - 1) // size
        segment = _segment(metadata)
        asked = self._clock()
        if first == last:
            chunks = [await self._chunk(metadata, first)]
        else:
            chunks = await asyncio.gather(
                *(self._chunk(metadata, index) for index in range(first, last + 1))
            )
        self._after_read(metadata, _Read(segment, first, last, asked, self._clock()))
        parts: list[memoryview] = []
        for index, chunk in zip(range(first, last + 1), chunks, strict=True):
            base = index * size
            part = memoryview(chunk)[max(start - base, 0) : end - base]
            if part:
                parts.append(part)
            if len(chunk) < size:
                break  # the object ends here
        return Buffers.of(tuple(parts))

    def prefetch(
        self,
        metadata: RemoteLogSegmentMetadata,
        position: int,
        size_bytes: int = 0,
        *,
        after: RemoteLogSegmentMetadata | None = None,
    ) -> None:
        """Load the chunks covering ``size_bytes`` from ``position`` in the background: at
        least one, at most the read-ahead's bound (a chunk more would only be evicted unread
        by a small cache).

        The remote reader calls this for the next segment when a reader's read-ahead
        (:meth:`read_ahead_bytes`) reaches past the end of one, so a catch-up consumer
        crosses segment boundaries without a cold GET, however small the segments. ``after``
        is the segment a reader reads before this one: its first chunk's read-ahead is then
        sized from the reader's rate at the end of ``after``, not from the minimum.
        """
        if after is not None:
            last = (after.segment_size_in_bytes - 1) // self.chunk_bytes
            self._follows[_segment(metadata)] = (_segment(after), last)
        first = position // self.chunk_bytes
        count = max(1, -(-size_bytes // self.chunk_bytes))
        wanted = range(first, first + min(count, max(1, self._bounds.maximum)))
        self._touch_ahead(_segment(metadata), wanted)
        for index in wanted:
            self._start_prefetch(metadata, index)

    def read_ahead_bytes(self, metadata: RemoteLogSegmentMetadata, position: int) -> int:
        """Bytes read ahead of a sequential reader at ``position`` of the segment, at the
        rate it read its last chunk (see the module docstring); 0 with read-ahead off."""
        index = max(position - 1, 0) // self.chunk_bytes  # the chunk of its last byte
        seconds = self._seconds_per_chunk((_segment(metadata), index))
        return self._read_ahead(seconds, index=index) * self.chunk_bytes

    async def close(self) -> None:
        """Cancel loads still in flight, and let disk-tier writes already started finish."""
        await self._loads.close()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------

    async def _chunk(self, metadata: RemoteLogSegmentMetadata, index: int) -> _Chunk:
        key = (_segment(metadata), index)
        data = self._memory.get(key)
        if data is None:
            data = self._admit(key)
        if data is not None:
            self.hits += 1
            return data
        self.misses += 1
        data = await self._loads.get(key, lambda: self._load(metadata, key))
        self._admit(key)  # read ahead, joined while in flight
        return data

    def _after_read(self, metadata: RemoteLogSegmentMetadata, read: _Read) -> None:
        segment, first, last = read.segment, read.first, read.last
        previous = self._recent.get(self._before(segment, first))
        sequential = first == 0 or previous is not None
        for index in range(first, last + 1):
            self._stamp((segment, index), read)
        if not sequential or not self._bounds.minimum:
            return
        ahead = self._read_ahead(self._seconds_per_chunk((segment, last)), index=last)
        following = range(last + 1, last + 1 + ahead)
        self._touch_ahead(segment, following)
        for index in following:
            self._start_prefetch(metadata, index)

    def _stamp(self, key: _Key, read: _Read) -> None:
        """Remember ``read`` as the read that reached chunk ``key``, unless a read of this
        pass over the chunk already did (the pace counts from a reader's first read of a
        chunk: later reads within it are the reader's time in it). A read stamped before
        the chunk before it was last reached is of an earlier pass (a consumer reading
        the range again, the range's first chunk always): this read starts a new one."""
        stamped = self._recent.get(key)
        before = self._recent.get(self._before(*key))
        if stamped is None or before is None or stamped.answered < before.asked:
            self._recent[key] = read

    def _touch_ahead(self, segment: int, following: range) -> None:
        """Mark a reader's chunks read ahead as wanted now: a reader still reading keeps
        them (:meth:`_room_ahead`); those of one that stopped are dropped nearest last."""
        for index in reversed(following):
            self._ahead.want((segment, index))

    def _admit(self, key: _Key) -> _Chunk | None:
        """Move chunk ``key`` from the read-ahead memory into the cache, now that it is read."""
        data = self._ahead.pop(key)
        if data is not None and len(data) <= self._memory.maxsize:
            self._memory[key] = data
        return data

    def _before(self, segment: int, index: int) -> _Key:
        """The chunk a sequential reader reads before chunk ``index`` of ``segment``."""
        if index > 0:
            return (segment, index - 1)
        return self._follows.get(segment) or (segment, -1)

    def _seconds_per_chunk(self, key: _Key) -> float | None:
        """How long the reader of chunk ``key`` took per chunk to get there, not counting
        its waits for chunks (``None``: its read before not seen).

        That is the time from the answer of the read before to the read that reached
        ``key`` being asked, shared by the chunks it advanced (a read of several chunks
        stamps them all: a reader of whole 2-chunk segments takes half the time between
        its reads per chunk, not none for its second chunk). Its waits are left out because
        they measure the read-ahead, not the reader: a reader held back by too shallow a
        read-ahead would otherwise size the next one from the rate that read-ahead allowed.
        """
        reached = self._recent.get(key)
        if reached is None:
            return None
        before = key
        for advanced in range(1, _RATE_LOOKBACK + 1):
            before = self._before(*before)
            earlier = self._recent.get(before)
            if earlier is None:
                return None
            if earlier is not reached:
                return max(reached.asked - earlier.answered, 0.0) / advanced
        return None

    def _read_ahead(self, seconds_per_chunk: float | None, *, index: int) -> int:
        """Chunks to read ahead of a sequential reader in chunk ``index`` of a segment that
        took ``seconds_per_chunk`` for its last chunk (``None``: not known yet). A reader
        not measured yet in a segment's first chunk, where catch-up consumers start, reads
        ahead at the pace last measured of any reader: it most likely reads as the last one
        did, so its first GETs are as deep as its later ones. Elsewhere (a random read
        looks like one), and before any reader is measured, the minimum."""
        if seconds_per_chunk is not None:
            self._last_pace = seconds_per_chunk
        elif index == 0:
            seconds_per_chunk = self._last_pace
        return read_ahead_chunks(
            self._bounds, get_seconds=self._get_seconds, seconds_per_chunk=seconds_per_chunk
        )

    def _start_prefetch(self, metadata: RemoteLogSegmentMetadata, index: int) -> None:
        if index * self.chunk_bytes >= metadata.segment_size_in_bytes:
            return
        key = (_segment(metadata), index)
        if key in self._memory or key in self._ahead or key in self._loads:
            return
        if len(self._prefetching) >= self._prefetch_slots or not self._room_ahead(key):
            return
        self.prefetches += 1
        self._prefetching.add(key)
        task = self._loads.start(key, lambda: self._load(metadata, key, ahead=True))
        task.add_done_callback(lambda _done: self._prefetching.discard(key))

    def _room_ahead(self, key: _Key) -> bool:
        """Whether a read-ahead GET of ``key`` fits the read-ahead budget with those in
        flight and the chunks read ahead, after dropping chunks of readers that stopped
        (never one a reader still wants, see the module docstring)."""
        budget, reserved = self._ahead.maxsize, (len(self._prefetching) + 1) * self.chunk_bytes
        while reserved + self._ahead.currsize > budget:
            oldest = self._ahead.oldest_stopped(_STOPPED_READER_SECONDS)
            if oldest is None:
                return False
            self._ahead.drop_oldest()
        return True

    async def _load(
        self, metadata: RemoteLogSegmentMetadata, key: _Key, *, ahead: bool = False
    ) -> _Chunk:
        data: _Chunk | None = await self._read_disk(key)
        if data is None:
            start = key[1] * self.chunk_bytes
            end = min(start + self.chunk_bytes, metadata.segment_size_in_bytes)
            self.gets += 1
            began = self._clock()
            data = await self._fetch(metadata, start, end)
            self._timed_get(self._clock() - began)
            self._write_disk(key, data)
        else:
            self.disk_hits += 1
        if ahead:
            if len(data) <= self._ahead.maxsize:
                self._ahead.put(key, data)
        elif len(data) <= self._memory.maxsize:
            self._memory[key] = data
        return data

    def _timed_get(self, seconds: float) -> None:
        average = self._get_seconds
        self._get_seconds = (
            seconds if average is None else average + _GET_SECONDS_WEIGHT * (seconds - average)
        )

    def _evicted(self, data: _Chunk) -> None:
        self.evictions += 1
        if isinstance(data, memoryview):
            if self._unmap is not None:
                self._unmap(data)
        elif self._recycle is not None:
            self._recycle(data)

    # -- disk tier ------------------------------------------------------------------------

    def _path(self, key: _Key) -> Path:
        assert self._dir is not None
        return self._dir / f"{uuid.UUID(int=key[0])}-{key[1]}{_SUFFIX}"

    async def _read_disk(self, key: _Key) -> bytes | None:
        if self._disk is None or self._disk.get(key) is None:
            return None
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            self._disk.pop(key, None)
            return None

    def _write_disk(self, key: _Key, data: _Chunk) -> None:
        if self._disk is None or len(data) > self._disk.maxsize or key in self._disk:
            return
        path = self._path(key)
        task = asyncio.create_task(self._store(key, path, data), name=f"chunk-store-{path.stem}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _store(self, key: _Key, path: Path, data: _Chunk) -> None:
        assert self._disk is not None
        try:
            await asyncio.to_thread(write_atomically, path, data)
        except OSError:
            return  # a full or failing disk only costs the disk tier, never a read
        self._disk[key] = len(data)

    def _remove_file(self, key: _Key) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    @staticmethod
    def _load_disk_index(directory: Path, disk: _DiskIndex) -> None:
        """Register what an earlier run left, oldest first; drop leftovers of torn writes."""
        found = []
        for path in directory.iterdir():
            if path.suffix != _SUFFIX:
                path.unlink()
                continue
            segment, _, index = path.stem.rpartition("-")
            try:
                key = (uuid.UUID(segment).int, int(index))
            except ValueError:
                path.unlink()
                continue
            stat = path.stat()
            if stat.st_size > disk.maxsize:
                path.unlink()
                continue
            found.append((stat.st_mtime, key, stat.st_size))
        for _mtime, key, size in sorted(found):
            disk[key] = size
