"""The remote tier as the proxy's interceptors share it: caches, reader, pool, purgatory,
quota, offload policy, fetch sessions, and what the proxy has learned about each tiered
partition from the broker's answers (:class:`~proxy.remote.broker_view.BrokerView`, also fed
by the proxy's own ListOffsets: :class:`~proxy.remote.broker_offsets.BrokerOffsets`). The
interceptors are built over it with explicit collaborators (``FetchInterceptor.for_tier``).
Objects the metadata lists but storage lacks are tracked in :attr:`RemoteTier.missing_objects`
(:mod:`proxy.remote.missing_objects`): the sample checked at start, what reads find, and
re-checked every minute.

:func:`open_remote_tier` builds it from the settings for ``tierproxy serve``: the remote
storage manager, the topic-based metadata manager (a consumer of ``__remote_log_metadata``
that keeps the metadata cache current), the index and chunk caches and the reader pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import MetadataRecord
from proxy.health import Readiness
from proxy.identities import ClientIdentities, ClientPrincipalConfig
from proxy.remote.broker_checks import BrokerChecks
from proxy.remote.broker_offsets import BrokerOffsets, OffsetLister
from proxy.remote.broker_view import BrokerView
from proxy.remote.client_quotas import ClientQuotas
from proxy.remote.config import RemoteFetchConfig
from proxy.remote.fallbacks import BrokerFallbacks
from proxy.remote.metrics import NoReadCounters, ReadCounters, RemoteMetrics
from proxy.remote.missing_objects import MissingObjects
from proxy.remote.offload import OffloadPolicy
from proxy.remote.offsets import RemoteRange
from proxy.remote.pool import ReaderPool
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.quota import FetchQuota
from proxy.remote.sessions import FetchSessions
from proxy.remote.topic_ids import TopicIdLookup, TopicIds
from storage.chunk_cache import ChunkCache
from storage.config import from_settings
from storage.index_cache import IndexCacheConfig, RemoteIndexCache
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import NO_TOPIC_ID, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from storage.remote_reader import RemoteLogReader, RemoteSegmentLookup
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.rsm.base import SegmentProbe
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import create_remote_storage, storage_identity
from storage.startup import announce_remote_tier, check_segment_sample

__all__ = ["MetadataPublisher", "RemoteLogMetadata", "RemoteTier", "open_remote_tier"]

_log = logging.getLogger("tierproxy.remote")

_OFFSETS_TIMEOUT_MS: Final = 5_000
"""Request timeout of the proxy's own ListOffsets (:mod:`proxy.remote.broker_offsets`): no
client waits for them beyond a short hold, but a broker that does not answer within this
is taken as failed, and the partitions are left to reach probes for a while."""
_RECHECK_SECONDS: Final = 60.0
"""How often segments known missing are looked for again (a HEAD each, bounded per round)."""


class RemoteLogMetadata(RemoteSegmentLookup, Protocol):
    """The metadata cache as the read path queries it (``RemoteLogMetadataCache``)."""

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None: ...

    def remote_log_end_offset(self, tp: TopicIdPartition) -> int | None: ...

    def topic_id_partition(self, topic: str, partition: int) -> TopicIdPartition | None: ...

    def topic_id_partition_by_id(
        self, topic_id: uuid.UUID, partition: int
    ) -> TopicIdPartition | None: ...

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...

    def log_start_offset(self, tp: TopicIdPartition) -> int: ...

    def partitions(self) -> list[TopicIdPartition]: ...


@runtime_checkable
class _CheckedStorage(Protocol):
    """A storage backend that can prove it is reachable (S3 and the local directory can)."""

    async def check(self) -> None: ...


class MetadataPublisher(Protocol):
    """How the proxy records a change in the metadata topic (the metadata manager's
    ``publish``): returns once the proxy's own metadata cache has applied it."""

    async def __call__(self, record: MetadataRecord) -> None: ...


class RemoteTier:
    """Everything the tiered read path shares, across connections."""

    def __init__(
        self,
        *,
        config: RemoteFetchConfig,
        metadata: RemoteLogMetadata,
        indexes: RemoteIndexCache,
        chunks: ChunkCache,
        publish: MetadataPublisher,
        topic_id_lookup: TopicIdLookup | None = None,
        offset_lister: OffsetLister | None = None,
        metrics: RemoteMetrics | None = None,
        probe: SegmentProbe | None = None,
        recheck_seconds: float = _RECHECK_SECONDS,
        identities: ClientIdentities | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """:param offset_lister: how the proxy asks brokers ListOffsets itself, before a
        partition's first Fetch; ``None``: first probes are reach probes.
        :param probe: how to look for a segment's objects without reading them (the remote
            storage manager): for the start-up sample and the re-checks of missing objects;
            ``None``: neither runs (reads still report what they find missing).
        :param identities: how clients' principals are named (the default rules if ``None``).
        """
        self.config = config
        self.metadata = metadata
        self.publish = publish
        self.indexes = indexes
        self.chunks = chunks
        self.missing_objects = MissingObjects(readable=self._readable, clock=clock)
        """Objects the metadata lists as readable that storage lacks, now:
        ``missing_objects.status()`` is what a readiness report shows."""
        self.reader = RemoteLogReader(
            metadata=metadata, indexes=indexes, chunks=chunks, missing=self.missing_objects
        )
        self._probe = probe
        self._recheck_seconds = recheck_seconds
        self._watch: asyncio.Task[None] | None = None
        self.pool = ReaderPool(
            workers=config.reader_threads, max_pending=config.reader_max_pending_tasks, clock=clock
        )
        self.purgatory = RemoteFetchPurgatory(max_wait_ms=config.max_wait_ms)
        self.quota = FetchQuota(
            bytes_per_second=config.fetch_max_bytes_per_second,
            window_num=config.fetch_quota_window_num,
            window_seconds=config.fetch_quota_window_size_seconds,
            clock=clock,
        )
        self.offload = OffloadPolicy(
            enabled=config.offload_enable,
            min_lag_records=config.offload_min_lag_records,
            min_lag_bytes=config.offload_min_lag_bytes,
        )
        self.sessions = FetchSessions(slots=config.session_cache_slots)
        self.broker_checks = BrokerChecks(reuse_ms=config.broker_check_reuse_ms)
        self.broker_view = BrokerView()
        self.broker_offsets = BrokerOffsets(
            broker_view=self.broker_view, ranges=self, lister=offset_lister, clock=clock
        )
        self.fallbacks = BrokerFallbacks()
        self.identities = identities or ClientIdentities()
        self.client_quotas = ClientQuotas(
            default_bytes_per_second=config.client_quota_bytes_per_second,
            bounds=config.client_quota_bounds(),
            window_num=config.quota_window_num,
            window_seconds=config.quota_window_size_seconds,
            clock=clock,
        )
        self.metrics = metrics
        self.counters: ReadCounters = metrics if metrics is not None else NoReadCounters()
        """What the read path counts per topic: the metrics, or nothing without them."""
        self.topic_ids = TopicIds(
            lookup=topic_id_lookup, tiered_names=self._tiered_names, refresh_seconds=30.0
        )
        if metrics is not None:
            metrics.watch(self)

    def start(self) -> None:
        """Start the reader pool, the topic-id refresh and, with a probe, the start-up sample
        and re-checks of missing objects (needs the running event loop)."""
        self.pool.start()
        self.topic_ids.start()
        if self._probe is not None:
            self._watch = asyncio.create_task(
                self._watch_objects(self._probe), name="remote-object-watch"
            )

    async def close(self) -> None:
        """Stop the pool, the topic-id refresh, the object watch and the caches' background
        loads."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self.metrics is not None:
            self.metrics.unwatch()
        await self.topic_ids.close()
        await self.broker_offsets.close()
        await self.pool.close()
        await self.chunks.close()
        await self.indexes.close()

    # -- missing objects -------------------------------------------------------------------

    def _readable(self, segment: RemoteLogSegmentMetadata) -> bool:
        state = self.metadata.segment_state(segment.segment_id)
        return state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED

    async def _watch_objects(self, probe: SegmentProbe) -> None:
        """The start-up sample, then a re-check of what is missing every
        ``recheck_seconds``; a failure of either is logged and the watch goes on."""
        try:
            await check_segment_sample(self.metadata, probe, self.missing_objects, log=_log)
        except Exception:
            _log.exception("remote tier start-up check failed")
        while True:
            await asyncio.sleep(self._recheck_seconds)
            if self.missing_objects.count:
                try:
                    await self.missing_objects.recheck(probe)
                except Exception:
                    _log.exception("re-checking missing remote objects failed")

    # -- partitions ------------------------------------------------------------------------

    def _tiered_names(self) -> set[str]:
        return {tp.topic for tp in self.metadata.partitions()}

    def partition(
        self, *, topic: str | None, topic_id: uuid.UUID | None, partition: int
    ) -> TopicIdPartition | None:
        """The tiered partition a request names, or ``None`` if nothing of it is tiered.

        By id when the request has one (Fetch v13+); by name otherwise, refusing the tiered
        data of an older topic of that name when the broker says the name has a newer id
        (see :mod:`proxy.remote.topic_ids`).
        """
        if topic_id is not None:
            return self.metadata.topic_id_partition_by_id(topic_id, partition)
        if topic is None:
            return None
        tp = self.metadata.topic_id_partition(topic, partition)
        if tp is None:
            return None
        current = self.topic_ids.current(topic)
        if current is not None and current != tp.topic_id:
            return None
        return tp

    def remote_range(self, tp: TopicIdPartition) -> RemoteRange | None:
        """The partition's tiered offsets and lineage, ``None`` if nothing is readable."""
        start = self.metadata.remote_log_start_offset(tp)
        end = self.metadata.remote_log_end_offset(tp)
        if start is None or end is None:
            return None
        return RemoteRange(start=start, end=end, lineage=self.lineage(tp))

    def lineage(self, tp: TopicIdPartition) -> Sequence[EpochEntry]:
        return self.metadata.lineage(tp)

    def bytes_per_record(self, tp: TopicIdPartition) -> float:
        """Average bytes per offset of the partition's remote segments (for offload lag)."""
        size = offsets = 0
        for segment in self.metadata.segments(tp):
            size += segment.segment_size_in_bytes
            offsets += segment.end_offset - segment.start_offset + 1
        return size / offsets if offsets else 0.0


async def open_remote_tier(
    settings: Mapping[str, Any],
    *,
    bootstrap_servers: str,
    metrics: RemoteMetrics | None = None,
    readiness: Readiness | None = None,
    check_interval: float = 10.0,
) -> tuple[RemoteTier, Callable[[], Any]]:
    """Build the remote tier from flat settings; returns it and an async closer.

    The metadata manager is started (it consumes ``__remote_log_metadata`` up to its end)
    before this returns, so the first Fetch already sees every tiered segment.

    With ``readiness``, adds its checks, probed every ``check_interval`` seconds:
    ``remote_metadata`` (the metadata view caught up with the topic's end as it was when
    asked) and ``remote_storage`` (the storage answers a listing of the prefix); and
    ``remote_objects``, which counts the objects known missing and always passes
    (:mod:`proxy.remote.missing_objects` says why). Other signals of the remote tier are
    added to the same ``readiness`` here.

    :raises ConfigError: for invalid settings.
    :raises MetadataTopicError: if the metadata topic cannot be used.
    """
    fetch_config = from_settings(RemoteFetchConfig, settings)
    storage_config = from_settings(RemoteStorageConfig, settings)
    metadata_config = from_settings(RemoteLogMetadataConfig, settings)
    security = from_settings(KafkaSecurityConfig, settings).with_secrets_resolved()
    await announce_remote_tier(storage_config, metadata_config, command="serve", log=_log)
    rsm = create_remote_storage(storage_config)
    rlmm = TopicBasedRemoteLogMetadataManager(
        metadata_config,
        bootstrap_servers=bootstrap_servers,
        security=security,
        command="serve",
        storage_identity=storage_identity(storage_config),
    )
    try:
        await rlmm.start(wait_for_cluster=True)
    except BaseException:
        with contextlib.suppress(Exception):
            await rlmm.close()
        await rsm.close()
        raise
    if rlmm.snapshot_slot is not None:
        _log.info("%s", rlmm.snapshot_slot.describe())
    indexes = RemoteIndexCache.from_config(rsm, from_settings(IndexCacheConfig, settings))
    offsets_client = KafkaClient(
        bootstrap_servers,
        client_id="tierproxy-broker-offsets",
        request_timeout_ms=_OFFSETS_TIMEOUT_MS,
        security=security,
    )
    chunks = ChunkCache(
        rsm,
        max_bytes=fetch_config.chunk_cache_size_bytes,
        chunk_bytes=fetch_config.chunk_size_bytes,
        prefetch_chunks=fetch_config.chunk_prefetch_chunks,
        read_ahead_max_bytes=fetch_config.chunk_read_ahead_max_bytes,
        disk_dir=fetch_config.chunk_cache_dir or None,
        disk_max_bytes=fetch_config.chunk_cache_disk_size_bytes,
    )
    tier = RemoteTier(
        config=fetch_config,
        metadata=rlmm.cache,
        indexes=indexes,
        chunks=chunks,
        publish=rlmm.publish,
        topic_id_lookup=functools.partial(_current_topic_ids, bootstrap_servers, security),
        offset_lister=offsets_client,
        metrics=metrics,
        probe=rsm,
        identities=ClientIdentities(from_settings(ClientPrincipalConfig, settings)),
    )
    if metrics is not None:
        metrics.watch_metadata(rlmm)
    if readiness is not None:
        readiness.add_probe(
            "remote_metadata",
            rlmm.wait_until_caught_up,
            interval=check_interval,
            late=f"behind the end of {metadata_config.topic_name} for {check_interval:g} s",
        )
        if isinstance(rsm, _CheckedStorage):
            readiness.add_probe("remote_storage", rsm.check, interval=check_interval)
        readiness.add("remote_objects", tier.missing_objects.verdict)
    tier.start()

    async def close() -> None:
        await tier.close()
        await offsets_client.close()
        await rlmm.close()
        await rsm.close()

    return tier, close


async def _current_topic_ids(
    bootstrap_servers: str, security: KafkaSecurityConfig, names: list[str]
) -> dict[str, uuid.UUID]:
    """The broker's current ids of ``names`` (Metadata v10+), for :class:`TopicIds`; a name
    the broker hides (no DESCRIBE for the proxy's principal) is logged as a warning naming the
    ACL, at every refresh until it is added."""
    async with KafkaClient(
        bootstrap_servers, client_id="tierproxy-topic-ids", security=security
    ) as client:
        metadata = await client.metadata(names)
    for name, topic in sorted(metadata.topics.items()):
        if topic.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            _log.warning("%s", denied("Metadata", name, principal_of(security)))
    return {
        name: topic.topic_id
        for name, topic in metadata.topics.items()
        if topic.error == KafkaError.NONE and topic.topic_id != NO_TOPIC_ID
    }
