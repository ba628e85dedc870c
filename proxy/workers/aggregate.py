"""One ``/metrics``, ``/livez`` and ``/readyz`` for all workers, from their own endpoints.

Rules of this file:

- **Metrics.** Each worker's exposition is read in OpenMetrics form and merged by family:
  counters, histograms and summaries are summed sample by sample (same name, same labels;
  ``_created`` takes the earliest), so ``rate()`` and ``histogram_quantile()`` work on the
  host as on one process. Gauges (and info, state sets, unknown types) are not summable in
  general (a cache's size is, the metadata lag is not), so each worker's sample keeps its
  own value under a ``worker`` label, as prometheus_client's multiprocess mode does by
  default (``sum without (worker)`` adds them up). A restarted worker's counters start
  again from 0, which Prometheus' ``rate()`` reads as a counter reset. A worker that does
  not answer is left out of that scrape. The supervisor's own series come last.
- **Readiness** is the conjunction of the workers': ready while every worker says ready and
  none is being restarted; not ready from SIGTERM on. Each worker's verdict is in the body.
- **Liveness**: alive while every running worker answers ``/livez``; a worker being
  restarted is the supervisor's business, not a reason to restart the whole process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.registry import Collector

from proxy.health import HealthReport
from proxy.workers.link import Answer

__all__ = ["SUMMED_TYPES", "WorkerAnswers", "merge_families", "parse_exposition"]

SUMMED_TYPES: Final = frozenset({"counter", "histogram", "summary", "gaugehistogram"})
"""Families whose samples add up across workers."""

_OPENMETRICS: Final = "application/openmetrics-text; version=1.0.0"
_parse: Callable[[str], Iterable[Metric]] = openmetrics_parser.text_string_to_metric_families

Ask = Callable[[int, str, str], Answer]
"""Ask worker ``index`` for ``resource`` with an ``Accept`` header; raises OSError when it
does not answer."""


def parse_exposition(text: str) -> list[Metric]:
    """A worker's OpenMetrics exposition as metric families.

    :raises ValueError: for text that is not OpenMetrics.
    """
    return list(_parse(text))


def merge_families(by_worker: Mapping[int, Sequence[Metric]]) -> list[Metric]:
    """The families of every worker merged as the rules of this file say, in the order
    they first appear."""
    merged: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for index in sorted(by_worker):
        for family in by_worker[index]:
            target = merged.get(family.name)
            if target is None:
                target = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = target
                sums[family.name] = {}
            if family.type in SUMMED_TYPES:
                _add_samples(sums[family.name], family)
            else:
                for sample in family.samples:
                    target.add_sample(
                        sample.name, {**sample.labels, "worker": str(index)}, sample.value
                    )
    for name, samples in sums.items():
        for (sample_name, labels), value in samples.items():
            merged[name].add_sample(sample_name, dict(labels), value)
    return list(merged.values())


def _add_samples(
    into: dict[tuple[str, tuple[tuple[str, str], ...]], float], family: Metric
) -> None:
    for sample in family.samples:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        if key not in into:
            into[key] = sample.value
        elif sample.name.endswith("_created"):
            into[key] = min(into[key], sample.value)
        else:
            into[key] += sample.value


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


class WorkerAnswers:
    """The supervisor's :class:`~proxy.health_endpoint.Answers`, asked of its workers."""

    def __init__(
        self,
        *,
        ask: Ask,
        running: Callable[[], Mapping[int, bool]],
        stopping: Callable[[], str],
        own: CollectorRegistry,
    ) -> None:
        """:param running: each worker's index and whether its process runs now.
        :param stopping: why the supervisor is stopping ("" while it serves).
        :param own: the supervisor's own series."""
        self._ask = ask
        self._running = running
        self._stopping = stopping
        self._own = own

    def metrics(self, accept: str) -> tuple[bytes, str]:
        by_worker: dict[int, list[Metric]] = {}
        for index, running in self._running().items():
            if not running:
                continue
            try:
                answer = self._ask(index, "/metrics", _OPENMETRICS)
                by_worker[index] = parse_exposition(answer.body.decode())
            except (OSError, ValueError):
                continue  # left out of this scrape, as the rules say
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families([*merge_families(by_worker), *self._own.collect()]))
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type

    def livez(self) -> HealthReport:
        workers: dict[str, Any] = {}
        ok = True
        for index, running in self._running().items():
            if not running:
                workers[str(index)] = {"status": "restarting"}
                continue
            verdict = self._verdict(index, "/livez")
            workers[str(index)] = verdict
            ok = ok and verdict.get("status") == "ok"
        body: dict[str, Any] = {"workers": workers}
        if not ok:
            body["reason"] = _failing(workers)
        return HealthReport(ok=ok, body=body)

    def readyz(self) -> HealthReport:
        workers: dict[str, Any] = {}
        for index, running in self._running().items():
            workers[str(index)] = (
                self._verdict(index, "/readyz")
                if running
                else {"status": "fail", "reason": "restarting"}
            )
        stopping = self._stopping()
        ok = not stopping and all(w.get("status") == "ok" for w in workers.values())
        body: dict[str, Any] = {"workers": workers}
        if stopping:
            body["reason"] = stopping
        elif not ok:
            body["reason"] = _failing(workers)
        return HealthReport(ok=ok, body=body)

    def _verdict(self, index: int, resource: str) -> dict[str, Any]:
        try:
            answer = self._ask(index, resource, "")
            verdict = json.loads(answer.body)
        except (OSError, ValueError) as err:
            return {"status": "fail", "reason": f"not answering: {err}"}
        return verdict if isinstance(verdict, dict) else {"status": "fail", "reason": "?"}


def _failing(workers: Mapping[str, Mapping[str, Any]]) -> str:
    return "; ".join(
        f"worker {index}: {verdict.get('reason', verdict.get('status'))}"
        for index, verdict in workers.items()
        if verdict.get("status") != "ok"
    )
