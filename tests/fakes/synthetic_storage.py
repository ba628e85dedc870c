"""A fake remote storage manager whose objects are made up from each segment's id.

It stands in for :class:`storage.rsm.base.RemoteStorageManager` under the caches (chunk and
index) in their unit tests. Nothing is stored: a segment's ``.log`` is
``segment_size_in_bytes`` bytes of a pattern of its id (:func:`log_content`), each index
file ``index_bytes`` bytes of a pattern of its id and type
(:meth:`SyntheticStorage.index_content`), so any
segment's metadata names objects that exist.

Rules: every read is recorded (:attr:`SyntheticStorage.gets`,
:attr:`SyntheticStorage.index_gets`) when it starts; while :attr:`~SyntheticStorage.gate` is
set to an unset event every read waits for it; with :attr:`~SyntheticStorage.error` set every
read raises it; ``truncate_to`` serves a ``.log`` shorter than its metadata says. Copies and
deletes are not faked: a test that makes them uses a real storage manager.
"""

from __future__ import annotations

import asyncio
import uuid

from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from storage.rsm.base import RemoteStorageError

__all__ = ["SyntheticStorage", "log_content"]


def log_content(metadata: RemoteLogSegmentMetadata) -> bytes:
    """The ``.log`` of ``metadata``'s segment: its size in bytes of its id, repeated."""
    seed = metadata.segment_id.id.bytes
    size = metadata.segment_size_in_bytes
    return (seed * (size // len(seed) + 1))[:size]


class SyntheticStorage:
    """Serves :func:`log_content` ranges and :meth:`index_content` files (see the module)."""

    def __init__(self, index_bytes: int = 40) -> None:
        self.index_bytes = index_bytes
        self.gets: list[tuple[uuid.UUID, int, int | None]] = []
        """Every ``.log`` read: (segment id, start, end)."""
        self.index_gets: list[tuple[uuid.UUID, IndexType]] = []
        """Every index read: (segment id, index type)."""
        self.gate: asyncio.Event | None = None
        self.error: RemoteStorageError | None = None
        self.truncate_to: int | None = None

    def index_content(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The index file ``index_type`` of ``metadata``'s segment: ``index_bytes`` bytes of
        its id and type, repeated."""
        seed = f"{metadata.segment_id.id}{index_type.value}".encode()
        return (seed * (self.index_bytes // len(seed) + 1))[: self.index_bytes]

    async def _read(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        raise NotImplementedError

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        self.gets.append((metadata.segment_id.id, start, end))
        await self._read()
        data = log_content(metadata)
        if self.truncate_to is not None:
            data = data[: self.truncate_to]
        return data[start:end]

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self.index_gets.append((metadata.segment_id.id, index_type))
        await self._read()
        return self.index_content(metadata, index_type)

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None
