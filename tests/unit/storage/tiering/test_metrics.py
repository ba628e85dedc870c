"""The pipeline's Prometheus series follow its cycles."""

from __future__ import annotations

from prometheus_client import generate_latest

from storage.tiering.metrics import TieringMetrics
from storage.tiering.report import CycleReport, Failure, Stage, TopicStats


def value(metrics: TieringMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def report(*, failures: tuple[Failure, ...] = (), **topics: TopicStats) -> CycleReport:
    return CycleReport(
        started_ms=0, seconds=2.5, copy_seconds=1.0, topics=topics, failures=failures
    )


def test_a_good_cycle_sets_lag_adds_counts_and_stamps_success() -> None:
    metrics = TieringMetrics(task_interval_s=30, clock=lambda: 1_000.0)
    stats = TopicStats(segments_copied=3, bytes_copied=300, lag_bytes=50, lag_segments=0)
    metrics.cycle_ran(report(orders=stats))
    metrics.cycle_ran(report(orders=stats))
    assert value(metrics, "tierproxy_tiering_copy_lag_bytes", topic="orders") == 50
    assert value(metrics, "tierproxy_tiering_copied_segments_total", topic="orders") == 6
    assert value(metrics, "tierproxy_tiering_copied_bytes_total", topic="orders") == 600
    assert value(metrics, "tierproxy_tiering_cycles_total", outcome="ok") == 2
    assert value(metrics, "tierproxy_tiering_last_success_timestamp_seconds") == 1_000
    assert value(metrics, "tierproxy_tiering_last_cycle_seconds") == 2.5
    assert value(metrics, "tierproxy_tiering_task_interval_seconds") == 30


def test_a_cycle_with_failures_counts_as_errors_and_keeps_the_last_success() -> None:
    now = iter([10.0, 20.0])
    metrics = TieringMetrics(task_interval_s=30, clock=lambda: next(now))
    copy = Failure(stage=Stage.COPY, reason="disk full", topic="orders", partition=0, segment="x")
    refused = Failure(stage=Stage.SURVEY, reason="not authorised", topic="clicks")
    planning = Failure(stage=Stage.PLANNING, reason="checkpoint gone", topic="orders", partition=1)
    metrics.cycle_ran(report(orders=TopicStats()))
    metrics.cycle_ran(report(failures=(copy,), orders=TopicStats(lag_segments=1)))
    metrics.cycle_ran(report(failures=(refused, planning), orders=TopicStats()))
    metrics.cycle_failed()
    assert value(metrics, "tierproxy_tiering_cycles_total", outcome="errors") == 2
    assert value(metrics, "tierproxy_tiering_cycles_total", outcome="failed") == 1
    assert value(metrics, "tierproxy_tiering_last_success_timestamp_seconds") == 10
    assert value(metrics, "tierproxy_tiering_copy_failures_total", topic="orders") == 1
    for stage, count in (("copy", 1), ("survey", 1), ("planning", 1), ("retention", None)):
        assert value(metrics, "tierproxy_tiering_failures_total", stage=stage) == count


def test_a_topic_no_longer_tiered_leaves_the_lag_gauges() -> None:
    metrics = TieringMetrics(task_interval_s=30)
    metrics.cycle_ran(report(orders=TopicStats(lag_bytes=5), clicks=TopicStats(lag_bytes=7)))
    metrics.cycle_ran(report(orders=TopicStats(lag_bytes=5)))
    assert value(metrics, "tierproxy_tiering_copy_lag_bytes", topic="clicks") is None
    assert value(metrics, "tierproxy_tiering_copy_lag_bytes", topic="orders") == 5


def test_holding_is_read_at_each_scrape_and_no_created_series_is_exported() -> None:
    metrics = TieringMetrics(task_interval_s=30)
    assert value(metrics, "tierproxy_tiering_holding") == 0
    held = [True]
    metrics.watch_holding(lambda: held[0])
    assert value(metrics, "tierproxy_tiering_holding") == 1
    held[0] = False
    assert value(metrics, "tierproxy_tiering_holding") == 0
    metrics.cycle_ran(report(orders=TopicStats()))
    assert b"_created" not in generate_latest(metrics.registry)
