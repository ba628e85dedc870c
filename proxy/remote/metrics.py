"""Prometheus metrics of the tiered read path, named after Kafka's.

Kafka's meters (``RemoteFetchBytesPerSec`` and friends, per topic) become counters with the
same name: Prometheus derives the per-second rate with ``rate()``. Gauges and the caches'
counters are read from their owners at scrape time, so the read path pays nothing for them.

Series (Kafka's MBean in parentheses):

- ``tierproxy_RemoteFetchBytesPerSec_total{topic}`` (BrokerTopicMetrics)
- ``tierproxy_RemoteFetchRequestsPerSec_total{topic}`` (BrokerTopicMetrics)
- ``tierproxy_RemoteFetchErrorsPerSec_total{topic,reason}`` (BrokerTopicMetrics)
- ``tierproxy_RemoteLogReaderTaskQueueSize`` (RemoteStorageThreadPool)
- ``tierproxy_RemoteLogReaderAvgIdlePercent`` (RemoteStorageThreadPool; a 0..1 ratio)
- ``tierproxy_RemoteFetchPurgatorySize`` (DelayedOperationPurgatory, RemoteFetch)
- ``tierproxy_RemoteFetchExpiresPerSec_total`` (DelayedRemoteFetchMetrics.ExpiresPerSec)
- ``tierproxy_RemoteIndexCache{Hits,Misses,Evictions}_total`` (RemoteLogIndexCache*)
- ``tierproxy_RemoteChunkCache{Hits,Misses,Evictions,Prefetches}_total``,
  ``tierproxy_RemoteChunkCacheBytes`` (tierproxy's chunk cache)
- ``tierproxy_RemoteLogReaderRejected_total``, ``tierproxy_RemoteFetchThrottled_total``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from proxy.remote.tier import RemoteTier

__all__ = ["NoReadCounters", "ReadCounters", "RemoteMetrics"]


class RemoteMetrics:
    """Per-topic remote fetch counters plus a collector for the pool, caches and purgatory."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.bytes = Counter(
            "tierproxy_RemoteFetchBytesPerSec",
            "Bytes of records served from the remote tier, per topic.",
            ["topic"],
            registry=registry,
        )
        self.requests = Counter(
            "tierproxy_RemoteFetchRequestsPerSec",
            "Partition reads from the remote tier, per topic.",
            ["topic"],
            registry=registry,
        )
        self.errors = Counter(
            "tierproxy_RemoteFetchErrorsPerSec",
            "Partition reads from the remote tier that failed, per topic and reason.",
            ["topic", "reason"],
            registry=registry,
        )
        self.registry = registry
        self._collector: _TierCollector | None = None

    def read_started(self, topic: str) -> None:
        self.requests.labels(topic).inc()

    def bytes_served(self, topic: str, size: int) -> None:
        self.bytes.labels(topic).inc(size)

    def read_failed(self, topic: str, reason: str) -> None:
        self.errors.labels(topic, reason).inc()

    def watch(self, tier: RemoteTier) -> None:
        """Report ``tier``'s pool, caches, purgatory and quota at every scrape."""
        if self._collector is None:
            self._collector = _TierCollector(tier)
            self.registry.register(self._collector)

    def unwatch(self) -> None:
        if self._collector is not None:
            self.registry.unregister(self._collector)
            self._collector = None


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


class _TierCollector:
    """Reads the plain counters of the storage classes when Prometheus scrapes."""

    def __init__(self, tier: RemoteTier) -> None:
        self._tier = tier

    def collect(self) -> Iterable[Metric]:
        tier = self._tier
        yield _gauge(
            "tierproxy_RemoteLogReaderTaskQueueSize",
            "Remote reads waiting for a reader.",
            tier.pool.queue_size,
        )
        yield _gauge(
            "tierproxy_RemoteLogReaderAvgIdlePercent",
            "Share of reader time spent idle since the previous scrape (0..1).",
            tier.pool.idle_ratio(),
        )
        yield _counter(
            "tierproxy_RemoteLogReaderRejected",
            "Remote reads refused because the reader queue was full.",
            tier.pool.rejected,
        )
        yield _gauge(
            "tierproxy_RemoteFetchPurgatorySize",
            "Fetches waiting for remote reads.",
            tier.purgatory.size,
        )
        yield _counter(
            "tierproxy_RemoteFetchExpiresPerSec",
            "Fetches answered before all their remote reads finished.",
            tier.purgatory.expirations,
        )
        yield _counter(
            "tierproxy_RemoteFetchThrottled",
            "Partition reads answered empty because the remote fetch quota was exceeded.",
            tier.quota.throttled,
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
        yield from _cache("tierproxy_RemoteIndexCache", "index files", tier.indexes)
        yield from _cache("tierproxy_RemoteChunkCache", "segment chunks", tier.chunks)
        yield _gauge(
            "tierproxy_RemoteChunkCacheBytes",
            "Bytes of segment chunks held in memory.",
            tier.chunks.size_bytes,
        )
        yield _counter(
            "tierproxy_RemoteChunkCachePrefetches",
            "Chunks loaded by read-ahead.",
            tier.chunks.prefetches,
        )

    def describe(self) -> Iterable[Metric]:
        return ()


class _Counted(Protocol):
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def evictions(self) -> int: ...


def _cache(prefix: str, what: str, cache: _Counted) -> Iterator[Metric]:
    counts: dict[str, Callable[[], int]] = {
        "Hits": lambda: cache.hits,
        "Misses": lambda: cache.misses,
        "Evictions": lambda: cache.evictions,
    }
    for suffix, read in counts.items():
        yield _counter(f"{prefix}{suffix}", f"{suffix} of the cache of remote {what}.", read())


def _gauge(name: str, doc: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _counter(name: str, doc: str, value: float) -> Metric:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family
