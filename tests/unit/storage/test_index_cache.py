"""RemoteIndexCache against a fake storage manager: LRU by bytes, TTL, single flight, disk."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from storage.config import from_settings
from storage.index_cache import CACHE_DIR_NAME, IndexCacheConfig, RemoteIndexCache
from storage.model import (
    IndexType,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.rsm.base import RemoteStorageError, RemoteStorageManager
from tests.fakes.clocks import ManualClock
from tests.fakes.segments import segment_metadata
from tests.fakes.synthetic_storage import SyntheticStorage

TP = TopicIdPartition(topic_id=uuid.uuid4(), topic="t", partition=0)


def segment(start: int = 0) -> RemoteLogSegmentMetadata:
    return segment_metadata(TP, start_offset=start, end_offset=start + 99, size=1000)


def test_fake_conforms_to_the_protocol() -> None:
    storage: RemoteStorageManager = SyntheticStorage()
    assert storage is not None


async def test_second_get_is_a_hit() -> None:
    rsm = SyntheticStorage()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    seg = segment()
    first = await cache.get(seg, IndexType.OFFSET)
    assert first == rsm.index_content(seg, IndexType.OFFSET)
    assert await cache.get(seg, IndexType.OFFSET) == first
    assert (cache.hits, cache.misses, len(rsm.index_gets)) == (1, 1, 1)
    assert await cache.get(seg, IndexType.TIMESTAMP) == rsm.index_content(seg, IndexType.TIMESTAMP)
    assert len(rsm.index_gets) == 2
    assert cache.size_bytes == 80
    assert len(cache) == 2


async def test_concurrent_misses_share_one_download() -> None:
    rsm = SyntheticStorage()
    rsm.gate = asyncio.Event()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    seg = segment()
    waiters = [asyncio.create_task(cache.get(seg, IndexType.OFFSET)) for _ in range(10)]
    await asyncio.sleep(0)
    rsm.gate.set()
    results = await asyncio.gather(*waiters)
    assert len(rsm.index_gets) == 1
    assert set(results) == {rsm.index_content(seg, IndexType.OFFSET)}
    assert cache.misses == 10


async def test_lru_eviction_by_total_bytes() -> None:
    rsm = SyntheticStorage(index_bytes=40)
    cache = RemoteIndexCache(rsm, max_bytes=100, ttl_seconds=60)
    a, b, c = segment(0), segment(100), segment(200)
    await cache.get(a, IndexType.OFFSET)
    await cache.get(b, IndexType.OFFSET)
    await cache.get(a, IndexType.OFFSET)
    await cache.get(c, IndexType.OFFSET)
    assert cache.evictions == 1
    assert cache.size_bytes == 80
    fetched = len(rsm.index_gets)
    await cache.get(a, IndexType.OFFSET)
    assert len(rsm.index_gets) == fetched
    await cache.get(b, IndexType.OFFSET)
    assert len(rsm.index_gets) == fetched + 1


async def test_entries_expire_after_the_ttl() -> None:
    rsm, clock = SyntheticStorage(), ManualClock(1_700_000_000.0)
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60, clock=clock)
    seg = segment()
    await cache.get(seg, IndexType.TRANSACTION)
    clock.now += 59
    await cache.get(seg, IndexType.TRANSACTION)
    assert len(rsm.index_gets) == 1
    clock.now += 2
    await cache.get(seg, IndexType.TRANSACTION)
    assert len(rsm.index_gets) == 2
    assert cache.expirations == 1
    assert cache.evictions == 0


async def test_errors_reach_every_waiter_and_are_not_cached() -> None:
    rsm = SyntheticStorage()
    rsm.gate = asyncio.Event()
    rsm.error = RemoteStorageError("boom", retriable=True)
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    seg = segment()
    waiters = [asyncio.create_task(cache.get(seg, IndexType.OFFSET)) for _ in range(3)]
    await asyncio.sleep(0)
    rsm.gate.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RemoteStorageError) for r in results)
    rsm.error = None
    assert await cache.get(seg, IndexType.OFFSET) == rsm.index_content(seg, IndexType.OFFSET)
    assert len(rsm.index_gets) == 2


async def test_cancelled_callers_do_not_cancel_the_download() -> None:
    rsm = SyntheticStorage()
    rsm.gate = asyncio.Event()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    seg = segment()
    quitter = asyncio.create_task(cache.get(seg, IndexType.OFFSET))
    stayer = asyncio.create_task(cache.get(seg, IndexType.OFFSET))
    await asyncio.sleep(0)
    quitter.cancel()
    rsm.gate.set()
    assert await stayer == rsm.index_content(seg, IndexType.OFFSET)
    assert quitter.cancelled()


async def test_a_download_everyone_left_still_warms_the_cache() -> None:
    rsm = SyntheticStorage()
    rsm.gate = asyncio.Event()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    seg = segment()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await cache.get(seg, IndexType.OFFSET)
    rsm.gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    await cache.get(seg, IndexType.OFFSET)
    assert cache.hits == 1
    assert len(rsm.index_gets) == 1


async def test_files_larger_than_the_cache_are_served_but_not_kept(tmp_path: Path) -> None:
    rsm = SyntheticStorage(index_bytes=200)
    cache = RemoteIndexCache(rsm, max_bytes=100, ttl_seconds=60, disk_dir=tmp_path)
    seg = segment()
    assert len(await cache.get(seg, IndexType.OFFSET)) == 200
    assert len(cache) == 0
    assert list((tmp_path / CACHE_DIR_NAME).iterdir()) == []


async def test_disk_copy_keeps_a_restart_warm(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000.0)
    seg = segment()
    first = RemoteIndexCache(SyntheticStorage(), max_bytes=1000, ttl_seconds=60, disk_dir=tmp_path)
    expected = await first.get(seg, IndexType.OFFSET)
    files = list((tmp_path / CACHE_DIR_NAME).iterdir())
    assert [f.read_bytes() for f in files] == [expected]
    os.utime(files[0], (clock.now, clock.now))

    rsm = SyntheticStorage()
    second = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60, disk_dir=tmp_path, clock=clock)
    assert await second.get(seg, IndexType.OFFSET) == expected
    assert rsm.index_gets == []
    clock.now += 61
    await second.get(seg, IndexType.OFFSET)
    assert len(rsm.index_gets) == 1


async def test_stale_disk_files_are_refetched(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000.0)
    seg = segment()
    await RemoteIndexCache(
        SyntheticStorage(), max_bytes=1000, ttl_seconds=60, disk_dir=tmp_path
    ).get(seg, IndexType.OFFSET)
    (path,) = (tmp_path / CACHE_DIR_NAME).iterdir()
    os.utime(path, (clock.now, clock.now))
    clock.now += 30
    rsm = SyntheticStorage()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=20, disk_dir=tmp_path, clock=clock)
    assert not path.exists()
    await cache.get(seg, IndexType.OFFSET)
    assert len(rsm.index_gets) == 1


async def test_eviction_removes_the_disk_copy(tmp_path: Path) -> None:
    cache = RemoteIndexCache(
        SyntheticStorage(index_bytes=60), max_bytes=100, ttl_seconds=60, disk_dir=tmp_path
    )
    a, b = segment(0), segment(100)
    await cache.get(a, IndexType.OFFSET)
    await cache.get(b, IndexType.OFFSET)
    assert cache.evictions == 1
    assert [p.name for p in (tmp_path / CACHE_DIR_NAME).iterdir()] == [f"{b.segment_id.id}.index"]


def test_startup_trims_leftovers_and_excess(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000.0)
    directory = tmp_path / CACHE_DIR_NAME
    directory.mkdir()
    names = ["a.index", "b.index", "c.index", "d.index.123.tmp", "old.index"]
    for age, name in enumerate(names):
        path = directory / name
        path.write_bytes(b"x" * 40)
        mtime = clock.now - (1000 if name.startswith("old") else 10 - age)
        os.utime(path, (mtime, mtime))
    RemoteIndexCache(
        SyntheticStorage(), max_bytes=100, ttl_seconds=60, disk_dir=tmp_path, clock=clock
    )
    assert sorted(p.name for p in directory.iterdir()) == ["b.index", "c.index"]


async def test_close_cancels_downloads() -> None:
    rsm = SyntheticStorage()
    rsm.gate = asyncio.Event()
    cache = RemoteIndexCache(rsm, max_bytes=1000, ttl_seconds=60)
    waiter = asyncio.create_task(cache.get(segment(), IndexType.OFFSET))
    await asyncio.sleep(0)
    await cache.close()
    with pytest.raises(asyncio.CancelledError):
        await waiter


def test_config_defaults_and_construction(tmp_path: Path) -> None:
    config = from_settings(IndexCacheConfig, {"remote.log.index.file.cache.dir": str(tmp_path)})
    assert (config.total_size_mb, config.ttl_ms) == (1024, 3_600_000)
    cache = RemoteIndexCache.from_config(SyntheticStorage(), config)
    assert (tmp_path / CACHE_DIR_NAME).is_dir()
    assert len(cache) == 0
