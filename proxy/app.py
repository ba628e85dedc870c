"""The composition root of ``tierproxy serve``: the one place that builds the running proxy.

From the checked :class:`~proxy.settings.Settings` it builds every part and hands each one
what it uses, as arguments; nothing else builds parts of another. In order:

1. the metrics registry, ``/readyz``'s checks and the health endpoint, which serves from the
   start (``/livez`` answers while the proxy waits for the cluster);
2. one TLS and SASL login to a bootstrap broker, so that refused credentials stop the start;
3. with ``remote.log.storage.system.enable``, the remote tier: the storage manager, the
   metadata manager (consuming the metadata topic to its end before a client is served), the
   index and chunk caches, the read path's services (:class:`ReadPath`), its interceptors,
   metrics and readiness checks;
4. the server (:func:`proxy.server.run_until_stopped`) until SIGTERM or SIGINT.

Everything is closed in the reverse order once the last connection is gone. Without the
remote tier the proxy is a plain pass-through proxy with the server's own interceptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from protocol.errors import KafkaError
from proxy.health import Liveness, Readiness
from proxy.health_endpoint import serving
from proxy.identities import ClientIdentities
from proxy.interceptors.base import Interceptor
from proxy.interceptors.delete_records import DeleteRecordsInterceptor
from proxy.interceptors.fetch import FetchInterceptor
from proxy.interceptors.list_offsets import ListOffsetsInterceptor
from proxy.interceptors.metadata_offsets import MetadataOffsets
from proxy.interceptors.offset_for_leader_epoch import OffsetForLeaderEpochInterceptor
from proxy.interceptors.sasl_identity import SaslIdentity
from proxy.interceptors.topic_ids import MetadataTopicIds
from proxy.logs import event
from proxy.metrics import ProxyMetrics
from proxy.remote.broker_checks import BrokerChecks
from proxy.remote.broker_offsets import BrokerOffsets, OffsetLister
from proxy.remote.broker_view import BrokerView
from proxy.remote.client_quotas import ClientQuotas
from proxy.remote.config import RemoteFetchConfig
from proxy.remote.fallbacks import BrokerFallbacks
from proxy.remote.fetch_plan import FetchPlanner
from proxy.remote.metrics import NoReadCounters, ReadCounters, ReadPathGauges, RemoteMetrics
from proxy.remote.missing_objects import MissingObjects, watch_objects
from proxy.remote.offload import OffloadPolicy
from proxy.remote.pool import ReaderPool
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.quota import FetchQuota
from proxy.remote.reads import RemoteReads
from proxy.remote.sessions import FetchSessions
from proxy.remote.tier import MetadataPublisher, RemoteLogMetadata, TieredPartitions, tiered_names
from proxy.remote.topic_ids import TopicIdLookup, TopicIds
from proxy.server import SERVER_CHECKS, run_until_stopped
from proxy.settings import Settings
from proxy.workers.role import WorkerRole
from storage.chunk_cache import ChunkCache
from storage.index_cache import RemoteIndexCache
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import NO_TOPIC_ID, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.remote_reader import RemoteLogReader
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.rsm.base import RemoteStorageManager, SegmentProbe
from storage.rsm.factory import create_remote_storage, storage_identity
from storage.startup import announce_remote_tier, check_cluster_login

__all__ = ["ReadPath", "build_read_path", "read_path_interceptors", "running", "serve"]

_log = logging.getLogger("tierproxy.remote")

_OFFSETS_TIMEOUT_MS: Final = 5_000
"""Request timeout of the proxy's own ListOffsets (:mod:`proxy.remote.broker_offsets`): no
client waits for them beyond a short hold, but a broker that does not answer within this
is taken as failed, and the partitions are left to reach probes for a while."""
_TOPIC_IDS_REFRESH_SECONDS: Final = 30.0
_MIN_LOOKUP_SECONDS: Final = 1.0
"""A ListOffsets by time may look in the remote tier's time indexes at least this long,
however short ``remote.fetch.max.wait.ms`` is."""


@runtime_checkable
class _CheckedStorage(Protocol):
    """A storage backend that can prove it is reachable (S3 and the local directory can)."""

    async def check(self) -> None: ...


async def serve(settings: Settings, *, worker: WorkerRole | None = None) -> None:
    """Run the proxy until SIGTERM/SIGINT, with the remote tier if the settings enable it.

    As one ``worker`` of several, the listeners share their ports and the health endpoint
    is the worker's own, for the supervisor.

    :raises ConfigError: for unusable ``metrics.*`` settings, or a TLS or SASL login the
        cluster refuses.
    :raises EndpointError: when the metrics port cannot be bound.
    :raises ListenerError: when a client listener cannot be bound.
    :raises MetadataTopicError: if the metadata topic cannot be used.
    :raises TimeoutError: the metadata topic was not read within
        ``remote.log.metadata.initialization.timeout.ms``.
    """
    metrics = ProxyMetrics()
    # The server adds these once it exists; until then the process is not ready.
    readiness = Readiness(required=SERVER_CHECKS)
    endpoint = "" if worker is None else worker.endpoint
    with serving(
        settings.proxy, registry=metrics.registry, readiness=readiness, unix_path=endpoint
    ) as liveness:
        readiness.start()
        try:
            await _serve(
                settings,
                metrics=metrics,
                readiness=readiness,
                liveness=liveness,
                reuse_port=worker is not None,
            )
        finally:
            await readiness.close()


async def _serve(
    settings: Settings,
    *,
    metrics: ProxyMetrics,
    readiness: Readiness,
    liveness: Liveness,
    reuse_port: bool,
) -> None:
    config = settings.proxy
    await check_cluster_login(
        config.bootstrap_servers, settings.security, log=logging.getLogger("tierproxy.startup")
    )
    async with contextlib.AsyncExitStack() as stack:
        interceptors: tuple[Interceptor, ...] = ()
        if settings.remote.enabled:
            interceptors = await stack.enter_async_context(
                _remote_tier(settings, metrics=metrics, readiness=readiness)
            )
        await run_until_stopped(
            config,
            interceptors=interceptors,
            metrics=metrics,
            security=settings.security,
            readiness=readiness,
            liveness=liveness,
            reuse_port=reuse_port,
        )


@contextlib.asynccontextmanager
async def _remote_tier(
    settings: Settings, *, metrics: ProxyMetrics, readiness: Readiness
) -> AsyncIterator[tuple[Interceptor, ...]]:
    """The remote tier, started, as the read path's interceptors; closed on exit.

    The metadata manager has consumed the metadata topic up to its end before this yields,
    so the first Fetch already sees every tiered segment. Adds to ``readiness``, probed every
    ``health.check.interval.ms``: ``remote_metadata`` (the metadata view caught up with the
    topic's end as it was when asked), ``remote_storage`` (the storage answers a listing of
    the prefix) and ``remote_objects``, which counts the objects known missing and always
    passes (:mod:`proxy.remote.missing_objects` says why).
    """
    bootstrap, security = settings.proxy.bootstrap_servers, settings.security
    await announce_remote_tier(settings.storage, settings.metadata, command="serve", log=_log)
    async with contextlib.AsyncExitStack() as stack:
        rsm = create_remote_storage(settings.storage)
        stack.push_async_callback(rsm.close)
        rlmm = TopicBasedRemoteLogMetadataManager(
            settings.metadata,
            bootstrap_servers=bootstrap,
            security=security,
            command="serve",
            storage_identity=storage_identity(settings.storage),
        )
        try:
            await rlmm.start(wait_for_cluster=True)
        except BaseException:
            with contextlib.suppress(Exception):
                await rlmm.close()
            raise
        stack.push_async_callback(rlmm.close)
        if rlmm.snapshot_slot is not None:
            event(
                _log,
                logging.INFO,
                "metadata.snapshots.slot",
                msg=rlmm.snapshot_slot.describe(),
                slot=rlmm.snapshot_slot.number,
            )
        offsets_client = KafkaClient(
            bootstrap,
            client_id="tierproxy-broker-offsets",
            request_timeout_ms=_OFFSETS_TIMEOUT_MS,
            security=security,
        )
        stack.push_async_callback(offsets_client.close)
        remote_metrics = RemoteMetrics(metrics.registry)
        path = build_read_path(
            settings.remote,
            metadata=rlmm.cache,
            indexes=RemoteIndexCache.from_config(rsm, settings.index_cache),
            chunks=_chunk_cache(rsm, settings.remote),
            topic_id_lookup=functools.partial(_current_topic_ids, bootstrap, security),
            offset_lister=offsets_client,
            counters=remote_metrics,
            identities=ClientIdentities(settings.principals),
        )
        remote_metrics.watch(path.gauges())
        remote_metrics.watch_metadata(rlmm)
        remote_metrics.watch_storage(rsm.counters)
        stack.callback(remote_metrics.unwatch)
        interval = settings.proxy.health_check_interval_ms / 1000
        readiness.add_probe(
            "remote_metadata",
            rlmm.wait_until_caught_up,
            interval=interval,
            late=f"behind the end of {settings.metadata.topic_name} for {interval:g} s",
        )
        if isinstance(rsm, _CheckedStorage):
            readiness.add_probe("remote_storage", rsm.check, interval=interval)
        readiness.add("remote_objects", path.missing_objects.verdict)
        await stack.enter_async_context(running(path, probe=rsm))
        yield read_path_interceptors(
            path,
            config=settings.remote,
            publish=rlmm.publish,
            pipeline_client_id=settings.tiering.client_id,
        )


def _chunk_cache(rsm: RemoteStorageManager, config: RemoteFetchConfig) -> ChunkCache:
    return ChunkCache(
        rsm,
        max_bytes=config.chunk_cache_size_bytes,
        chunk_bytes=config.chunk_size_bytes,
        prefetch_chunks=config.chunk_prefetch_chunks,
        read_ahead_max_bytes=config.chunk_read_ahead_max_bytes,
        disk_dir=config.chunk_cache_dir or None,
        disk_max_bytes=config.chunk_cache_disk_size_bytes,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadPath:
    """The tiered read path's services, shared across connections, as :func:`build_read_path`
    made them: the root hands each interceptor the ones it uses
    (:func:`read_path_interceptors`), the metrics theirs (:meth:`gauges`), and runs them
    (:func:`running`)."""

    partitions: TieredPartitions
    reader: RemoteLogReader
    pool: ReaderPool
    purgatory: RemoteFetchPurgatory
    quota: FetchQuota
    offload: OffloadPolicy
    sessions: FetchSessions
    broker_checks: BrokerChecks
    broker_view: BrokerView
    broker_offsets: BrokerOffsets
    fallbacks: BrokerFallbacks
    identities: ClientIdentities
    client_quotas: ClientQuotas
    topic_ids: TopicIds
    missing_objects: MissingObjects
    """Objects the metadata lists as readable that storage lacks, now."""
    counters: ReadCounters
    """What the read path counts per topic: the metrics, or nothing."""
    metadata: RemoteLogMetadata
    indexes: RemoteIndexCache
    chunks: ChunkCache

    def gauges(self) -> ReadPathGauges:
        """What the metrics read at every scrape."""
        return ReadPathGauges(
            pool=self.pool,
            purgatory=self.purgatory,
            quota=self.quota,
            broker_offsets=self.broker_offsets,
            broker_checks=self.broker_checks,
            missing_objects=self.missing_objects,
            broker_view=self.broker_view,
            client_quotas=self.client_quotas,
            indexes=self.indexes,
            chunks=self.chunks,
        )


def build_read_path(
    config: RemoteFetchConfig,
    *,
    metadata: RemoteLogMetadata,
    indexes: RemoteIndexCache,
    chunks: ChunkCache,
    topic_id_lookup: TopicIdLookup | None = None,
    offset_lister: OffsetLister | None = None,
    counters: ReadCounters | None = None,
    identities: ClientIdentities | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ReadPath:
    """The read path's services over the metadata cache and the caches, not yet running.

    :param topic_id_lookup: how to ask the broker for topic ids; ``None``: only what
        Metadata answers through the proxy show.
    :param offset_lister: how the proxy asks brokers ListOffsets itself, before a
        partition's first Fetch; ``None``: first probes are reach probes.
    :param identities: how clients' principals are named (the default rules if ``None``).
    """
    topic_ids = TopicIds(
        lookup=topic_id_lookup,
        tiered_names=functools.partial(tiered_names, metadata),
        refresh_seconds=_TOPIC_IDS_REFRESH_SECONDS,
    )
    partitions = TieredPartitions(metadata=metadata, topic_ids=topic_ids)
    missing = MissingObjects(readable=partitions.readable, clock=clock)
    broker_view = BrokerView()
    return ReadPath(
        partitions=partitions,
        reader=RemoteLogReader(metadata=metadata, indexes=indexes, chunks=chunks, missing=missing),
        pool=ReaderPool(
            workers=config.reader_threads, max_pending=config.reader_max_pending_tasks, clock=clock
        ),
        purgatory=RemoteFetchPurgatory(max_wait_ms=config.max_wait_ms),
        quota=FetchQuota(
            bytes_per_second=config.fetch_max_bytes_per_second,
            window_num=config.fetch_quota_window_num,
            window_seconds=config.fetch_quota_window_size_seconds,
            clock=clock,
        ),
        offload=OffloadPolicy(
            enabled=config.offload_enable,
            min_lag_records=config.offload_min_lag_records,
            min_lag_bytes=config.offload_min_lag_bytes,
        ),
        sessions=FetchSessions(slots=config.session_cache_slots),
        broker_checks=BrokerChecks(reuse_ms=config.broker_check_reuse_ms),
        broker_view=broker_view,
        broker_offsets=BrokerOffsets(
            broker_view=broker_view, ranges=partitions, lister=offset_lister, clock=clock
        ),
        fallbacks=BrokerFallbacks(),
        identities=identities or ClientIdentities(),
        client_quotas=ClientQuotas(
            default_bytes_per_second=config.client_quota_bytes_per_second,
            bounds=config.client_quota_bounds(),
            window_num=config.quota_window_num,
            window_seconds=config.quota_window_size_seconds,
            clock=clock,
        ),
        topic_ids=topic_ids,
        missing_objects=missing,
        counters=counters if counters is not None else NoReadCounters(),
        metadata=metadata,
        indexes=indexes,
        chunks=chunks,
    )


@contextlib.asynccontextmanager
async def running(path: ReadPath, *, probe: SegmentProbe | None = None) -> AsyncIterator[None]:
    """Run the reader pool, the topic-id refresh and, with a ``probe`` (the storage manager),
    the start-up sample and re-checks of missing objects; on exit stop them and the caches'
    background loads (needs the running event loop)."""
    path.pool.start()
    path.topic_ids.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(path.indexes.close)
        stack.push_async_callback(path.chunks.close)
        stack.push_async_callback(path.pool.close)
        stack.push_async_callback(path.broker_offsets.close)
        stack.push_async_callback(path.topic_ids.close)
        if probe is not None:
            watch = watch_objects(path.missing_objects, path.metadata, probe)
            await stack.enter_async_context(_task(watch, name="remote-object-watch"))
        yield


@contextlib.asynccontextmanager
async def _task(work: Coroutine[Any, Any, None], *, name: str) -> AsyncIterator[None]:
    """``work`` as a task while the block runs, cancelled after it."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def read_path_interceptors(
    path: ReadPath,
    *,
    config: RemoteFetchConfig,
    publish: MetadataPublisher,
    pipeline_client_id: str,
) -> tuple[Interceptor, ...]:
    """The read path's interceptors over ``path``, in registration order.

    :param publish: how the proxy records a metadata change (the metadata manager's).
    :param pipeline_client_id: the tiering pipeline's client id, whose DeleteRecords are
        never taken for an operator's.
    """
    reads = RemoteReads(
        pool=path.pool,
        reader=path.reader,
        quota=path.quota,
        broker_view=path.broker_view,
        fallbacks=path.fallbacks,
        counters=path.counters,
    )
    planner = FetchPlanner(
        partitions=path.partitions,
        broker_view=path.broker_view,
        offload=path.offload,
        fallbacks=path.fallbacks,
        reach_probes=path.broker_offsets,
    )
    return (
        SaslIdentity(path.identities),
        MetadataTopicIds(path.topic_ids),
        MetadataOffsets(partitions=path.partitions, learner=path.broker_offsets),
        FetchInterceptor(
            planner=planner,
            reads=reads,
            sessions=path.sessions,
            purgatory=path.purgatory,
            broker_view=path.broker_view,
            quotas=path.client_quotas,
            identities=path.identities,
            checks=path.broker_checks,
        ),
        ListOffsetsInterceptor(
            partitions=path.partitions,
            broker_view=path.broker_view,
            timestamps=path.reader,
            counters=path.counters,
            lookup_seconds=max(config.max_wait_ms / 1000, _MIN_LOOKUP_SECONDS),
            kip405_minus_3=config.list_offsets_kip405_minus_3,
        ),
        OffsetForLeaderEpochInterceptor(path.partitions),
        DeleteRecordsInterceptor(
            partitions=path.partitions,
            broker_view=path.broker_view,
            publish=publish,
            pipeline_client_id=pipeline_client_id,
        ),
    )


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
            event(
                _log,
                logging.WARNING,
                "topic_ids.denied",
                msg=denied("Metadata", name, principal_of(security)),
                topic=name,
            )
    return {
        name: topic.topic_id
        for name, topic in metadata.topics.items()
        if topic.error == KafkaError.NONE and topic.topic_id != NO_TOPIC_ID
    }
