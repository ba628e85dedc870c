"""A tail consumer's Fetch latency, alone and while catch-up readers load the machine.

Shared by :mod:`bench.catchup` (catch-up through the proxy vs from the broker's local log)
and :mod:`bench.native` (catch-up from tierproxy's remote tier vs from Kafka's native tiered
storage). The tail consumer is one raw Fetch v12 loop reading the last ``TAIL_RECORDS``
records of a topic (64 KiB fetches, the untiered head), one request in flight, for a few
seconds; its round trips give p50 and p99. The load is ``TAIL_LOAD_CONSUMERS`` catch-up
readers of the same topic's tiered range (1 MiB fetches), run by :mod:`bench.catchup_load`
in a process of their own so that their work does not run on the tail consumer's event loop.

Cases run once per round in rotating order (A B C, B C A, C A B, ...), so that none always
follows the same one; each loaded case's p99 is divided by its baseline's p99 of the same
round, and the median of those ratios is reported. When the proxy's metrics are given, each
round also reports the proxy's event-loop lag (``tierproxy_event_loop_lag_seconds``): how
late its loop woke a timer while the round ran, the delay every request on the loop shares.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.catchup_load import CONSUMERS, READY, LoadSpec, argv
from bench.clients import Endpoint, RawConnection, fetch_request
from bench.common import KIB, median, percentile
from protocol.headers import parse_response_header
from protocol.messages import ApiKey, decode_response
from proxy.embedded.tierproxy import TierproxyServer

__all__ = [
    "LOOP_LAG_METRIC",
    "LagSnapshot",
    "LoopThreadTimes",
    "ProxyLoop",
    "ProxyWatch",
    "Setup",
    "TailCase",
    "TailRound",
    "lag_between",
    "parse_lag",
    "parse_schedstat",
    "proxy_medians",
    "ratio_of_ratios",
    "rotation",
    "summarise_tail",
    "tail_rounds",
]

TAIL_FETCH_BYTES = 64 * KIB
TAIL_LOAD_CONSUMERS = CONSUMERS
"""The catch-up readers, at the load's default count and fetch size (``FETCH_MIB``)."""
TAIL_RECORDS = 32
LOAD_WARM_UP_S = 1.0
LOOP_LAG_METRIC = "tierproxy_event_loop_lag_seconds"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """A one-partition topic whose range [0, tiered_end) is tiered and whose head is local."""

    topic: str
    topic_id: uuid.UUID
    tiered_end: int
    """First offset after the tiered range."""
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TailCase:
    """The tail consumer reads the head of ``topic`` through ``tail``; unless ``load`` is
    None, catch-up readers read the tiered range of the same topic through ``load``."""

    tail: Endpoint
    topic: Setup
    load: Endpoint | None = None
    load_mib_per_s: float | None = None
    """The catch-up readers' aggregate rate cap; None: as fast as they are served."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyLoop:
    """The proxy's event loop during one round."""

    lag_mean_ms: float | None
    """Its mean lag (``tierproxy_event_loop_lag_seconds``); None if no probe ran."""
    lag_p99_ms: float | None
    """The upper bound of the lag histogram's bucket holding the 99th percentile."""
    on_cpu_share: float
    """Of the round's wall time, the share its thread ran on a CPU."""
    waiting_share: float
    """Of the round's wall time, the share its thread was runnable but waited for a CPU."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TailRound:
    fetches: int
    p50_ms: float
    p99_ms: float
    load_mib_per_s: float | None
    """What the catch-up readers read meanwhile; None alone."""
    proxy: ProxyLoop | None
    """The proxy's event loop during the round; None when not watched."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagSnapshot:
    """The proxy's loop-lag histogram at one moment (cumulative, as Prometheus exposes it)."""

    buckets: tuple[tuple[float, float], ...]
    """(upper bound in seconds, probes at most that late), ascending; the last is +Inf."""
    total_s: float
    count: float


def parse_lag(text: str, name: str = LOOP_LAG_METRIC) -> LagSnapshot:
    """The histogram ``name`` from a Prometheus text exposition.

    :raises ValueError: the exposition has no such histogram.
    """
    buckets: list[tuple[float, float]] = []
    total = count = None
    for line in text.splitlines():
        if line.startswith(f'{name}_bucket{{le="'):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(f"{name}_sum "):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_count "):
            count = float(line.rsplit(" ", 1)[1])
    if not buckets or total is None or count is None:
        raise ValueError(f"no histogram {name} in the exposition")
    return LagSnapshot(buckets=tuple(sorted(buckets)), total_s=total, count=count)


def lag_between(before: LagSnapshot, after: LagSnapshot) -> tuple[float, float] | None:
    """Mean and p99 (bucket upper bound) of the lag probes between two snapshots, in ms;
    None if no probe ran."""
    count = after.count - before.count
    if count <= 0:
        return None
    mean_ms = (after.total_s - before.total_s) / count * 1000
    for (bound, seen), (_, seen_before) in zip(after.buckets, before.buckets, strict=True):
        if seen - seen_before >= 0.99 * count:
            return mean_ms, bound * 1000
    return mean_ms, float("inf")


def rotation(names: Sequence[str], index: int) -> list[str]:
    """Round ``index``'s order: the names rotated left by ``index``."""
    shift = index % len(names)
    return [*names[shift:], *names[:shift]]


async def tail_latencies(endpoint: Endpoint, topic: Setup, seconds: float) -> list[float]:
    """Fetch round trips (seconds) of a consumer reading the last records of the log."""
    connection = await RawConnection.open(endpoint)
    latencies: list[float] = []
    offset = max(topic.tiered_end, topic.high_watermark - TAIL_RECORDS)
    request = fetch_request(12, topic.topic, topic.topic_id, offset, TAIL_FETCH_BYTES)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            connection.send(ApiKey.FETCH, 12, request)
            frame = await connection.receive()
            latencies.append(time.perf_counter() - started)
            _, size = parse_response_header(frame, 1)
            response = decode_response(ApiKey.FETCH, 12, memoryview(frame)[size:])
            assert response.responses[0].partitions[0].records, "the tail read returned nothing"
    finally:
        await connection.close()
    return latencies


class CatchupLoad:
    """:mod:`bench.catchup_load` running in a child process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, endpoint: Endpoint, topic: Setup, mib_per_s: float | None) -> CatchupLoad:
        spec = LoadSpec(
            endpoint=endpoint,
            topic=topic.topic,
            topic_id=topic.topic_id,
            end_offset=topic.tiered_end,
            mib_per_s=mib_per_s,
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.catchup_load", *argv(spec), stdout=asyncio.subprocess.PIPE
        )
        load = cls(process)
        assert process.stdout is not None
        if (await process.stdout.readline()).decode().strip() != READY:
            await load.stop()
            raise RuntimeError("the catch-up load did not start")
        return load

    async def stop(self) -> float:
        """Stop the readers; the MiB/s they read."""
        if self._process.returncode is None:
            self._process.terminate()
        assert self._process.stdout is not None
        output = await self._process.stdout.read()
        if await self._process.wait() != 0:
            raise RuntimeError(f"the catch-up load exited with {self._process.returncode}")
        tally = json.loads(output.decode().strip().splitlines()[-1])
        return float(tally["bytes"]) / (1 << 20) / float(tally["seconds"])


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopThreadTimes:
    """Seconds the proxy's event-loop thread (its main thread) has spent on a CPU and
    runnable but waiting for one, from ``/proc/<pid>/task/<pid>/schedstat``: a loop that is
    late although it used little CPU was not held by a callback but left off the CPU."""

    on_cpu_s: float
    waiting_s: float


def parse_schedstat(text: str) -> LoopThreadTimes:
    """``schedstat``'s first two fields (nanoseconds on a CPU, waiting on a run queue)."""
    on_cpu, waiting, *_ = text.split()
    return LoopThreadTimes(on_cpu_s=int(on_cpu) / 1e9, waiting_s=int(waiting) / 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyWatch:
    """Where to read the proxy's loop lag (its metrics endpoint) and its loop thread's
    scheduling (its PID: the main thread's ID is the PID)."""

    metrics_host: str
    metrics_port: int
    pid: int

    @classmethod
    def of(cls, server: TierproxyServer) -> ProxyWatch:
        pid = server.process.pid
        assert pid is not None, "the proxy is not running"
        return cls(metrics_host=server.host, metrics_port=server.metrics_port, pid=pid)

    def _scrape(self) -> tuple[LagSnapshot, LoopThreadTimes]:
        url = f"http://{self.metrics_host}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            lag = parse_lag(answer.read().decode())
        schedstat = Path(f"/proc/{self.pid}/task/{self.pid}/schedstat").read_text()
        return lag, parse_schedstat(schedstat)

    async def snapshot(self) -> tuple[LagSnapshot, LoopThreadTimes]:
        return await asyncio.to_thread(self._scrape)


async def tail_round(case: TailCase, seconds: float, watch: ProxyWatch | None) -> TailRound:
    load = (
        None
        if case.load is None
        else await CatchupLoad.start(case.load, case.topic, case.load_mib_per_s)
    )
    load_mib_per_s = None
    try:
        if load is not None:
            await asyncio.sleep(LOAD_WARM_UP_S)  # let the catch-up readers get going
        before = None if watch is None else await watch.snapshot()
        started = time.perf_counter()
        latencies = await tail_latencies(case.tail, case.topic, seconds)
        wall = time.perf_counter() - started
        after = None if watch is None else await watch.snapshot()
    finally:
        if load is not None:
            load_mib_per_s = await load.stop()
    return TailRound(
        fetches=len(latencies),
        p50_ms=median(latencies) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        load_mib_per_s=load_mib_per_s,
        proxy=None if before is None or after is None else proxy_figures(before, after, wall),
    )


def proxy_figures(
    before: tuple[LagSnapshot, LoopThreadTimes],
    after: tuple[LagSnapshot, LoopThreadTimes],
    wall_s: float,
) -> ProxyLoop:
    lagged = lag_between(before[0], after[0])
    return ProxyLoop(
        lag_mean_ms=None if lagged is None else lagged[0],
        lag_p99_ms=None if lagged is None else lagged[1],
        on_cpu_share=(after[1].on_cpu_s - before[1].on_cpu_s) / wall_s,
        waiting_share=(after[1].waiting_s - before[1].waiting_s) / wall_s,
    )


def summarise_tail(
    rounds: Mapping[str, Sequence[TailRound]], baselines: Mapping[str, str]
) -> dict[str, Any]:
    """Per case the medians of p50 and p99 (and of the load's MiB/s and the proxy's loop
    lag where measured); per loaded case in ``baselines`` (loaded -> alone) the median of
    the rounds' p99 ratios to the baseline's p99 in the same round."""
    summary: dict[str, Any] = {}
    for name, got in rounds.items():
        figures = {
            "p50_ms": median([r.p50_ms for r in got]),
            "p99_ms": median([r.p99_ms for r in got]),
        }
        loads = [r.load_mib_per_s for r in got if r.load_mib_per_s is not None]
        if loads:
            figures["load_mib_per_s"] = median(loads)
        figures |= proxy_medians([r.proxy for r in got if r.proxy is not None])
        summary[name] = figures
    for loaded, alone in baselines.items():
        summary[loaded]["p99_ratio_to_alone"] = median(
            [r.p99_ms / a.p99_ms for r, a in zip(rounds[loaded], rounds[alone], strict=True)]
        )
    return summary


def proxy_medians(loops: Sequence[ProxyLoop]) -> dict[str, float]:
    """Medians of the proxy's loop figures over rounds, prefixed ``proxy_loop_``; those not
    measured in any round are left out."""
    figures = {}
    for field in ("lag_mean_ms", "lag_p99_ms", "on_cpu_share", "waiting_share"):
        values = [v for loop in loops if (v := getattr(loop, field)) is not None]
        if values:
            figures[f"proxy_loop_{field}"] = median(values)
    return figures


def ratio_of_ratios(
    rounds: Mapping[str, Sequence[TailRound]], case: tuple[str, str], base: tuple[str, str]
) -> float:
    """The median over rounds of (``case`` loaded p99 / its alone p99) over (``base`` loaded
    p99 / its alone p99): how much more one set-up's tail suffers from its load than
    another's, each against its own idle tail."""
    return median(
        [
            (loaded.p99_ms / alone.p99_ms) / (base_loaded.p99_ms / base_alone.p99_ms)
            for loaded, alone, base_loaded, base_alone in zip(
                rounds[case[0]], rounds[case[1]], rounds[base[0]], rounds[base[1]], strict=True
            )
        ]
    )


async def tail_rounds(
    cases: Mapping[str, TailCase],
    baselines: Mapping[str, str],
    *,
    rounds: int,
    seconds: float,
    watch: ProxyWatch | None = None,
) -> tuple[dict[str, Any], dict[str, list[TailRound]]]:
    """Every case once per round, in rotating order: the summary and the rounds."""
    names = list(cases)
    measured: dict[str, list[TailRound]] = {name: [] for name in names}
    for index in range(max(rounds, 1)):
        for name in rotation(names, index):
            measured[name].append(await tail_round(cases[name], seconds, watch))
    summary = summarise_tail(measured, baselines)
    summary["rounds"] = {name: [asdict(r) for r in got] for name, got in measured.items()}
    return summary, measured
