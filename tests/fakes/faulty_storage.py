"""A real remote storage manager behind injectable latency and failures.

:class:`FaultyStorage` wraps a real storage manager (the local-directory one in the unit
tests) and forwards every call to it, so what a read returns is what the product stored.
Rules: each read is recorded when it starts, then waits :attr:`~FaultyStorage.delay` seconds,
then raises :attr:`~FaultyStorage.error` if one is set; copies and deletes are forwarded
untouched. :class:`MappedFaultyStorage` also forwards ``map_log_segment`` and ``unmap``, so
the chunk cache maps files as it does over a local directory; the plain one makes the chunk
cache read through ``fetch_log_segment``, as it does over an object store.
"""

from __future__ import annotations

import asyncio

from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from storage.rsm.base import RemoteStorageError
from storage.rsm.local import LocalRemoteStorage

__all__ = ["FaultyStorage", "MappedFaultyStorage"]


class FaultyStorage:
    """``inner`` with injectable latency and failures on reads (see the module)."""

    def __init__(self, inner: LocalRemoteStorage) -> None:
        self.inner = inner
        self.delay = 0.0
        self.error: RemoteStorageError | None = None
        self.log_reads: list[int] = []
        """Start offsets of the segments whose ``.log`` was read, in order."""
        self.index_reads = 0
        """Index files requested (counted when the request starts)."""

    async def _fault(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        await self.inner.copy_log_segment(metadata, data)

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        self.log_reads.append(metadata.start_offset)
        await self._fault()
        return await self.inner.fetch_log_segment(metadata, start, end)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self.index_reads += 1
        await self._fault()
        return await self.inner.fetch_index(metadata, index_type)

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        await self.inner.delete_log_segment(metadata)

    async def close(self) -> None:
        await self.inner.close()


class MappedFaultyStorage(FaultyStorage):
    """A :class:`FaultyStorage` whose ``.log`` reads map the file, as the local directory's
    do; a mapped read is recorded and faulted as any other read."""

    async def map_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview:
        self.log_reads.append(metadata.start_offset)
        await self._fault()
        return await self.inner.map_log_segment(metadata, start, end)

    def unmap(self, view: memoryview) -> None:
        self.inner.unmap(view)
