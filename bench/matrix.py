"""The catch-up matrix of :mod:`bench.native` as pure logic: which cells run, in which order
each round visits the three read paths, and what a cell's rounds add up to.

The question: per number of partitions, client and fetch size (a *cell*), how fast is
a catch-up read (a) from Kafka's native tiered storage, (b) from tierproxy's remote tier
through the proxy, (c) from the broker's local log; b/c (goal >= 0.8), b/a (goal >= 1.5),
a/c; the CPU seconds per GiB of broker, proxy and client on each path; the Fetch requests per
GiB on each path (8 partitions: b/c <= 1.1).

A cell runs ``rounds`` *visits*: each visit reads the cell's data once on every path, in an
order that rotates from visit to visit (c b a, b a c, a c b, ...), so that no path always goes
first into a warm machine and every pair of paths meets in both orders. Each ratio is taken
per visit (the two paths measured back to back, as an A/B pair) and the median of those is
reported: the three A/B comparisons come from the same visits, at half the rounds three
separate alternations would take.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.common import GIB, MIB, median

__all__ = [
    "BASELINE",
    "CLIENTS",
    "GOAL_FETCH_RATIO_TIERPROXY_TO_LOCAL",
    "GOAL_PROXY_CPU_S_PER_GIB",
    "GOAL_RATIO_TIERPROXY_TO_LOCAL",
    "GOAL_RATIO_TIERPROXY_TO_NATIVE",
    "LOCAL",
    "NATIVE",
    "PATHS",
    "TIERPROXY",
    "Cell",
    "Data",
    "PathRound",
    "headline",
    "path_round",
    "plan",
    "summarise_cell",
    "visit_order",
]

NATIVE = "native remote"
"""(a) Kafka's native tiered storage (LocalTieredStorage), the broker's local copy gone."""
TIERPROXY = "tierproxy remote"
"""(b) tierproxy's remote tier, read through the proxy."""
LOCAL = "local"
"""(c) the broker's local log."""
PATHS = (LOCAL, TIERPROXY, NATIVE)
BASELINE = "baseline tierproxy remote"
"""tierproxy's remote tier through a proxy run from another checkout (the code before a
change): an optional fourth path, for before/after figures from one run."""
_KEYS = {NATIVE: "native", TIERPROXY: "tierproxy", LOCAL: "local"}

RAW = "raw Fetch v12"
LIBRDKAFKA = "librdkafka"
"""confluent-kafka, standing in for kcat: Debian's kcat links a librdkafka that predates
``fetch.queue.backoff.ms``, without which a consumer pauses a second at a time."""
JAVA = "Java consumer"
"""Kafka's ``ConsumerPerformance`` from the broker's jars (the issue's "Java perf test")."""
CLIENTS = (RAW, LIBRDKAFKA, JAVA)

GOAL_RATIO_TIERPROXY_TO_LOCAL = 0.8
GOAL_RATIO_TIERPROXY_TO_NATIVE = 1.5
GOAL_PROXY_CPU_S_PER_GIB = 1.5
GOAL_FETCH_RATIO_TIERPROXY_TO_LOCAL = 1.1
"""Fetch requests per GiB through the proxy over the local log's, with 8 partitions."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """A topic's range that a catch-up reads: offsets [0, ends[p]) of each partition p."""

    topic: str
    topic_id: uuid.UUID
    ends: tuple[int, ...]

    @property
    def records(self) -> int:
        return sum(self.ends)

    def by_partition(self) -> dict[int, int]:
        return dict(enumerate(self.ends))


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    partitions: int
    client: str
    fetch_mib: int

    @property
    def name(self) -> str:
        unit = "partition" if self.partitions == 1 else "partitions"
        return f"{self.partitions} {unit}, {self.client}, {self.fetch_mib} MiB fetches"


def plan(partitions: Sequence[int], clients: Sequence[str], fetch_mib: Sequence[int]) -> list[Cell]:
    """Every cell, partitions outermost (a topic's cells run together), then client, then
    fetch size.

    :raises ValueError: a client is not one of :data:`CLIENTS`.
    """
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        raise ValueError(f"unknown clients {unknown}; choose from {list(CLIENTS)}")
    return [
        Cell(partitions=count, client=client, fetch_mib=size)
        for count in partitions
        for client in clients
        for size in fetch_mib
    ]


def visit_order(index: int, paths: Sequence[str] = PATHS) -> tuple[str, ...]:
    """Visit ``index``'s order of the paths: ``paths`` rotated left by ``index``."""
    shift = index % len(paths)
    return (*paths[shift:], *paths[:shift])


@dataclass(frozen=True, slots=True, kw_only=True)
class PathRound:
    """One read of a cell's data on one path."""

    path: str
    mib: float
    seconds: float
    mib_per_s: float
    broker_cpu_s_per_gib: float
    proxy_cpu_s_per_gib: float
    client_cpu_s_per_gib: float
    """This process and the client processes it ran (the Java consumer's JVM)."""
    fetches_per_gib: float


def path_round(
    path: str, *, received: int, seconds: float, fetches: int | None, cpu: Mapping[str, float]
) -> PathRound:
    """A round from what was read (bytes), in how long, with how many Fetch requests (None:
    not counted, NaN per GiB), and the CPU seconds each process spent meanwhile (``broker``,
    ``proxy``, ``client``).

    :raises ValueError: nothing was read.
    """
    if received <= 0:
        raise ValueError(f"{path}: the round read nothing")
    gib = received / GIB
    return PathRound(
        path=path,
        mib=received / MIB,
        seconds=seconds,
        mib_per_s=received / MIB / seconds,
        broker_cpu_s_per_gib=cpu["broker"] / gib,
        proxy_cpu_s_per_gib=cpu["proxy"] / gib,
        client_cpu_s_per_gib=cpu["client"] / gib,
        fetches_per_gib=float("nan") if fetches is None else fetches / gib,
    )


def _ratio(visits: Sequence[Mapping[str, PathRound]], top: str, bottom: str) -> float:
    return median([visit[top].mib_per_s / visit[bottom].mib_per_s for visit in visits])


_PER_PATH = (
    ("mib_per_s", "{}_mib_per_s"),
    ("broker_cpu_s_per_gib", "broker_cpu_s_per_gib_{}"),
    ("proxy_cpu_s_per_gib", "proxy_cpu_s_per_gib_{}"),
    ("client_cpu_s_per_gib", "client_cpu_s_per_gib_{}"),
    ("fetches_per_gib", "fetches_per_gib_{}"),
)
"""Each path's medians: the round's field and its name in the summary (the proxy's CPU only
on the path through it)."""


def summarise_cell(visits: Sequence[Mapping[str, PathRound]]) -> dict[str, float]:
    """Medians over a cell's visits: MiB/s, CPU-s and Fetch requests per GiB of each path,
        and the per-visit ratios b/c, b/a, a/c (a native remote, b tierproxy remote, c local); with
    a :data:`BASELINE` path in every visit, also b / baseline and the baseline's figures."""
    summary = {
        "ratio_tierproxy_to_local": _ratio(visits, TIERPROXY, LOCAL),
        "ratio_tierproxy_to_native": _ratio(visits, TIERPROXY, NATIVE),
        "ratio_native_to_local": _ratio(visits, NATIVE, LOCAL),
    }
    for field, name in _PER_PATH:
        for path, key in _KEYS.items():
            if field != "proxy_cpu_s_per_gib" or path == TIERPROXY:
                summary[name.format(key)] = median([getattr(v[path], field) for v in visits])
    if all(BASELINE in visit for visit in visits):
        summary["ratio_tierproxy_to_baseline"] = _ratio(visits, TIERPROXY, BASELINE)
        summary["baseline_mib_per_s"] = median([v[BASELINE].mib_per_s for v in visits])
        summary["proxy_cpu_s_per_gib_baseline"] = median(
            [v[BASELINE].proxy_cpu_s_per_gib for v in visits]
        )
    summary["fetches_ratio_tierproxy_to_local"] = (
        summary["fetches_per_gib_tierproxy"] / summary["fetches_per_gib_local"]
    )
    return summary


def headline(summaries: Mapping[Cell, Mapping[str, float]]) -> dict[str, float]:
    """The matrix in a few figures against their goals: the worst and the median cell of b/c
    and b/a, the median a/c, the proxy's worst CPU-s per GiB and, over the cells of more than
    one partition, the worst Fetch requests per GiB through the proxy over the local log's."""
    if not summaries:
        return {}

    def over(key: str, cells: Sequence[Cell] | None = None) -> list[float]:
        return [summaries[cell][key] for cell in (summaries if cells is None else cells)]

    figures = {
        "ratio_tierproxy_to_local_worst": min(over("ratio_tierproxy_to_local")),
        "goal_ratio_tierproxy_to_local_worst": GOAL_RATIO_TIERPROXY_TO_LOCAL,
        "ratio_tierproxy_to_local_median": median(over("ratio_tierproxy_to_local")),
        "ratio_tierproxy_to_native_worst": min(over("ratio_tierproxy_to_native")),
        "goal_ratio_tierproxy_to_native_worst": GOAL_RATIO_TIERPROXY_TO_NATIVE,
        "ratio_tierproxy_to_native_median": median(over("ratio_tierproxy_to_native")),
        "ratio_native_to_local_median": median(over("ratio_native_to_local")),
        "proxy_cpu_s_per_gib_worst": max(over("proxy_cpu_s_per_gib_tierproxy")),
        "goal_proxy_cpu_s_per_gib_worst": GOAL_PROXY_CPU_S_PER_GIB,
    }
    several = [cell for cell in summaries if cell.partitions > 1]
    if several:
        figures["fetches_ratio_tierproxy_to_local_worst"] = max(
            over("fetches_ratio_tierproxy_to_local", several)
        )
        figures["goal_fetches_ratio_tierproxy_to_local_worst"] = GOAL_FETCH_RATIO_TIERPROXY_TO_LOCAL
    return figures
