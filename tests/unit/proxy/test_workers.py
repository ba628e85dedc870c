"""Worker processes: how many, their budgets, and the merged metrics and health."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from proxy.commands.serve import worker_count
from proxy.config import ProxyConfig
from proxy.health import Readiness, Verdict
from proxy.health_endpoint import serving
from proxy.metrics import ProxyMetrics
from proxy.workers.aggregate import WorkerAnswers, merge_families, parse_exposition
from proxy.workers.budgets import worker_settings
from proxy.workers.cores import available_cores
from proxy.workers.link import Answer, ask
from storage.config import ConfigError


def test_cores_are_capped_by_the_cgroup_quota(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n", encoding="ascii")
    assert available_cores(cpu_max) == min(2, available_cores(tmp_path / "missing"))
    cpu_max.write_text("max 100000\n", encoding="ascii")
    assert available_cores(cpu_max) == available_cores(tmp_path / "missing") >= 1
    cpu_max.write_text("1000 100000\n", encoding="ascii")
    assert available_cores(cpu_max) == 1


def test_port_zero_gets_one_worker_or_is_refused_with_several() -> None:
    assert worker_count(ProxyConfig(listeners="127.0.0.1:0")) == 1
    assert worker_count(ProxyConfig(listeners="127.0.0.1:9092", workers=3)) == 3
    assert worker_count(ProxyConfig(listeners="127.0.0.1:9092")) == available_cores()
    with pytest.raises(ConfigError, match="port 0"):
        worker_count(ProxyConfig(listeners="127.0.0.1:0", workers=2))


def test_budgets_are_divided_and_disk_tiers_get_a_directory_each(tmp_path: Path) -> None:
    settings = {
        "remote.log.reader.threads": 8,
        "remote.fetch.chunk.cache.size.bytes": 1000,
        "remote.fetch.chunk.cache.dir": str(tmp_path),
        "remote.fetch.client.quota.bytes.per.second": 100,
    }
    mine = worker_settings(settings, index=1, count=4)
    assert mine["remote.log.reader.threads"] == 2
    assert mine["remote.fetch.chunk.cache.size.bytes"] == 250
    assert mine["remote.log.index.file.cache.total.size.mb"] == 256  # the default, divided
    assert mine["remote.fetch.chunk.cache.dir"] == str(tmp_path / "worker-1")
    assert "remote.log.index.file.cache.dir" not in mine  # no disk tier: none made up
    assert mine["remote.fetch.client.quota.bytes.per.second"] == 100  # per client: kept
    assert "remote.log.manager.fetch.max.bytes.per.second" not in mine  # unlimited: kept
    assert worker_settings(settings, index=0, count=1) == settings
    assert (
        worker_settings({"remote.log.reader.threads": 1}, index=0, count=4)[
            "remote.log.reader.threads"
        ]
        == 1
    )


def _exposition(connections: int, active: int, latencies: list[float]) -> str:
    registry = CollectorRegistry()
    Counter("t_connections", "c", ["api"], registry=registry).labels("fetch").inc(connections)
    Gauge("t_active", "a", registry=registry).set(active)
    histogram = Histogram("t_latency", "l", buckets=(0.1, 1.0), registry=registry)
    for value in latencies:
        histogram.observe(value)
    encoder, _content_type = choose_encoder("application/openmetrics-text; version=1.0.0")
    return encoder(registry).decode()


def _samples(families: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
        if not s.name.endswith("_created")
    }


@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.integers(0, 1000),
            st.lists(st.floats(0, 5, allow_nan=False), max_size=20),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_counters_and_histograms_add_up_and_gauges_keep_their_worker(
    workers: list[tuple[int, int, list[float]]],
) -> None:
    by_worker = {
        index: parse_exposition(_exposition(*worker)) for index, worker in enumerate(workers)
    }
    merged = _samples(merge_families(by_worker))
    assert merged[("t_connections_total", (("api", "fetch"),))] == sum(w[0] for w in workers)
    assert merged[("t_latency_count", ())] == sum(len(w[2]) for w in workers)
    assert merged[("t_latency_bucket", (("le", "1.0"),))] == sum(
        sum(1 for v in w[2] if v <= 1.0) for w in workers
    )
    for index, worker in enumerate(workers):
        assert merged[("t_active", (("worker", str(index)),))] == worker[1]


def _answers(verdicts: dict[int, Any], running: dict[int, bool], stopping: str = "") -> Any:
    def ask(index: int, resource: str, accept: str) -> Answer:
        verdict = verdicts[index]
        if isinstance(verdict, OSError):
            raise verdict
        if resource == "/metrics":
            return Answer(status=200, body=_exposition(1, 1, []).encode(), content_type="")
        return Answer(status=200, body=json.dumps(verdict).encode(), content_type="")

    return WorkerAnswers(
        ask=ask, running=lambda: running, stopping=lambda: stopping, own=CollectorRegistry()
    )


def test_ready_only_while_every_worker_is_ready_and_none_restarting() -> None:
    ok = {"status": "ok", "checks": {}}
    assert _answers({0: ok, 1: ok}, {0: True, 1: True}).readyz().ok
    report = _answers({0: ok, 1: ok}, {0: True, 1: False}).readyz()
    assert not report.ok and "worker 1: restarting" in report.body["reason"]
    report = _answers({0: ok, 1: OSError("refused")}, {0: True, 1: True}).readyz()
    assert not report.ok and "worker 1: not answering: refused" in report.body["reason"]
    report = _answers({0: ok, 1: ok}, {0: True, 1: True}, stopping="shutting down").readyz()
    assert not report.ok and report.body["reason"] == "shutting down"


def test_alive_while_every_running_worker_is_and_a_restart_is_no_death() -> None:
    ok = {"status": "ok"}
    assert _answers({0: ok, 1: ok}, {0: True, 1: False}).livez().ok
    assert not _answers({0: ok, 1: OSError("stuck")}, {0: True, 1: True}).livez().ok


def test_metrics_of_a_silent_worker_are_left_out() -> None:
    body, _content_type = _answers({0: {}, 1: OSError("gone")}, {0: True, 1: True}).metrics("")
    text = body.decode()
    assert 't_active{worker="0"} 1.0' in text
    assert 'worker="1"' not in text
    assert "t_connections_total" in text


async def test_a_worker_endpoint_answers_on_its_unix_socket(tmp_path: Path) -> None:
    readiness = Readiness()
    readiness.add("fine", lambda: Verdict(ok=True, reason="fine"))
    path = str(tmp_path / "worker-0.sock")
    metrics = ProxyMetrics()
    metrics.connection_opened()
    with serving(ProxyConfig(), registry=metrics.registry, readiness=readiness, unix_path=path):
        ready = await asyncio.to_thread(ask, path, "/readyz", timeout=5)
        scraped = await asyncio.to_thread(
            ask, path, "/metrics", timeout=5, accept="application/openmetrics-text"
        )
    assert ready.status == 200 and json.loads(ready.body)["status"] == "ok"
    families = {family.name: family for family in parse_exposition(scraped.body.decode())}
    assert families["tierproxy_connections"].samples[0].value == 1
