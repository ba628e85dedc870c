"""A real Prometheus scrapes a real ``tierproxy serve`` and ``tierproxy tier`` and runs the
shipped rules and dashboard queries.

Against Apache Kafka and SeaweedFS: the pipeline tiers a topic with ``tiering.metrics.port``
set, the proxy serves the remote tier with ``metrics.port``, and Debian's Prometheus scrapes
both as jobs ``tierproxy`` and ``tierproxy-tiering`` with docs/monitoring/tierproxy-alerts.yml
loaded. Then:

- every rule evaluates without error, and no alert fires on this healthy pair;
- every dashboard query runs (Grafana's variables as "All" sets them), and the ones about
  the pipeline return the topic's series;
- every metric family the rules and the dashboard name is one the two endpoints export;
- neither endpoint exports ``*_created`` series.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.embedded import BrokerInfo, S3Info, free_port
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.process import ManagedProcess
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.conditions import wait_until
from tests.integration.monitoring.support import (
    ALERTS,
    dashboard_queries,
    metric_names,
    prometheus_tool,
    runnable,
)
from tests.integration.tiering.support import tier_command, tier_config
from tests.integration.tiering.workload import create_topic, produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_PIPELINE_QUERIES = ("Copy lag bytes by topic", "Copy lag segments by topic")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


class Prometheus:
    """Debian's Prometheus on a free loopback port, scraping ``targets`` every second."""

    def __init__(self, work_dir: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        work_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"{LOOPBACK}:{port}"]}]}
                for job, port in targets.items()
            ],
        }
        config_path = work_dir / "prometheus.yml"
        config_path.write_text(json.dumps(config), encoding="utf-8")  # YAML is a JSON superset
        self.process = ManagedProcess(
            "prometheus",
            [
                prometheus_tool("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={work_dir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
            ],
            log_path=work_dir / "prometheus.log",
        )

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready(self._ready, timeout_s=120)

    def stop(self) -> None:
        self.process.stop()

    def _ready(self) -> bool:
        """Whether ``/-/ready`` says 200 (503 while Prometheus starts)."""
        try:
            with urllib.request.urlopen(self._url("/-/ready"), timeout=10) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as err:
            err.close()
            return False

    def _url(self, path: str) -> str:
        return f"http://{LOOPBACK}:{self.port}{path}"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self._url(path), timeout=10) as answer:
            return json.loads(answer.read())

    def query(self, promql: str) -> dict[str, Any]:
        """The API's whole answer to an instant query (``status``, ``data`` or ``error``)."""
        answer: dict[str, Any] = self._get(
            "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        )
        return answer

    def rules(self) -> list[dict[str, Any]]:
        groups = self._get("/api/v1/rules")["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]


@pytest.fixture
def prometheus_pair(
    broker: BrokerInfo, s3: S3Info, s3_bucket: str, tmp_path: Path
) -> Iterator[tuple[Prometheus, int, int, str]]:
    """A tiered topic, its pipeline and a proxy, scraped by Prometheus: (Prometheus, the
    proxy's metrics port, the pipeline's, the topic)."""
    topic = f"monitored-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 300, first=0)
    pipeline_port = free_port()
    config = tier_config(
        tmp_path / "tier.toml",
        broker.bootstrap,
        s3,
        s3_bucket,
        topic,
        # Cycles 30 s apart, as by default: "no good cycle for three intervals" must not
        # be pending between two cycles that take longer than a second interval.
        settings={
            "tiering.metrics.port": pipeline_port,
            "remote.log.manager.task.interval.ms": 30_000,
        },
    )
    pipeline = ManagedProcess(
        "tierproxy tier", tier_command(config), log_path=tmp_path / "tier.log", stop_grace_s=60
    )
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, f"__rlm-{topic}"))
    prometheus = Prometheus(
        tmp_path / "prometheus",
        {"tierproxy": proxy.metrics_port, "tierproxy-tiering": pipeline_port},
    )
    pipeline.start()
    try:
        proxy.start()
        try:
            prometheus.start()
            try:
                yield prometheus, proxy.metrics_port, pipeline_port, topic
            finally:
                prometheus.stop()
        finally:
            proxy.stop()
    finally:
        pipeline.stop()


def _result(prometheus: Prometheus, promql: str) -> list[dict[str, Any]]:
    answer = prometheus.query(promql)
    assert answer["status"] == "success", (promql, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def test_prometheus_runs_every_rule_and_dashboard_query_on_a_live_pair(
    prometheus_pair: tuple[Prometheus, int, int, str],
) -> None:
    prometheus, proxy_port, pipeline_port, topic = prometheus_pair
    wait_until(
        lambda: bool(_result(prometheus, 'tierproxy_tiering_cycles_total{outcome="ok"} > 0')),
        timeout_s=300,
        what="Prometheus scraped a pipeline that finished a good cycle",
    )
    wait_until(
        lambda: len(_result(prometheus, "up == 1")) == 2,
        timeout_s=120,
        what="both jobs are up",
    )
    wait_until(
        lambda: not any(rule["lastEvaluation"].startswith("0001") for rule in prometheus.rules()),
        timeout_s=120,
        what="every rule evaluated",
    )
    for rule in prometheus.rules():
        assert rule["health"] == "ok", rule
    held = _result(prometheus, "tierproxy_tiering_holding")
    assert [float(series["value"][1]) for series in held] == [1.0]
    wait_until(
        lambda: [float(s["value"][1]) for s in _result(prometheus, "tierproxy_ready")] == [1.0],
        timeout_s=120,
        what="the proxy's tierproxy_ready is 1",
    )

    for panel, query in dashboard_queries():
        result = _result(prometheus, runnable(query))
        if panel.rsplit(" ", 1)[0] in _PIPELINE_QUERIES:
            assert {series["metric"].get("topic") for series in result} == {topic}, panel

    exported = scrape(proxy_port) + scrape(pipeline_port)
    families = {family.name for family in text_string_to_metric_families(exported)}
    named = metric_names(ALERTS.read_text(encoding="utf-8"))
    named |= {name for _panel, query in dashboard_queries() for name in metric_names(query)}
    assert named - families == set()
    assert "_created" not in exported
    alerts: list[dict[str, str]] = []

    def quiet() -> bool:
        alerts[:] = [alert["metric"] for alert in _result(prometheus, "ALERTS")]
        return not alerts

    try:
        wait_until(quiet, timeout_s=60, what="no alert pending or firing on a healthy pair")
    except AssertionError as err:
        raise AssertionError(f"{err}: {alerts}") from None
