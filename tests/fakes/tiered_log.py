"""A builder of a real remote tier in a directory: segments from record batches, their
indexes, the objects in a local-directory RSM and their metadata in a metadata cache.

Shared by the remote reader's, the interceptors' and the Spark source's unit tests. Nothing
here is a fake: the segment builder, the local remote storage, the metadata cache and the
caches are the production classes, so a read goes through exactly the code the proxy runs.
Only the metadata topic is left out: a record published applies to the cache at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.indexes.producer_snapshot import ProducerSnapshotEntry
from protocol.metadata_records import MetadataRecord
from protocol.records import parse_batch_header
from storage.chunk_cache import ChunkCache
from storage.index_cache import RemoteIndexCache
from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.remote_reader import RemoteLogReader
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteStorageManager
from storage.rsm.local import LocalRemoteStorage
from storage.segment.builder import SegmentBuilder
from tests.fakes.record_batches import BASE_TIMESTAMP

TP = TopicIdPartition(topic_id=uuid.UUID(int=7), topic="tiered", partition=0)


@dataclass
class TieredLog:
    """A partition's remote tier and the reader over it."""

    rsm: LocalRemoteStorage
    metadata: RemoteLogMetadataCache
    indexes: RemoteIndexCache
    chunks: ChunkCache
    reader: RemoteLogReader
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    batches: list[bytes] = field(default_factory=list)
    """Every batch copied so far, in offset order (segment by segment)."""
    lineage: tuple[EpochEntry, ...] = ()
    """The epochs up to the last copied segment: the next segment's prior epochs."""
    producers: tuple[ProducerSnapshotEntry, ...] = ()
    """The producers at the last copied segment's end: the next one's prior producers."""

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        chunk_bytes: int = 64 * 1024,
        prefetch_chunks: int = 0,
        chunk_cache_bytes: int | None = None,
        wrap: Callable[[LocalRemoteStorage], RemoteStorageManager] | None = None,
    ) -> TieredLog:
        """A fresh, empty remote tier under ``root``.

        :param wrap: what the caches read through instead of the storage itself (tests
            wrap it to inject latency and faults); copies always go to the storage.
        """
        rsm = LocalRemoteStorage(root)
        reads: RemoteStorageManager = rsm if wrap is None else wrap(rsm)
        chunks = ChunkCache(
            reads,
            max_bytes=64 * chunk_bytes if chunk_cache_bytes is None else chunk_cache_bytes,
            chunk_bytes=chunk_bytes,
            prefetch_chunks=prefetch_chunks,
        )
        indexes = RemoteIndexCache(reads, max_bytes=1 << 24, ttl_seconds=3600)
        metadata = RemoteLogMetadataCache()
        reader = RemoteLogReader(metadata=metadata, indexes=indexes, chunks=chunks)
        return cls(rsm=rsm, metadata=metadata, indexes=indexes, chunks=chunks, reader=reader)

    async def publish(self, record: MetadataRecord) -> None:
        """The metadata topic in memory: records apply to the cache at once."""
        self.metadata.apply(record)

    async def copy(
        self,
        batches: Sequence[bytes],
        *,
        base_offset: int | None = None,
        tp: TopicIdPartition = TP,
        index_interval_bytes: int = 256,
    ) -> RemoteLogSegmentMetadata:
        """Build one segment from ``batches``, upload it and mark it COPY_SEGMENT_FINISHED."""
        first = base_offset
        if first is None:
            first = parse_batch_header(batches[0]).base_offset
        builder = SegmentBuilder(
            base_offset=first,
            prior_epochs=self.lineage,
            prior_producers=self.producers,
            index_interval_bytes=index_interval_bytes,
        )
        for batch in batches:
            builder.append(batch)
        built = builder.finish()
        self.lineage = built.lineage
        self.producers = built.producers
        metadata = RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId.generate(tp),
            start_offset=built.start_offset,
            end_offset=built.end_offset,
            max_timestamp=built.max_timestamp,
            leader_epoch=0,
            event_timestamp=BASE_TIMESTAMP,
            segment_leader_epochs=built.segment_leader_epochs,
            segment_size_in_bytes=built.size_in_bytes,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        )
        await self.rsm.copy_log_segment(metadata, built.data)
        self.metadata.add_segment(metadata)
        self.metadata.update_segment(
            metadata.segment_id,
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            leader_epoch=0,
            event_timestamp=BASE_TIMESTAMP,
        )
        finished = self.metadata.segment(metadata.segment_id)
        assert finished is not None
        self.segments.append(finished)
        self.batches.extend(batches)
        return finished

    async def close(self) -> None:
        await self.chunks.close()
        await self.indexes.close()
        await self.rsm.close()
