"""The shipped alerting rules and Grafana dashboard are valid for the real tools.

- ``promtool check rules`` accepts docs/monitoring/tierproxy-alerts.yml, and
  ``promtool test rules`` runs its unit tests (alerts-test.yml beside this file): each alert
  fires on the series that mean trouble and stays quiet on healthy ones;
- every alert has a severity, a summary and a description;
- the dashboard is well-formed Grafana JSON: unique panel ids, every query on the
  ``${datasource}`` variable, and every query PromQL that promtool parses (as a recording
  rule, with Grafana's variables as "All" sets them).

That the metric names they use are the ones a running proxy and pipeline export is
test_prometheus.py's job.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.monitoring.support import (
    ALERTS,
    DASHBOARD,
    dashboard_queries,
    prometheus_tool,
    runnable,
)

pytestmark = [pytest.mark.integration]

_HERE = Path(__file__).parent


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_tool("promtool"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def test_promtool_accepts_the_alerting_rules() -> None:
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout, checked.stdout


def test_each_alert_fires_on_trouble_and_not_on_health() -> None:
    tested = promtool("test", "rules", "alerts-test.yml", cwd=_HERE)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_says_how_bad_and_what_to_do() -> None:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    alerts = [rule for group in groups for rule in group["rules"]]
    assert len(alerts) >= 15
    for alert in alerts:
        assert alert["labels"]["severity"] in {"warning", "critical"}, alert["alert"]
        assert alert["annotations"]["summary"], alert["alert"]
        assert alert["annotations"]["description"], alert["alert"]
    assert len({alert["alert"] for alert in alerts}) == len(alerts)


def test_the_dashboard_is_grafana_json_on_one_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_dashboard_query_is_promql(tmp_path: Path) -> None:
    queries = list(dashboard_queries())
    assert len(queries) >= 30
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{index}", "expr": runnable(query)}
                    for index, (_panel, query) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
