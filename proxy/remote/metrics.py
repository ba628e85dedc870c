"""Prometheus metrics of the tiered read path, in Prometheus's conventions.

Names are snake case in base units, ``_total`` only on counters; each help text names the
Kafka metric it stands for. Kafka's meters (``RemoteFetchBytesPerSec`` and friends, per
topic) become counters: Prometheus derives the per-second rate with ``rate()``. Gauges and
the caches' counters are read from their owners at scrape time, so the read path pays
nothing for them.

Series (Kafka's MBean in parentheses):

- ``tierproxy_remote_fetch_bytes_total{topic}`` (BrokerTopicMetrics RemoteFetchBytesPerSec)
- ``tierproxy_remote_fetch_requests_total{topic}`` (BrokerTopicMetrics RemoteFetchRequestsPerSec)
- ``tierproxy_remote_fetch_errors_total{topic,reason}`` (BrokerTopicMetrics
  RemoteFetchErrorsPerSec)
- ``tierproxy_remote_log_reader_task_queue_size`` (RemoteStorageThreadPool
  RemoteLogReaderTaskQueueSize)
- ``tierproxy_remote_log_reader_idle_ratio`` (RemoteStorageThreadPool
  RemoteLogReaderAvgIdlePercent, as a 0..1 ratio)
- ``tierproxy_remote_fetch_purgatory_size`` (DelayedOperationPurgatory RemoteFetch
  PurgatorySize)
- ``tierproxy_remote_fetch_expires_total`` (DelayedRemoteFetchMetrics ExpiresPerSec)
- ``tierproxy_remote_index_cache_{hits,misses,evictions,expirations}_total`` (Kafka's
  RemoteIndexCache exports none)
- ``tierproxy_remote_chunk_cache_{hits,misses,evictions,prefetches,disk_hits,gets}_total``,
  ``tierproxy_remote_chunk_cache_bytes`` (tierproxy's chunk cache; Kafka has none)
- ``tierproxy_remote_storage_integrity_errors_total``,
  ``tierproxy_remote_storage_key_errors_total``,
  ``tierproxy_remote_storage_manifest_gets_total``,
  ``tierproxy_remote_storage_read_bytes_total{form="stored"|"original"}`` (tierproxy's
  segment layer, :mod:`storage.rsm.segments`: chunks that failed their checksums, reads
  refused for a missing key, and the bytes read as stored against as decoded: the
  difference is what compression saves)
- ``tierproxy_remote_log_metadata_records_{applied,skipped}_total`` (records of the
  metadata topic the proxy's consumer applied, or could not decode or apply; Kafka's
  consumer task logs them and exports nothing)
- ``tierproxy_remote_log_reader_rejected_total``, ``tierproxy_remote_fetch_throttled_total``
  (tierproxy's: reads refused by a full queue, reads answered empty by the fetch quota)
- ``tierproxy_remote_fetch_reach_probes_total`` (tierproxy's: probes sent before the
  broker's offsets of the partition were known, each answered with one batch the proxy
  drops; see :mod:`proxy.remote.broker_offsets`)
- ``tierproxy_remote_fetch_answered_without_broker_total`` (tierproxy's: Fetches answered
  without a probe to the broker; see :mod:`proxy.remote.broker_checks`)
- ``tierproxy_remote_missing_objects`` (tierproxy's: segments the metadata lists as readable
  whose objects remote storage does not have now; see :mod:`proxy.remote.missing_objects`)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.remote.broker_checks import BrokerChecks
from proxy.remote.broker_offsets import BrokerOffsets
from proxy.remote.broker_view import BrokerView
from proxy.remote.client_quotas import ClientQuotas
from proxy.remote.missing_objects import MissingObjects
from proxy.remote.pool import ReaderPool
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.quota import FetchQuota
from storage.chunk_cache import ChunkCache
from storage.index_cache import RemoteIndexCache
from storage.rsm.segments import StorageCounters

__all__ = [
    "MetadataConsumerCounts",
    "NoReadCounters",
    "ReadCounters",
    "ReadPathGauges",
    "RemoteMetrics",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadPathGauges:
    """The read path's parts whose plain counters and sizes every scrape reads."""

    pool: ReaderPool
    purgatory: RemoteFetchPurgatory
    quota: FetchQuota
    broker_offsets: BrokerOffsets
    broker_checks: BrokerChecks
    missing_objects: MissingObjects
    broker_view: BrokerView
    client_quotas: ClientQuotas
    indexes: RemoteIndexCache
    chunks: ChunkCache


class RemoteMetrics:
    """Per-topic remote fetch counters plus a collector for the pool, caches and purgatory."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.bytes = Counter(
            "tierproxy_remote_fetch_bytes",
            "Bytes of records served from the remote tier, per topic (Kafka: "
            "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec).",
            ["topic"],
            registry=registry,
        )
        self.requests = Counter(
            "tierproxy_remote_fetch_requests",
            "Partition reads from the remote tier, per topic (Kafka: "
            "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec).",
            ["topic"],
            registry=registry,
        )
        self.errors = Counter(
            "tierproxy_remote_fetch_errors",
            "Partition reads from the remote tier that failed, per topic and reason (Kafka: "
            "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchErrorsPerSec).",
            ["topic", "reason"],
            registry=registry,
        )
        self.registry = registry
        self._collector: _ReadPathCollector | None = None
        self._metadata_collector: _MetadataCollector | None = None
        self._storage_collector: _StorageCollector | None = None

    def read_started(self, topic: str) -> None:
        self.requests.labels(topic).inc()

    def bytes_served(self, topic: str, size: int) -> None:
        self.bytes.labels(topic).inc(size)

    def read_failed(self, topic: str, reason: str) -> None:
        self.errors.labels(topic, reason).inc()

    def watch(self, gauges: ReadPathGauges) -> None:
        """Report the read path's pool, caches, purgatory and quotas at every scrape."""
        if self._collector is None:
            self._collector = _ReadPathCollector(gauges)
            self.registry.register(self._collector)

    def watch_metadata(self, consumer: MetadataConsumerCounts) -> None:
        """Report the metadata topic consumer's record counts at every scrape."""
        if self._metadata_collector is None:
            self._metadata_collector = _MetadataCollector(consumer)
            self.registry.register(self._metadata_collector)

    def watch_storage(self, counters: StorageCounters) -> None:
        """Report what the remote storage manager's segment layer counts at every scrape."""
        if self._storage_collector is None:
            self._storage_collector = _StorageCollector(counters)
            self.registry.register(self._storage_collector)

    def unwatch(self) -> None:
        """Stop reporting what :meth:`watch`, :meth:`watch_metadata` and
        :meth:`watch_storage` added."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
            self._collector = None
        if self._metadata_collector is not None:
            self.registry.unregister(self._metadata_collector)
            self._metadata_collector = None
        if self._storage_collector is not None:
            self.registry.unregister(self._storage_collector)
            self._storage_collector = None


class MetadataConsumerCounts(Protocol):
    """What the metadata topic's consumer counts (``TopicBasedRemoteLogMetadataManager``)."""

    @property
    def applied_records(self) -> int: ...

    @property
    def skipped_records(self) -> int: ...


class ReadCounters(Protocol):
    """What the read path counts per topic (:class:`RemoteMetrics`, or nothing)."""

    def read_started(self, topic: str) -> None: ...

    def bytes_served(self, topic: str, size: int) -> None: ...

    def read_failed(self, topic: str, reason: str) -> None: ...


class NoReadCounters:
    """Counts nothing: for a proxy that runs without a metrics registry."""

    def read_started(self, topic: str) -> None:
        """Not counted."""

    def bytes_served(self, topic: str, size: int) -> None:
        """Not counted."""

    def read_failed(self, topic: str, reason: str) -> None:
        """Not counted."""


class _ReadPathCollector:
    """Reads the plain counters of the read path's parts when Prometheus scrapes."""

    def __init__(self, gauges: ReadPathGauges) -> None:
        self._gauges = gauges

    def collect(self) -> Iterable[Metric]:
        tier = self._gauges
        yield _gauge(
            "tierproxy_remote_log_reader_task_queue_size",
            "Remote reads waiting for a reader (Kafka: org.apache.kafka.storage.internals.log:"
            "type=RemoteStorageThreadPool,name=RemoteLogReaderTaskQueueSize).",
            tier.pool.queue_size,
        )
        yield _gauge(
            "tierproxy_remote_log_reader_idle_ratio",
            "Share of reader time spent idle since the previous scrape, 0..1 (Kafka: "
            "org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,"
            "name=RemoteLogReaderAvgIdlePercent).",
            tier.pool.idle_ratio(),
        )
        yield _counter(
            "tierproxy_remote_log_reader_rejected",
            "Remote reads refused because the reader queue was full.",
            tier.pool.rejected,
        )
        yield _gauge(
            "tierproxy_remote_fetch_purgatory_size",
            "Fetches waiting for remote reads (Kafka: kafka.server:"
            "type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=RemoteFetch).",
            tier.purgatory.size,
        )
        yield _counter(
            "tierproxy_remote_fetch_expires",
            "Fetches answered before all their remote reads finished (Kafka: "
            "kafka.server:type=DelayedRemoteFetchMetrics,name=ExpiresPerSec).",
            tier.purgatory.expirations,
        )
        yield _counter(
            "tierproxy_remote_fetch_throttled",
            "Partition reads answered empty because the remote fetch quota was exceeded.",
            tier.quota.throttled,
        )
        yield _counter(
            "tierproxy_remote_fetch_reach_probes",
            "Probes sent just after the remote tier because the broker's offsets of the "
            "partition were not known (no Metadata answer through this proxy had them "
            "asked, or asking failed): the broker ships one batch that the proxy drops. "
            "The reason of each is logged at debug level.",
            tier.broker_offsets.reach_probes,
        )
        yield _counter(
            "tierproxy_remote_fetch_answered_without_broker",
            "Fetches of remote-served partitions (sessionless, or incremental in step with "
            "their fetch session) answered without asking the broker, because it had "
            "answered them on the same connection within "
            "remote.fetch.broker.check.reuse.ms.",
            tier.broker_checks.answered_alone,
        )
        yield _gauge(
            "tierproxy_remote_missing_objects",
            "Segments the metadata lists as readable whose objects remote storage does not "
            "have, as reads and the start-up check found them and until a re-check finds "
            "them again (alert on > 0: their reads fail with KAFKA_STORAGE_ERROR).",
            tier.missing_objects.count,
        )
        gaps = GaugeMetricFamily(
            "tierproxy_remote_log_gap_records",
            "Offsets the broker deleted before they were tiered, between a partition's remote "
            "log end and the broker's log start, per topic: the remote tier below such a gap "
            "is not served (alert on > 0: broker retention outran tiering).",
            labels=["topic"],
        )
        per_topic: dict[str, int] = {}
        for tp, (_remote_end, missing) in tier.broker_view.gaps().items():
            per_topic[tp.topic] = per_topic.get(tp.topic, 0) + missing
        for topic, missing in sorted(per_topic.items()):
            gaps.add_metric([topic], missing)
        yield gaps
        throttled = CounterMetricFamily(
            "tierproxy_remote_fetch_client_throttle_seconds",
            "Throttle time given to clients whose remote fetch bytes broke their quota "
            "(remote.fetch.client.quota.bytes.per.second), per user and client id "
            "(Kafka's Fetch throttle-time per client).",
            labels=["user", "client_id"],
        )
        for entity, milliseconds in sorted(
            tier.client_quotas.throttle_ms.items(),
            key=lambda item: (item[0].principal or "", item[0].client_id or ""),
        ):
            throttled.add_metric(
                [entity.principal or "", entity.client_id or ""], milliseconds / 1000
            )
        yield throttled
        yield from _cache("tierproxy_remote_index_cache", "index files", tier.indexes)
        yield _counter(
            "tierproxy_remote_index_cache_expirations",
            "Index files dropped from the cache because their TTL passed.",
            tier.indexes.expirations,
        )
        yield from _cache("tierproxy_remote_chunk_cache", "segment chunks", tier.chunks)
        yield _counter(
            "tierproxy_remote_chunk_cache_disk_hits",
            "Chunk misses served from the disk tier instead of remote storage.",
            tier.chunks.disk_hits,
        )
        yield _gauge(
            "tierproxy_remote_chunk_cache_bytes",
            "Bytes of segment chunks held in memory.",
            tier.chunks.size_bytes,
        )
        yield _counter(
            "tierproxy_remote_chunk_cache_prefetches",
            "Chunks loaded by read-ahead.",
            tier.chunks.prefetches,
        )
        yield _counter(
            "tierproxy_remote_chunk_cache_gets",
            "Ranged GETs of segment data from remote storage (a miss that joins a load in "
            "flight costs none, so misses and read-aheads together overcount them).",
            tier.chunks.gets,
        )

    def describe(self) -> Iterable[Metric]:
        return ()


class _MetadataCollector:
    """Reads the metadata consumer's counters when Prometheus scrapes."""

    def __init__(self, consumer: MetadataConsumerCounts) -> None:
        self._consumer = consumer

    def collect(self) -> Iterable[Metric]:
        yield _counter(
            "tierproxy_remote_log_metadata_records_applied",
            "Records of the remote log metadata topic applied to the proxy's metadata cache.",
            self._consumer.applied_records,
        )
        yield _counter(
            "tierproxy_remote_log_metadata_records_skipped",
            "Records of the remote log metadata topic skipped because they could not be "
            "decoded or broke the state machine (alert on any increase: a writer is broken).",
            self._consumer.skipped_records,
        )

    def describe(self) -> Iterable[Metric]:
        return ()


class _StorageCollector:
    """Reads the segment layer's counters when Prometheus scrapes."""

    def __init__(self, counters: StorageCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterable[Metric]:
        return _storage(self._counters)

    def describe(self) -> Iterable[Metric]:
        return ()


def _storage(counters: StorageCounters) -> Iterator[Metric]:
    yield _counter(
        "tierproxy_remote_storage_integrity_errors",
        "Chunks and manifests read from remote storage that did not match their checksum "
        "(or encryption tag, or codec): answered KAFKA_STORAGE_ERROR, never cached (alert "
        "on any increase; the log names each object).",
        counters.integrity_failures,
    )
    yield _counter(
        "tierproxy_remote_storage_key_errors",
        "Reads refused because a segment's data key could not be unwrapped (its key id is "
        "not loaded, or is another key): the log names the key id.",
        counters.key_failures,
    )
    yield _counter(
        "tierproxy_remote_storage_manifest_gets",
        "GETs of segment manifests (one per segment read, kept while in use).",
        counters.manifest_gets,
    )
    read = CounterMetricFamily(
        "tierproxy_remote_storage_read_bytes",
        "Bytes of segment chunks read from manifest segments, as stored and as decoded: "
        "their difference is what compression saved on reads.",
        labels=["form"],
    )
    read.add_metric(["stored"], counters.stored_bytes_read)
    read.add_metric(["original"], counters.original_bytes_read)
    yield read


class _Counted(Protocol):
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def evictions(self) -> int: ...


def _cache(prefix: str, what: str, cache: _Counted) -> Iterator[Metric]:
    counts: dict[str, Callable[[], int]] = {
        "hits": lambda: cache.hits,
        "misses": lambda: cache.misses,
        "evictions": lambda: cache.evictions,
    }
    for suffix, read in counts.items():
        yield _counter(
            f"{prefix}_{suffix}", f"{suffix.title()} of the cache of remote {what}.", read()
        )


def _gauge(name: str, doc: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _counter(name: str, doc: str, value: float) -> Metric:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family
