"""ChunkCache against a fake storage manager: ranges, LRU by bytes, single flight,
read-ahead, disk tier, errors."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.buffers import Buffers
from storage.chunk_cache import ChunkCache, _RecentLRU
from storage.model import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.local import LocalRemoteStorage
from tests.fakes.segments import segment_data, segment_metadata
from tests.fakes.synthetic_storage import SyntheticStorage, log_content

TP = TopicIdPartition(topic_id=uuid.uuid4(), topic="t", partition=0)


def segment(size: int) -> RemoteLogSegmentMetadata:
    return segment_metadata(TP, size=size, end_offset=99)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 500),
    chunk=st.integers(1, 64),
    ranges=st.lists(st.tuples(st.integers(0, 520), st.integers(0, 80)), min_size=1, max_size=6),
)
def test_any_range_reads_the_same_bytes_as_the_object(
    size: int, chunk: int, ranges: list[tuple[int, int]]
) -> None:
    async def run() -> None:
        meta = segment(size)
        cache = ChunkCache(SyntheticStorage(), max_bytes=3 * chunk, chunk_bytes=chunk)
        for start, length in ranges:
            got = await cache.read(meta, start, start + length)
            assert bytes(got) == log_content(meta)[start : start + length]
        assert cache.size_bytes <= 3 * chunk

    asyncio.run(run())


def test_chunks_of_a_local_directory_are_its_pages_and_read_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The local directory maps its files (no copy); chunk sizes off page boundaries too."""
    root = tmp_path_factory.mktemp("local-tier")
    size = 3 * 4096 + 123
    meta = segment(size)
    log = os.urandom(size)
    with asyncio.Runner() as runner:
        storage = LocalRemoteStorage(root)
        runner.run(storage.copy_log_segment(meta, segment_data(log)))

        @settings(max_examples=80, deadline=None)
        @given(
            chunk=st.sampled_from([1000, 4096, 5000, 8192]),
            ranges=st.lists(
                st.tuples(st.integers(0, size + 10), st.integers(0, 9000)), min_size=1, max_size=6
            ),
        )
        def check(chunk: int, ranges: list[tuple[int, int]]) -> None:
            cache = ChunkCache(storage, max_bytes=3 * chunk, chunk_bytes=chunk)
            for start, length in ranges:
                got = runner.run(cache.read(meta, start, start + length))
                assert bytes(got) == log[start : start + length]
                parts = got.parts if isinstance(got, Buffers) else (got,)
                assert all(isinstance(part, memoryview) and part.readonly for part in parts)
            assert cache.size_bytes <= 3 * chunk

        check()


class UnmapRecordingStorage(LocalRemoteStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.unmapped: list[bytes] = []

    def unmap(self, view: memoryview) -> None:
        self.unmapped.append(view.tobytes())
        super().unmap(view)


async def test_evicted_chunks_of_a_local_directory_go_back_to_be_unmapped(
    tmp_path: Path,
) -> None:
    meta = segment(3 * 4096)
    log = os.urandom(meta.segment_size_in_bytes)
    storage = UnmapRecordingStorage(tmp_path)
    await storage.copy_log_segment(meta, segment_data(log))
    cache = ChunkCache(storage, max_bytes=4096, chunk_bytes=4096, prefetch_chunks=0)
    for index in range(3):
        assert (
            bytes(await cache.read(meta, index * 4096, (index + 1) * 4096))
            == log[index * 4096 : (index + 1) * 4096]
        )
    assert storage.unmapped == [log[:4096], log[4096:8192]]


async def test_chunks_are_aligned_and_read_once() -> None:
    storage = SyntheticStorage()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=32)
    assert bytes(await cache.read(meta, 10, 40)) == log_content(meta)[10:40]
    assert bytes(await cache.read(meta, 0, 64)) == log_content(meta)[0:64]
    assert sorted((s, e) for _, s, e in storage.gets) == [(0, 32), (32, 64)]
    assert (cache.hits, cache.misses) == (2, 2)
    assert bytes(await cache.read(meta, 90, 500)) == log_content(meta)[90:100]
    assert storage.gets[-1][1:] == (96, 100)


async def test_lru_by_bytes_evicts_least_recently_used() -> None:
    storage = SyntheticStorage()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=64, chunk_bytes=32)
    await cache.read(meta, 0, 1)
    await cache.read(meta, 32, 33)
    await cache.read(meta, 0, 1)  # chunk 0 is now the most recent
    await cache.read(meta, 64, 65)
    assert cache.evictions == 1
    assert cache.size_bytes == 64
    gets = len(storage.gets)
    await cache.read(meta, 0, 1)
    assert len(storage.gets) == gets
    await cache.read(meta, 32, 33)
    assert len(storage.gets) == gets + 1


async def test_concurrent_readers_share_one_get() -> None:
    storage = SyntheticStorage()
    storage.gate = asyncio.Event()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=100)
    readers = [asyncio.create_task(cache.read(meta, i, i + 10)) for i in range(5)]
    await settle()
    storage.gate.set()
    results = await asyncio.gather(*readers)
    assert [bytes(r) for r in results] == [log_content(meta)[i : i + 10] for i in range(5)]
    assert len(storage.gets) == 1


async def test_a_cancelled_reader_does_not_cancel_the_get() -> None:
    storage = SyntheticStorage()
    storage.gate = asyncio.Event()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=100)
    reader = asyncio.create_task(cache.read(meta, 0, 10))
    await settle()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    storage.gate.set()
    await settle()
    assert len(cache) == 1
    assert bytes(await cache.read(meta, 0, 10)) == log_content(meta)[:10]
    assert len(storage.gets) == 1


async def test_errors_reach_every_waiter_and_are_not_cached() -> None:
    storage = SyntheticStorage()
    storage.gate = asyncio.Event()
    storage.error = RemoteStorageError("down", retriable=True)
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=100)
    readers = [asyncio.create_task(cache.read(meta, 0, 10)) for _ in range(3)]
    await settle()
    storage.gate.set()
    results = await asyncio.gather(*readers, return_exceptions=True)
    assert all(isinstance(r, RemoteStorageError) for r in results)
    storage.error = None
    assert bytes(await cache.read(meta, 0, 10)) == log_content(meta)[:10]
    assert len(storage.gets) == 2


async def test_a_missing_segment_raises_not_found() -> None:
    storage = SyntheticStorage()
    storage.error = RemoteResourceNotFoundError("gone")
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=100)
    with pytest.raises(RemoteResourceNotFoundError):
        await cache.read(segment(100), 0, 10)


async def test_a_short_object_ends_the_read() -> None:
    storage = SyntheticStorage()
    storage.truncate_to = 40
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=32)
    assert bytes(await cache.read(meta, 20, 90)) == log_content(meta)[20:40]


async def test_invalid_ranges_are_refused() -> None:
    cache = ChunkCache(SyntheticStorage(), max_bytes=1000, chunk_bytes=32)
    with pytest.raises(ValueError, match="invalid range"):
        await cache.read(segment(100), -1, 10)
    with pytest.raises(ValueError, match="invalid range"):
        await cache.read(segment(100), 10, 9)
    assert not await cache.read(segment(100), 100, 200)
    with pytest.raises(ValueError, match="positive"):
        ChunkCache(SyntheticStorage(), max_bytes=10, chunk_bytes=0)


async def test_sequential_reads_prefetch_the_next_chunks() -> None:
    storage = SyntheticStorage()
    meta = segment(320)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=32, prefetch_chunks=2)
    await cache.read(meta, 0, 10)
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32, 64]
    assert cache.prefetches == 2
    await cache.read(meta, 32, 40)
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32, 64, 96]
    assert cache.hits == 1


async def test_random_reads_do_not_prefetch() -> None:
    storage = SyntheticStorage()
    meta = segment(320)
    cache = ChunkCache(storage, max_bytes=1000, chunk_bytes=32, prefetch_chunks=2)
    await cache.read(meta, 200, 210)
    await settle()
    assert [s for _, s, _ in storage.gets] == [192]
    assert cache.prefetches == 0


async def test_prefetch_is_bounded_and_stops_at_the_segment_end() -> None:
    storage = SyntheticStorage()
    storage.gate = asyncio.Event()
    meta = segment(96)
    cache = ChunkCache(
        storage, max_bytes=1000, chunk_bytes=32, prefetch_chunks=5, max_prefetch_inflight=1
    )
    cache.prefetch(meta, 0)
    await settle()
    assert [s for _, s, _ in storage.gets] == [0]
    storage.gate.set()
    await settle()
    cache.prefetch(meta, 40)
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32]
    await settle()
    cache.prefetch(meta, 64)
    cache.prefetch(meta, 96)
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32, 64]
    await cache.close()


async def test_disk_tier_serves_evicted_chunks_and_survives_restarts(tmp_path: Path) -> None:
    storage = SyntheticStorage()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=32, chunk_bytes=32, disk_dir=tmp_path, disk_max_bytes=64)
    await cache.read(meta, 0, 10)
    await cache.read(meta, 32, 40)
    await settle()
    await cache.close()
    files = sorted(p.name for p in (tmp_path / "chunks-32").iterdir())
    assert files == [f"{meta.segment_id.id}-0.chunk", f"{meta.segment_id.id}-1.chunk"]
    gets = len(storage.gets)
    assert bytes(await cache.read(meta, 0, 10)) == log_content(meta)[:10]
    assert cache.disk_hits == 1
    assert len(storage.gets) == gets

    (tmp_path / "chunks-32" / "leftover.chunk.ab.tmp").write_bytes(b"x")
    (tmp_path / "chunks-32" / "garbage.chunk").write_bytes(b"x")
    restarted = ChunkCache(
        storage, max_bytes=32, chunk_bytes=32, disk_dir=tmp_path, disk_max_bytes=64
    )
    assert bytes(await restarted.read(meta, 32, 40)) == log_content(meta)[32:40]
    assert restarted.disk_hits == 1
    assert len(storage.gets) == gets
    assert sorted(p.name for p in (tmp_path / "chunks-32").iterdir()) == files
    await restarted.read(meta, 64, 70)
    await settle()
    await restarted.close()
    assert len(list((tmp_path / "chunks-32").iterdir())) == 2


class TimedStorage(SyntheticStorage):
    """A SyntheticStorage whose every GET takes ``get_seconds`` on a fake clock."""

    def __init__(self, get_seconds: float) -> None:
        super().__init__()
        self.now = 0.0
        self.get_seconds = get_seconds

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        self.now += self.get_seconds
        return await super().fetch_log_segment(metadata, start, end)


def timed_cache(storage: TimedStorage, *, max_bytes: int) -> ChunkCache:
    """32-byte chunks, read-ahead of 1 chunk at least, on the storage's fake clock."""
    return ChunkCache(
        storage,
        max_bytes=max_bytes,
        chunk_bytes=32,
        prefetch_chunks=1,
        max_prefetch_inflight=16,
        clock=lambda: storage.now,
    )


async def test_read_ahead_covers_twice_a_gets_time_at_the_readers_rate() -> None:
    storage = TimedStorage(get_seconds=1.0)
    meta = segment(32 * 40)
    cache = timed_cache(storage, max_bytes=100_000)
    await cache.read(meta, 0, 10)  # rate unknown: prefetch_chunks
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32]
    storage.now = 10.0
    await cache.read(meta, 32, 40)  # 9 s per chunk: a GET's time is covered by one chunk
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [0, 32, 64]
    storage.now = 10.25
    await cache.read(meta, 64, 70)  # 0.25 s per chunk, 1 s per GET: 8 chunks ahead
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [32 * i for i in range(11)]


async def test_read_ahead_stays_within_its_budget_whatever_the_cache() -> None:
    storage = TimedStorage(get_seconds=1.0)
    meta = segment(32 * 40)
    cache = ChunkCache(
        storage,
        max_bytes=32 * 2,
        chunk_bytes=32,
        prefetch_chunks=1,
        read_ahead_max_bytes=32 * 5,
        clock=lambda: storage.now,
    )
    await cache.read(meta, 0, 10)
    await settle()
    storage.now = 100.0
    await cache.read(meta, 32, 40)
    await settle()
    storage.now = 100.01  # a very fast reader
    await cache.read(meta, 64, 70)
    await settle()
    assert max(s for _, s, _ in storage.gets) == 32 * (2 + 5)
    assert cache.size_bytes <= 32 * (2 + 5)


async def test_read_ahead_evicts_no_chunk_from_the_cache() -> None:
    """A reader reads a segment again after another's deep read-ahead: still cached."""
    storage = SyntheticStorage()
    meta, other = segment(32 * 2), segment(32 * 20)
    cache = ChunkCache(
        storage, max_bytes=32 * 3, chunk_bytes=32, prefetch_chunks=8, read_ahead_max_bytes=32 * 8
    )
    await cache.read(meta, 0, 64)
    await cache.read(other, 0, 10)
    await settle()
    assert len(storage.gets) == 2 + 9
    assert bytes(await cache.read(meta, 0, 64)) == log_content(meta)
    assert len(storage.gets) == 2 + 9


async def test_readers_still_reading_never_drop_each_others_chunks_read_ahead() -> None:
    """Two readers share a budget of 5 chunks, 3 read ahead of each: the second reader's
    third chunk does not fit and is not read ahead (nothing of the first's is dropped for
    it); reading both segments through, every chunk is read from storage once."""
    storage = SyntheticStorage()
    first, second = segment(32 * 10), segment(32 * 10)
    cache = ChunkCache(
        storage, max_bytes=32 * 4, chunk_bytes=32, prefetch_chunks=3, read_ahead_max_bytes=32 * 5
    )
    await cache.read(first, 0, 10)
    await settle()
    await cache.read(second, 0, 10)
    await settle()
    assert cache.prefetches == 3 + 2
    for start in range(32, 32 * 10, 32):
        for meta in (first, second):
            assert (
                bytes(await cache.read(meta, start, start + 32)) == log_content(meta)[start:][:32]
            )
            await settle()
            assert cache.size_bytes <= 32 * (4 + 5)
    assert len(storage.gets) == len(set(storage.gets)) == 20


async def test_a_stopped_readers_chunks_make_room_for_another_readers_read_ahead() -> None:
    """Chunks no read has wanted for five seconds are a stopped reader's: a full budget
    drops them, least recently wanted first, for a reader still reading."""
    storage, now = SyntheticStorage(), [0.0]
    first, second = segment(32 * 10), segment(32 * 10)
    cache = ChunkCache(
        storage,
        max_bytes=32 * 4,
        chunk_bytes=32,
        prefetch_chunks=3,
        read_ahead_max_bytes=32 * 5,
        clock=lambda: now[0],
    )
    await cache.read(first, 0, 10)
    await settle()
    now[0] = 5.1
    await cache.read(second, 0, 10)
    await settle()
    assert cache.prefetches == 3 + 3
    assert cache.evictions == 1
    assert bytes(await cache.read(second, 32 * 3, 32 * 4)) == log_content(second)[32 * 3 : 32 * 4]
    assert cache.misses == 2  # the first chunk of each segment only


async def test_read_ahead_reaches_into_the_next_segment_as_far_as_the_reader_needs() -> None:
    storage = TimedStorage(get_seconds=1.0)
    first, following = segment(64), segment(32 * 10)
    cache = timed_cache(storage, max_bytes=100_000)
    await cache.read(first, 0, 10)
    await settle()
    storage.now = 10.0
    await cache.read(first, 32, 40)  # 9 s per chunk: prefetch_chunks
    assert cache.read_ahead_bytes(first, 40) == 32
    assert cache.read_ahead_bytes(segment(64), 40) == 32  # a reader not seen: the minimum
    cache.prefetch(following, 0, 32 * 3 + 1)
    await settle()
    starts = sorted(s for seg, s, _ in storage.gets if seg == following.segment_id.id)
    assert starts == [0, 32, 64, 96]


@pytest.mark.parametrize("read_bytes", [1024, 8192])
async def test_a_deep_read_ahead_is_not_evicted_before_it_is_read(read_bytes: int) -> None:
    """A reader through small segments (1.9 chunks), with read-ahead into the following
    segments as the remote reader does it, in a cache of 8 chunks: every chunk is read
    from storage once. Chunks read ahead stay more recent than the chunks already read."""
    storage = SyntheticStorage()
    size = 7782
    segments = [segment(size) for _ in range(17)]
    cache = ChunkCache(storage, max_bytes=8 * 4096, chunk_bytes=4096, prefetch_chunks=2)
    for _round in range(3):
        for number, meta in enumerate(segments):
            position = 0
            while position < size:
                position += len(await cache.read(meta, position, position + read_bytes))
                ahead = position + max(cache.read_ahead_bytes(meta, position), 4096) - size
                for following in segments[number + 1 : number + 5]:
                    if ahead <= 0:
                        break
                    cache.prefetch(following, 0, ahead)
                    ahead -= following.segment_size_in_bytes
                await settle()
    assert len(storage.gets) == 3 * 17 * 2


async def test_slow_gets_keep_many_in_flight_for_a_fast_reader_up_to_the_end() -> None:
    """1 s per GET, 0.1 s per chunk read: 20 chunks wanted ahead, all in flight at once
    (the default in-flight bound is one reader's deepest read-ahead), none past the end."""
    storage = TimedStorage(get_seconds=1.0)
    meta = segment(32 * 12 - 5)
    cache = ChunkCache(
        storage, max_bytes=100_000, chunk_bytes=32, prefetch_chunks=1, clock=lambda: storage.now
    )
    await cache.read(meta, 0, 10)  # read at 1.0, when its GET ended
    await settle()
    storage.gate = asyncio.Event()
    storage.now = 1.1
    await cache.read(meta, 32, 40)
    await settle()
    assert sorted(s for _, s, _ in storage.gets) == [32 * i for i in range(12)]
    assert [e for _, s, e in storage.gets if s == 32 * 11] == [meta.segment_size_in_bytes]
    assert cache.prefetches == 11
    storage.gate.set()
    await cache.close()


@pytest.mark.parametrize(("after", "expected"), [(True, 12), (False, 12)])
async def test_the_readers_rate_carries_into_the_segment_it_reads_next(
    after: bool, expected: int
) -> None:
    """A reader at 0.1 s per chunk behind 1 s GETs reaches the first chunk of the next
    segment: told which segment it follows, the cache reads that one as far ahead (here
    to its end) as it read the last; not told, at the pace last measured (its own here)."""
    storage = TimedStorage(get_seconds=1.0)
    first, following = segment(64), segment(32 * 12)
    cache = timed_cache(storage, max_bytes=100_000)
    await cache.read(first, 0, 10)  # read at 1.0, when its GET ended
    await settle()
    storage.now = 1.1
    await cache.read(first, 32, 40)
    cache.prefetch(following, 0, 32, after=first if after else None)
    await settle()
    storage.now = 1.2
    await cache.read(following, 0, 10)
    await settle()
    assert len([s for seg, s, _ in storage.gets if seg == following.segment_id.id]) == expected


class RecyclingStorage(SyntheticStorage):
    """A SyntheticStorage that takes evicted chunks back."""

    def __init__(self) -> None:
        super().__init__()
        self.recycled: list[bytes | bytearray] = []

    def recycle(self, data: bytes | bytearray) -> None:
        self.recycled.append(data)


async def test_evicted_chunks_go_back_to_storage_that_recycles_them() -> None:
    storage = RecyclingStorage()
    meta = segment(100)
    cache = ChunkCache(storage, max_bytes=32, chunk_bytes=32)
    first = bytes(await cache.read(meta, 0, 10))
    await cache.read(meta, 32, 40)
    assert [bytes(data) for data in storage.recycled] == [log_content(meta)[:32]]
    assert first == log_content(meta)[:10]


async def test_a_reader_of_whole_segments_reads_ahead_at_its_rate() -> None:
    """Segments of two chunks read whole, 0.5 s from one read's answer to the next read,
    behind 1 s GETs: the read ahead of each segment's end (where the remote reader asks how
    far to reach into the next ones) follows the reader's rate, 0.25 s per chunk, 8 chunks,
    not the minimum. The first read's wait for its two GETs (to 12.0) does not count."""
    storage = TimedStorage(get_seconds=1.0)
    segments = [segment(64) for _ in range(3)]
    cache = timed_cache(storage, max_bytes=100_000)
    for number, (meta, asked) in enumerate(zip(segments, (10.0, 12.5, 13.0), strict=True)):
        storage.now = asked
        await cache.read(meta, 0, 64)
        if number + 1 < len(segments):
            cache.prefetch(segments[number + 1], 0, 64, after=meta)
        await settle()
    assert cache.read_ahead_bytes(segments[2], 64) == 8 * 32


async def test_a_reader_held_back_by_its_read_ahead_is_sized_by_its_own_pace() -> None:
    """A reader that waits for every chunk (its read-ahead too shallow for 1 s GETs) but
    asks for the next one 0.1 s after each answer: sized from 0.1 s per chunk (20 ahead),
    not from the 1.1 s per chunk the waits held it to."""
    storage = TimedStorage(get_seconds=1.0)
    meta = segment(32 * 100)
    cache = ChunkCache(
        storage,
        max_bytes=100_000,
        chunk_bytes=32,
        prefetch_chunks=1,
        max_prefetch_inflight=1,
        clock=lambda: storage.now,
    )
    await cache.read(meta, 0, 32)  # asked at 0, answered at 1 (and chunk 1 read ahead)
    storage.now += 0.1
    await cache.read(meta, 32, 64)
    assert cache.read_ahead_bytes(meta, 64) == 20 * 32


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 400), min_size=1, max_size=4),
    read_bytes=st.integers(1, 100),
    cache_chunks=st.integers(0, 6),
    budget_chunks=st.integers(0, 8),
    prefetch_chunks=st.integers(0, 4),
    turns=st.lists(st.integers(0, 3), max_size=120),
)
def test_sequential_readers_get_exact_bytes_within_bounds_and_chunks_in_order(
    sizes: list[int],
    read_bytes: int,
    cache_chunks: int,
    budget_chunks: int,
    prefetch_chunks: int,
    turns: list[int],
) -> None:
    """Readers of their own segments, interleaved at random (a GET lands between turns or
    not): every read is the object's bytes; no GET reaches past a segment's end; each
    chunk is first read from storage in order; memory stays within the cache's bound plus
    the read-ahead budget (at least ``prefetch_chunks`` chunks)."""
    chunk = 16

    async def run() -> None:
        storage = SyntheticStorage()
        cache = ChunkCache(
            storage,
            max_bytes=cache_chunks * chunk,
            chunk_bytes=chunk,
            prefetch_chunks=prefetch_chunks,
            read_ahead_max_bytes=budget_chunks * chunk,
        )
        metas = [segment(size) for size in sizes]
        positions = [0] * len(metas)
        for turn in turns:
            number = turn % len(metas)
            meta, position = metas[number], positions[number]
            if position < meta.segment_size_in_bytes:
                read = await cache.read(meta, position, position + read_bytes)
                assert bytes(read) == log_content(meta)[position : position + read_bytes]
                positions[number] += len(read)
            if turn % 2:
                await settle()
            limit = (cache_chunks + max(budget_chunks, prefetch_chunks)) * chunk
            assert cache.size_bytes <= limit
        await settle()
        for meta in metas:
            starts = [s for seg, s, _ in storage.gets if seg == meta.segment_id.id]
            firsts = list(dict.fromkeys(starts))
            assert firsts == sorted(firsts)
            assert all(s < meta.segment_size_in_bytes for s in starts)
        await cache.close()

    asyncio.run(run())


async def test_a_second_pass_over_a_range_is_sized_by_its_own_pace() -> None:
    """A consumer reads a range slowly (10 s per chunk), another reads it again fast (0.1 s
    per chunk): the second's read-ahead follows its pace, not the first's."""
    storage = TimedStorage(get_seconds=1.0)
    meta = segment(32 * 10)
    cache = timed_cache(storage, max_bytes=100_000)
    for number in range(3):
        storage.now = 100.0 + 10 * number
        await cache.read(meta, 32 * number, 32 * number + 32)
        await settle()
    assert cache.read_ahead_bytes(meta, 96) == 32  # 2 * 1 s / ~10 s: the minimum
    for number in range(3):
        storage.now = 1000.0 + 0.1 * number
        await cache.read(meta, 32 * number, 32 * number + 32)
    assert cache.read_ahead_bytes(meta, 96) == 20 * 32


async def test_a_reader_not_measured_yet_reads_ahead_at_the_pace_last_measured() -> None:
    """Before any reader's pace is known, the minimum; after, a new reader (its first read)
    is sized like the last one: a consumer starting a range GETs as deep at once."""
    storage = TimedStorage(get_seconds=1.0)
    first, second = segment(32 * 40), segment(32 * 40)
    cache = timed_cache(storage, max_bytes=100_000)
    assert cache.read_ahead_bytes(second, 0) == 32
    await cache.read(first, 0, 32)  # answered at 1.0, when its GET ended
    await settle()
    storage.now = 1.1
    await cache.read(first, 32, 64)
    await settle()
    assert cache.read_ahead_bytes(second, 0) == 20 * 32


async def test_read_ahead_across_segments_never_drops_a_nearer_chunk_for_a_farther_one() -> None:
    """Read-ahead into five 1-chunk segments after the one read, with a budget of 3: the
    three nearest are kept; the farther ones do not fit (nothing is GET twice)."""
    storage = SyntheticStorage()
    segments = [segment(32) for _ in range(6)]
    cache = ChunkCache(
        storage, max_bytes=32 * 4, chunk_bytes=32, prefetch_chunks=1, read_ahead_max_bytes=32 * 3
    )
    await cache.read(segments[0], 0, 32)
    for before, following in itertools.pairwise(segments):
        cache.prefetch(following, 0, 32, after=before)
        await settle()
    for meta in segments[1:4]:
        assert bytes(await cache.read(meta, 0, 32)) == log_content(meta)
    assert len(storage.gets) == len({seg for seg, _, _ in storage.gets})  # none GET twice
    assert cache.hits == 3


async def test_a_read_past_a_segments_first_chunk_not_measured_gets_the_minimum() -> None:
    """After a fast reader, a read elsewhere than a segment's first chunk (a random read
    looks like one) is not sized like that reader: the minimum."""
    storage = TimedStorage(get_seconds=1.0)
    first, other = segment(32 * 40), segment(32 * 40)
    cache = timed_cache(storage, max_bytes=100_000)
    await cache.read(first, 0, 32)
    await settle()
    storage.now = 1.1
    await cache.read(first, 32, 64)
    assert cache.read_ahead_bytes(other, 0) == 20 * 32
    assert cache.read_ahead_bytes(other, 32 * 10) == 32


@given(
    maxsize=st.integers(1, 4),
    operations=st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.integers()), max_size=60),
)
def test_recent_lru_keeps_the_most_recently_used(
    maxsize: int, operations: list[tuple[bool, int, int]]
) -> None:
    """The read-ahead's bounded maps agree with a brute-force LRU: a lookup or a store makes
    a key the most recently used, and a store beyond the bound drops the least recent."""
    recent: _RecentLRU[int, int] = _RecentLRU(maxsize)
    model: list[tuple[int, int]] = []  # least recently used first
    for store, key, value in operations:
        found = next((v for k, v in model if k == key), None)
        if store:
            model = [(k, v) for k, v in model if k != key] + [(key, value)]
            model = model[-maxsize:]
            recent[key] = value
        else:
            if found is not None:
                model = [(k, v) for k, v in model if k != key] + [(key, found)]
            assert recent.get(key) == found
    assert [recent.get(k) for k, _ in model] == [v for _, v in model]
