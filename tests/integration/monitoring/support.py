"""The shipped monitoring files and what their queries name, for the monitoring tests."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "ALERTS",
    "DASHBOARD",
    "PROMETHEUS_PACKAGE",
    "dashboard_queries",
    "metric_names",
    "prometheus_tool",
    "runnable",
]

_ROOT = Path(__file__).resolve().parents[3]
ALERTS = _ROOT / "docs" / "monitoring" / "tierproxy-alerts.yml"
DASHBOARD = _ROOT / "docs" / "monitoring" / "tierproxy-dashboard.json"
PROMETHEUS_PACKAGE = "Debian's prometheus package (make apt-tools installs it)"

_GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "$topic": ".*"}
_METRIC = re.compile(r"\btierproxy_[a-z0-9_]+\b")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def prometheus_tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``; a missing one fails the test."""
    path = shutil.which(name)
    assert path is not None, f"{name} is not installed: {PROMETHEUS_PACKAGE}"
    return path


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """Every panel query of the dashboard as (panel title and ref id, PromQL as written)."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield f"{panel['title']} {target['refId']}", target["expr"]


def runnable(query: str) -> str:
    """``query`` with Grafana's variables replaced as Grafana would for "All"."""
    for variable, value in _GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    assert "$" not in query, f"a Grafana variable the tests do not know: {query}"
    return query


def metric_names(text: str) -> set[str]:
    """The tierproxy metric families ``text`` (PromQL or YAML) names: counters without
    ``_total``, histograms without ``_bucket``/``_sum``/``_count``, as prometheus-client
    declares them."""
    names = set()
    for name in _METRIC.findall(text):
        names.add(next((name.removesuffix(s) for s in _SUFFIXES if name.endswith(s)), name))
    return names
