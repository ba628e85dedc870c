"""Prometheus metrics of the tiering pipeline, served on ``tiering.metrics.port``.

Rules of this file:

- Copy lag follows Kafka's RemoteLogManager metrics (``RemoteCopyLagBytes``,
  ``RemoteCopyLagSegments``, see :mod:`.report`): gauges per topic, set at the end of every
  cycle that ran; a topic no longer tiered drops out at the next cycle.
- Counters add what each cycle did, per topic; a cycle that failed as a whole (the cluster
  went away, a bug) counts under ``outcome="failed"`` and changes no gauge.
- ``tierproxy_tiering_holding`` says whether this process holds the cluster's tiering (one
  pipeline at a time: a standby answers 0); alert when no process of a cluster answers 1.
- The last successful cycle's end time and the task interval are exported together, so an
  alert can ask "no good cycle for three intervals" without knowing the configuration.
- The registry is the instance's own; scrapes run on prometheus-client's thread and only
  read values.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.exposition import start_http_server

from storage.tiering.report import CycleReport

__all__ = ["TieringMetrics", "TieringMetricsServer"]

_CYCLE_OUTCOMES: Final = ("ok", "errors", "failed")


class TieringMetrics:
    """The pipeline's series, in their own registry."""

    def __init__(self, *, task_interval_s: float, clock: Callable[[], float] = time.time) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series
        self.registry = CollectorRegistry()
        self._clock = clock
        self._lag_bytes = self._per_topic_gauge(
            "tierproxy_tiering_copy_lag_bytes",
            "Data below the last stable offset not yet in the remote tier, per topic, as of "
            "the last cycle (Kafka's RemoteCopyLagBytes; above the remote log end an estimate).",
        )
        self._lag_segments = self._per_topic_gauge(
            "tierproxy_tiering_copy_lag_segments",
            "Closed segments not copied by the last cycle (failures), per topic (Kafka's "
            "RemoteCopyLagSegments).",
        )
        self._copied_segments = self._per_topic_counter(
            "tierproxy_tiering_copied_segments", "Segments copied to remote storage, per topic."
        )
        self._copied_bytes = self._per_topic_counter(
            "tierproxy_tiering_copied_bytes", "Bytes copied to remote storage, per topic."
        )
        self._copy_failures = self._per_topic_counter(
            "tierproxy_tiering_copy_failures",
            "Segments whose copy failed (retried next cycle), per topic.",
        )
        self._failures = Counter(
            "tierproxy_tiering_failures",
            "What cycles could not do, per stage (survey, read, planning, publish, copy, "
            "retention, clean-up): each a segment, partition or topic, logged as "
            "tiering.cycle.error.",
            ["stage"],
            registry=self.registry,
        )
        self._expired_segments = self._per_topic_counter(
            "tierproxy_tiering_expired_segments",
            "Remote segments deleted by remote retention, per topic.",
        )
        self._missing_offsets = self._per_topic_counter(
            "tierproxy_tiering_missing_offsets",
            "Offsets the broker deleted before they were tiered, found by cycles, per topic "
            "(alert on any increase: broker retention outran tiering).",
        )
        self._cycles = Counter(
            "tierproxy_tiering_cycles",
            "Tiering cycles, per outcome: ok; errors (it ran, some segments or topics "
            "failed); failed (it could not run: the cluster, storage or a bug).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in _CYCLE_OUTCOMES:
            self._cycles.labels(outcome)
        self._last_success = Gauge(
            "tierproxy_tiering_last_success_timestamp_seconds",
            "When the last cycle without errors ended (seconds since the epoch; 0: none yet).",
            registry=self.registry,
        )
        self._cycle_seconds = Gauge(
            "tierproxy_tiering_last_cycle_seconds",
            "How long the last cycle that ran took.",
            registry=self.registry,
        )
        interval = Gauge(
            "tierproxy_tiering_task_interval_seconds",
            "The pause between cycles (remote.log.manager.task.interval.ms).",
            registry=self.registry,
        )
        interval.set(task_interval_s)
        self._holding = Gauge(
            "tierproxy_tiering_holding",
            "1 while this pipeline holds the cluster's tiering (its transactional id); 0 while "
            "it waits as a standby or for the cluster.",
            registry=self.registry,
        )
        self._topics: set[str] = set()

    def _per_topic_gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, ["topic"], registry=self.registry)

    def _per_topic_counter(self, name: str, documentation: str) -> Counter:
        return Counter(name, documentation, ["topic"], registry=self.registry)

    def watch_holding(self, holding: Callable[[], bool]) -> None:
        """Answer ``tierproxy_tiering_holding`` from ``holding`` at each scrape."""
        self._holding.set_function(lambda: 1.0 if holding() else 0.0)

    def cycle_ran(self, report: CycleReport) -> None:
        """A cycle ran to its end (``report`` may list errors and failed copies)."""
        for gone in self._topics - report.topics.keys():
            self._lag_bytes.remove(gone)
            self._lag_segments.remove(gone)
        self._topics = set(report.topics)
        for topic, stats in report.topics.items():
            self._lag_bytes.labels(topic).set(stats.lag_bytes)
            self._lag_segments.labels(topic).set(stats.lag_segments)
            self._copied_segments.labels(topic).inc(stats.segments_copied)
            self._copied_bytes.labels(topic).inc(stats.bytes_copied)
            self._copy_failures.labels(topic).inc(report.copy_failures(topic))
            self._expired_segments.labels(topic).inc(stats.segments_expired)
            self._missing_offsets.labels(topic).inc(stats.missing_offsets)
        for failure in report.failures:
            self._failures.labels(str(failure.stage)).inc()
        self._cycle_seconds.set(report.seconds)
        if report.failures:
            self._cycles.labels("errors").inc()
        else:
            self._cycles.labels("ok").inc()
            self._last_success.set(self._clock())

    def cycle_failed(self) -> None:
        """A cycle could not run (it raised)."""
        self._cycles.labels("failed").inc()


class TieringMetricsServer:
    """``/metrics`` of :class:`TieringMetrics` over HTTP, on prometheus-client's thread."""

    def __init__(self, metrics: TieringMetrics, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=metrics.registry)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and join the thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
