"""What the driver knows while it plans: the topic's partitions, the remote tier's metadata
and indexes, and the broker's offsets.

Opened for one planning step (a batch query, or one micro-batch): the metadata manager
catches up with the metadata topic (from its snapshots when it has them), the indexes are
read through a small cache, and every broker question goes through tierproxy's own client.
No ``.log`` byte is read here, except the few a timestamp lookup scans after the time index
pointed at its batch.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.errors import KafkaError
from protocol.indexes.offset_index import OffsetIndex
from protocol.indexes.producer_snapshot import NO_TXN, parse_producer_snapshot
from protocol.indexes.transaction_index import parse_transaction_index
from storage.chunk_cache import ChunkCache
from storage.index_cache import RemoteIndexCache
from storage.kafka_client import FetchTarget, KafkaClient, KafkaClientError
from storage.log_event import event
from storage.model import IndexType, RemoteLogSegmentMetadata, TopicIdPartition
from storage.remote_reader import RemoteLogReader
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.lineage import agreeing_end
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.rsm.base import RemoteStorageManager
from storage.rsm.factory import storage_identity
from storage.spark_source.decode import AbortedRange
from storage.spark_source.options import SourceOptions
from storage.spark_source.settings import SourceSettings
from storage.spark_source.worker import index_cache, remote_storage

__all__ = ["Catalog", "PartitionInfo", "RemoteSegment", "SourceError", "open_catalog"]

log = logging.getLogger(__name__)

_READ_COMMITTED: Final = 1
_READ_UNCOMMITTED: Final = 0
_FETCH_WAIT_MS: Final = 10
"""Tansu answers a Fetch with no partitions at all when it may not wait; Kafka, asked for
``min_bytes`` 0, answers at once anyway. Also the metadata consumer's long poll: catching
up from snapshots that already hold everything waits that long for each high watermark,
which Kafka's default (500 ms) would add to every query's planning."""
_CHUNK_CACHE_BYTES: Final = 16 * 1024 * 1024


class SourceError(Exception):
    """The query cannot be planned (a topic is missing, the broker refused an offset)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    tp: TopicIdPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSegment:
    """One segment's part of a range: its offsets and the byte positions to read."""

    segment: RemoteLogSegmentMetadata
    from_offset: int
    until_offset: int
    index: OffsetIndex


class Catalog:
    """Answers the planner's questions for one planning step."""

    def __init__(
        self,
        *,
        client: KafkaClient,
        metadata: RemoteLogMetadataCache,
        rsm: RemoteStorageManager,
        indexes: RemoteIndexCache,
        reader: RemoteLogReader,
    ) -> None:
        self._client = client
        self._metadata = metadata
        self._rsm = rsm
        self._indexes = indexes
        self._reader = reader

    async def partitions(self, options: SourceOptions) -> list[PartitionInfo]:
        """Every partition of the subscribed topics (or the assigned ones), with its leader
        and topic id.

        :raises SourceError: when a named topic or an assigned partition does not exist.
        """
        cluster = await self._client.metadata(None if options.pattern else options.topics)
        found = []
        for name in sorted(cluster.topics):
            topic = cluster.topics[name]
            if topic.is_internal or not options.matches(name):
                continue
            if topic.error != KafkaError.NONE:
                raise SourceError(f"topic {name!r}: the broker answered {topic.error.name}")
            for p in sorted(topic.partitions, key=lambda p: p.partition):
                if not options.reads(name, p.partition):
                    continue
                known = self._metadata.topic_id_partition(name, p.partition)
                tp = TopicIdPartition(topic_id=topic.topic_id, topic=name, partition=p.partition)
                found.append(
                    PartitionInfo(
                        topic=name, partition=p.partition, leader=p.leader_id, tp=known or tp
                    )
                )
        if options.assigned is not None:
            missing = {
                (topic, partition)
                for topic, partitions in options.assigned.items()
                for partition in partitions
            } - {(part.topic, part.partition) for part in found}
            if missing:
                raise SourceError(f"assign names partitions that do not exist: {sorted(missing)}")
        return found

    def remote_span(self, part: PartitionInfo) -> tuple[int, int] | None:
        """``[start, end)`` of the remote log, or ``None`` when nothing is tiered."""
        start = self._metadata.remote_log_start_offset(part.tp)
        end = self._metadata.remote_log_end_offset(part.tp)
        if start is None or end is None:
            return None
        return max(start, self._metadata.log_start_offset(part.tp)), end + 1

    async def broker_offsets(
        self, parts: Sequence[PartitionInfo], timestamp: int, *, read_committed: bool
    ) -> dict[tuple[str, int], int]:
        """The broker's ListOffsets answer per partition (-1 where none matched).

        :raises SourceError: when the broker answers an error for a partition.
        """
        by_leader: dict[int, list[PartitionInfo]] = defaultdict(list)
        for part in parts:
            by_leader[part.leader].append(part)
        answers: dict[tuple[str, int], int] = {}
        isolation = _READ_COMMITTED if read_committed else _READ_UNCOMMITTED
        for leader, group in by_leader.items():
            try:
                listed = await self._client.list_offsets(
                    leader,
                    [(p.topic, p.partition, timestamp) for p in group],
                    isolation_level=isolation,
                )
            except KafkaClientError as err:
                raise SourceError(f"ListOffsets to broker {leader} failed: {err}") from err
            for answer in listed:
                if answer.error != KafkaError.NONE:
                    raise SourceError(
                        f"ListOffsets of {answer.topic}-{answer.partition} at {timestamp}: "
                        f"{answer.error.name}"
                    )
                answers[answer.topic, answer.partition] = answer.offset
        return answers

    async def broker_ends(
        self,
        parts: Sequence[PartitionInfo],
        starts: Mapping[tuple[str, int], int],
        *,
        read_committed: bool,
    ) -> dict[tuple[str, int], int]:
        """Each partition's end as a Fetch reports it: the high watermark, or the last stable
        offset for READ_COMMITTED (Tansu answers ListOffsets LATEST with the last batch's base
        offset, so the log end is taken from a Fetch, as the pipeline does).

        :raises SourceError: when the broker answers an error for a partition.
        """
        groups: dict[tuple[int, str], list[PartitionInfo]] = defaultdict(list)
        for part in parts:
            groups[part.leader, part.topic].append(part)
        ends: dict[tuple[str, int], int] = {}
        isolation = _READ_COMMITTED if read_committed else _READ_UNCOMMITTED
        for (leader, topic), group in groups.items():
            targets = [
                FetchTarget(
                    topic=topic,
                    partition=p.partition,
                    offset=starts[topic, p.partition],
                    max_bytes=1,
                )
                for p in group
            ]
            try:
                answers = await self._client.fetch(
                    leader, targets, isolation_level=isolation, max_wait_ms=_FETCH_WAIT_MS
                )
            except KafkaClientError as err:
                raise SourceError(f"Fetch from broker {leader} failed: {err}") from err
            for answer in answers:  # one topic per request: Fetch v13+ answers name none
                if answer.error != KafkaError.NONE:
                    raise SourceError(f"Fetch of {topic}-{answer.partition}: {answer.error.name}")
                stable = answer.last_stable_offset
                end = stable if read_committed and stable >= 0 else answer.high_watermark
                ends[topic, answer.partition] = end
        return ends

    async def remote_offset_for_time(self, part: PartitionInfo, timestamp: int) -> int | None:
        """The first remote offset with a timestamp at or after ``timestamp``."""
        found = await self._reader.find_offset_by_timestamp(part.tp, timestamp)
        return None if found is None else found.offset

    async def remote_segments(
        self, part: PartitionInfo, start: int, until: int
    ) -> AsyncIterator[RemoteSegment]:
        """The segments on the lineage that hold ``[start, until)``, in order, each with
        its offset index; stops at the first offset the remote tier does not hold."""
        lineage = self._metadata.lineage(part.tp)
        offset = start
        while offset < until:
            segment = self._metadata.segment_for(part.tp, offset, lineage)
            if segment is None:
                return
            end = min(until, agreeing_end(segment, offset, lineage) + 1)
            if end <= offset:
                return
            index = OffsetIndex(
                await self._indexes.get(segment, IndexType.OFFSET),
                base_offset=segment.start_offset,
            )
            yield RemoteSegment(segment=segment, from_offset=offset, until_offset=end, index=index)
            offset = end

    async def aborted_after(
        self, part: PartitionInfo, segments: Iterable[RemoteLogSegmentMetadata]
    ) -> tuple[AbortedRange, ...]:
        """Aborted transactions in the transaction indexes of ``segments`` and of every
        later remote segment (a transaction's marker, and so its index entry, may lie in a
        segment after the one holding its records)."""
        seen: set[tuple[int, int]] = set()
        found = []
        lineage = self._metadata.lineage(part.tp)
        current: RemoteLogSegmentMetadata | None = None
        for current in segments:
            found.extend(await self._aborted_in(current, seen))
        while current is not None:
            current = self._metadata.segment_for(part.tp, current.end_offset + 1, lineage)
            if current is not None:
                found.extend(await self._aborted_in(current, seen))
        return tuple(sorted(found, key=lambda a: a.first_offset))

    async def _aborted_in(
        self, segment: RemoteLogSegmentMetadata, seen: set[tuple[int, int]]
    ) -> list[AbortedRange]:
        entries = parse_transaction_index(await self._indexes.get(segment, IndexType.TRANSACTION))
        fresh = []
        for txn in entries:
            key = (txn.producer_id, txn.first_offset)
            if key not in seen:
                seen.add(key)
                fresh.append(
                    AbortedRange(
                        producer_id=txn.producer_id,
                        first_offset=txn.first_offset,
                        last_offset=txn.last_offset,
                    )
                )
        return fresh

    async def remote_stable_end(self, part: PartitionInfo) -> int | None:
        """The first offset of a transaction still open at the remote tier's end (its
        outcome is only in the broker's log), or ``None`` when none is open."""
        end = self._metadata.remote_log_end_offset(part.tp)
        if end is None:
            return None
        last = self._metadata.segment_for(part.tp, end, self._metadata.lineage(part.tp))
        if last is None:
            return None
        snapshot = parse_producer_snapshot(
            await self._indexes.get(last, IndexType.PRODUCER_SNAPSHOT)
        )
        open_starts = [
            e.current_txn_first_offset for e in snapshot if e.current_txn_first_offset != NO_TXN
        ]
        return min(open_starts) if open_starts else None


@contextlib.asynccontextmanager
async def open_catalog(settings: SourceSettings) -> AsyncIterator[Catalog]:
    """A catalog whose metadata manager has caught up with the metadata topic.

    Open it on the worker's loop (:func:`storage.spark_source.worker.run`): the storage
    manager and the index cache are the worker's, kept from one planning step to the next.
    """
    client = KafkaClient(
        settings.bootstrap_servers,
        client_id=settings.client_id,
        request_timeout_ms=settings.request_timeout_ms,
        security=settings.security,
    )
    rlmm = TopicBasedRemoteLogMetadataManager(
        settings.metadata,
        bootstrap_servers=settings.bootstrap_servers,
        security=settings.security,
        command="spark",
        storage_identity=storage_identity(settings.storage),
        fetch_max_wait_ms=_FETCH_WAIT_MS,
    )
    rsm = remote_storage(settings.storage)
    indexes = index_cache(settings.storage)
    chunks = ChunkCache(rsm, max_bytes=_CHUNK_CACHE_BYTES)
    try:
        await rlmm.start()
        event(
            log,
            logging.INFO,
            "source.metadata.loaded",
            msg=f"remote log metadata: {len(rlmm.cache)} segments known",
            segments=len(rlmm.cache),
        )
        yield Catalog(
            client=client,
            metadata=rlmm.cache,
            rsm=rsm,
            indexes=indexes,
            reader=RemoteLogReader(metadata=rlmm.cache, indexes=indexes, chunks=chunks),
        )
    finally:
        await chunks.close()
        await client.close()
        await rlmm.close()
