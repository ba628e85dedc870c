"""The chunk cache's read-ahead against a real S3 server with object-storage latency.

SeaweedFS (or ``S3_ENDPOINT``) is reached through :mod:`bench.forwarder`, which holds each
answer's first byte 50 ms, as object storage takes to answer a GET. A reader that reads
from memory far faster than that gets a deep read-ahead: many ranged GETs at once (more
than the four the read-ahead was bounded by before), each chunk fetched once, none past
the segment's end, and the bytes are the object's. In a cache of a few chunks, chunks it
evicts are read into again (:class:`storage.rsm.s3_ranged_get.SpareBodies`) and every byte
read is still the object's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import forwarder
from protocol.buffers import Buffers
from storage.chunk_cache import ChunkCache
from storage.model import RemoteLogSegmentMetadata
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.s3 import S3RemoteStorage
from tests.fakes.segments import segment_data, segment_metadata
from tests.integration.storage.test_rsm_s3 import TOPIC, config

pytestmark = pytest.mark.integration

__all__ = ["config"]  # the fixture, shared with the RSM's own tests

CHUNK = 64 * 1024
CHUNKS = 24
DELAY_MS = 50.0
EARLIER_BOUND = 4
"""GETs the read-ahead had in flight at most before it followed the GETs' latency."""


class CountingStorage(S3RemoteStorage):
    """The S3 storage, counting the GETs of ``.log`` ranges that run at once."""

    def __init__(self, config: RemoteStorageConfig) -> None:
        super().__init__(config)
        self.ranges: list[tuple[int, int | None]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes | bytearray:
        self.ranges.append((start, end))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super().fetch_log_segment(metadata, start, end)
        finally:
            self.in_flight -= 1


@pytest.fixture
def delayed(config: RemoteStorageConfig, tmp_path: Path) -> Iterator[RemoteStorageConfig]:
    """``config`` with its endpoint behind a forwarder that delays each first byte."""
    assert config.s3_endpoint is not None
    target = config.s3_endpoint.removeprefix("http://").rstrip("/")
    with forwarder.running(target, tmp_path, delay_ms=DELAY_MS, splice=True) as (port, _pid):
        yield dataclasses.replace(config, s3_endpoint=f"http://127.0.0.1:{port}")


async def uploaded(config: RemoteStorageConfig, log: bytes) -> RemoteLogSegmentMetadata:
    """Metadata of a segment whose ``.log`` is ``log``, copied to the store."""
    metadata = segment_metadata(TOPIC, size=len(log))
    uploader = S3RemoteStorage(config)
    try:
        await uploader.copy_log_segment(metadata, segment_data(log))
    finally:
        await uploader.close()
    return metadata


async def test_a_fast_reader_gets_many_ranged_gets_at_once_and_none_past_the_end(
    config: RemoteStorageConfig, delayed: RemoteStorageConfig
) -> None:
    log = os.urandom(CHUNKS * CHUNK - 1000)
    metadata = await uploaded(config, log)

    storage = CountingStorage(delayed)
    cache = ChunkCache(storage, max_bytes=4 * 1024 * 1024, chunk_bytes=CHUNK, prefetch_chunks=2)
    try:
        read = bytearray()
        while len(read) < len(log):
            read += bytes(await cache.read(metadata, len(read), len(read) + 40_000))
        await asyncio.sleep(0)
    finally:
        await cache.close()
        await storage.close()

    assert read == log
    assert storage.most_in_flight > EARLIER_BOUND
    assert sorted(storage.ranges) == [
        (start, min(start + CHUNK, len(log))) for start in range(0, len(log), CHUNK)
    ]
    assert cache.gets == CHUNKS


async def test_evicted_chunks_are_read_into_again_and_every_byte_is_the_objects(
    config: RemoteStorageConfig,
) -> None:
    log = os.urandom(CHUNKS * CHUNK)
    metadata = await uploaded(config, log)
    storage = S3RemoteStorage(config)
    cache = ChunkCache(storage, max_bytes=4 * CHUNK, chunk_bytes=CHUNK, prefetch_chunks=2)
    try:
        for _round in range(3):
            position = 0
            held: list[tuple[int, memoryview | Buffers]] = []  # as responses being written
            while position < len(log):
                view = await cache.read(metadata, position, position + 50_000)
                held = [*held[-8:], (position, view)]
                assert all(bytes(v) == log[at : at + len(v)] for at, v in held)
                position += len(view)
    finally:
        await cache.close()
        await storage.close()
    assert cache.evictions > 0
