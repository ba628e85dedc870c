"""Helpers shared by the benchmarks: alternating A/B rounds, medians and ratios, process CPU and
memory from ``/proc``, and results written as JSON plus a PNG into ``bench/results/``.

On a shared two-core machine a single figure is noise (see BENCHMARKING.md), so every
comparison runs baseline and candidate in turn, A B A B ..., and reports medians and the
median of the per-pair ratios.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    import confluent_kafka

__all__ = [
    "GIB",
    "KIB",
    "MIB",
    "RESULTS",
    "Pair",
    "alternate",
    "alternate_async",
    "bar_chart",
    "client_cpu_seconds",
    "cpu_seconds",
    "git_state",
    "median",
    "percentile",
    "produce_retrying",
    "rss_bytes",
    "save_json",
    "throughput_summary",
]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
RESULTS = Path(os.environ.get("TIERPROXY_BENCH_RESULTS") or Path(__file__).parent / "results")
"""Where results go: ``bench/results`` (committed), or ``$TIERPROXY_BENCH_RESULTS`` for runs
whose figures should not replace them (a busy machine)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair(Generic[T]):
    """One baseline (``a``) and one candidate (``b``) measurement, taken back to back."""

    index: int
    a: T
    b: T


def alternate(pairs: int, a: Callable[[], T], b: Callable[[], T]) -> list[Pair[T]]:
    """Run ``a`` then ``b``, ``pairs`` times; the order alternates so neither always goes first
    into a warm (or cold) machine: A B, B A, A B, ..."""
    results: list[Pair[T]] = []
    for index in range(pairs):
        if index % 2 == 0:
            first_a = a()
            second_b = b()
        else:
            second_b = b()
            first_a = a()
        results.append(Pair(index=index, a=first_a, b=second_b))
    return results


async def alternate_async(
    pairs: int, a: Callable[[], Awaitable[T]], b: Callable[[], Awaitable[T]]
) -> list[Pair[T]]:
    """:func:`alternate` for coroutines."""
    results: list[Pair[T]] = []
    for index in range(pairs):
        if index % 2 == 0:
            first_a = await a()
            second_b = await b()
        else:
            second_b = await b()
            first_a = await a()
        results.append(Pair(index=index, a=first_a, b=second_b))
    return results


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (0.99 for p99) by the nearest-rank method."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


class ThroughputRound(Protocol):
    """What a direct-vs-proxy read round measured, whatever else its benchmark adds."""

    @property
    def mib_per_s(self) -> float: ...
    @property
    def proxy_cpu_s_per_gib(self) -> float: ...
    @property
    def broker_cpu_s_per_gib(self) -> float: ...


R = TypeVar("R", bound=ThroughputRound)


def throughput_summary(pairs: Sequence[Pair[R]]) -> dict[str, float]:
    """Medians of direct (``a``) and proxy (``b``) read rounds: throughput, their ratio per
    pair, and the CPU each side spent per GiB."""
    return {
        "direct_mib_per_s": median([p.a.mib_per_s for p in pairs]),
        "proxy_mib_per_s": median([p.b.mib_per_s for p in pairs]),
        "ratio_proxy_to_direct": median([p.b.mib_per_s / p.a.mib_per_s for p in pairs]),
        "proxy_cpu_s_per_gib": median([p.b.proxy_cpu_s_per_gib for p in pairs]),
        "broker_cpu_s_per_gib_direct": median([p.a.broker_cpu_s_per_gib for p in pairs]),
        "broker_cpu_s_per_gib_proxy": median([p.b.broker_cpu_s_per_gib for p in pairs]),
    }


def produce_retrying(
    producer: confluent_kafka.Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes,
    partition: int = 0,
) -> None:
    """Produce one record to ``partition``, serving delivery reports while the producer's
    local queue is full (confluent-kafka raises BufferError instead of waiting)."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (this process and its children if None)."""
    if pid is None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return own.ru_utime + own.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of /proc/<pid>/stat (1-based), in clock ticks.
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def client_cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have exited and
    been waited for (a client tool run to completion, such as a JVM)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def git_state() -> dict[str, Any]:
    """The commit measured and whether tracked files had changes: figures from a dirty tree
    belong to no commit. ``bench/results/`` does not count: ``make bench`` writes each
    benchmark's results there before the next one runs, and results are not code."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return run.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "clean_tree": not git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"
        ),
    }


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise ValueError(f"no VmRSS for pid {pid}")


def save_json(name: str, payload: Mapping[str, Any]) -> Path:
    """Write ``bench/results/<name>.json``; returns its path. Every result names the commit it
    measured and whether the tree was clean (:func:`git_state`), unless the benchmark took
    that state itself before it ran."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    stamped = {**git_state(), **payload}
    path.write_text(json.dumps(stamped, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def bar_chart(
    name: str,
    panels: Sequence[tuple[str, str, Mapping[str, Mapping[str, float]]]],
    *,
    title: str,
) -> Path:
    """Write ``bench/results/<name>.png``: one panel per ``(title, unit, groups)``, where
    ``groups`` maps a group label to ``{series label: value}`` (e.g. direct vs proxy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 5.0), squeeze=False)
    for axis, (panel_title, unit, groups) in zip(axes[0], panels, strict=True):
        series = sorted({label for values in groups.values() for label in values})
        width = 0.8 / max(1, len(series))
        for offset, label in enumerate(series):
            xs = [i + offset * width for i in range(len(groups))]
            heights = [values.get(label, 0.0) for values in groups.values()]
            bars = axis.bar(xs, heights, width, label=label)
            axis.bar_label(bars, fmt="%.3g", fontsize=7)
        axis.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(groups))])
        axis.set_xticklabels(list(groups), fontsize=8, rotation=25, ha="right")
        axis.set_title(panel_title, fontsize=10)
        axis.set_ylabel(unit)
        axis.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
