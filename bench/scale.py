"""How one host's proxy scales with its workers, against Apache Kafka: aggregate read
throughput of many consumers with one worker and with two, and what idle connections cost
each worker.

Run::

    .venv/bin/python -m bench.scale                                  # embedded Kafka, local tier
    .venv/bin/python -m bench.scale --data-mib 64 --pairs 3 --round-seconds 10   # quicker
    .venv/bin/python -m bench.scale --tier s3 --workers 4 --consumers 16   # a larger machine
    KAFKA_BOOTSTRAP=host:9092 .venv/bin/python -m bench.scale

Set-up: a plain topic and a tiered topic of one partition each, ``--data-mib`` MiB of 1 KiB
records in each. The tiered one is copied by the real pipeline (Spark local[2], 8 MiB
segments) to a local-directory tier (``--tier s3``: SeaweedFS, or ``S3_ENDPOINT``). Two
proxies run side by side on the same broker, both with the offload policy on (so the tiered
range is served from the remote tier although the broker still holds it): ``tierproxy serve
--workers 1`` (one process, the baseline) and ``--workers N`` (``--workers``, 2 by default:
a supervisor and N processes sharing the listener with SO_REUSEPORT).

Throughput: ``--consumers`` raw Fetch v12 readers (1 MiB per partition, one request in flight
each), run by :mod:`bench.catchup_load` in ``--load-processes`` processes of their own so
that the benchmark's client is not the one bottleneck, read the topic from its start over and
over for ``--round-seconds``. Each round measures three cases in rotating order (direct to the
broker, one worker, N workers; A B C, B C A, ...): the consumers' aggregate MiB/s, and CPU
seconds per GiB of the proxy (the supervisor and all its workers), the broker and the
consumers. Two workloads: *pass-through* (the plain topic: the broker serves, the proxy
forwards) and *remote catch-up* (the tiered topic's copied range, read from the remote tier
by the proxies and from the broker's log when direct). Reported: medians, the median per-round
ratio N workers / one worker, and each proxy / direct.

Connections: ``--idle-connections`` clients (2,000 by default) each do one ApiVersions round
trip through a proxy and stay idle (each has its broker connection open too); the RSS of every
process of that proxy is read, then one producer connection through the proxy and one direct
send one 1 KiB record per Produce (acks=1, v8) open-loop at ``--produce-rate`` requests/s for
``--produce-seconds`` (staggered by half a period, as :mod:`bench.passthrough` does): p50/p99
each way while the idle clients are held. With N workers the idle clients spread over the
workers by the kernel's SO_REUSEPORT hash.

What to expect: a worker is one event loop on one core; the workers share nothing on the
data path (each has its own connections, caches and reader pool, with the host's budgets
divided among them), so throughput grows with workers while cores are free, and stops where
the broker, the consumers or object storage take the remaining cores. On a 2-core machine
that runs the broker, the consumers and the proxy at once, no gain is expected: the figures
say what the second worker costs (memory, CPU per GiB). To measure the scaling itself, run
the broker and the consumers on other machines (``KAFKA_BOOTSTRAP``) or pin them away with
``taskset``, and compare ``--workers 1`` with ``--workers`` up to the proxy host's cores.

Goals: RSS <= 300 MiB per worker with 2,000 idle connections; aggregate MiB/s
that grows with workers where cores are free. Results: ``bench/results/scale.json`` and
``.png`` (``$TIERPROXY_BENCH_RESULTS`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.catchup import SEGMENT_BYTES, tiered_end
from bench.catchup_load import READY, LoadSpec, argv
from bench.clients import RECORD_BYTES, Endpoint, RawConnection, preload, topic_id_and_end
from bench.common import (
    GIB,
    MIB,
    bar_chart,
    client_cpu_seconds,
    cpu_seconds,
    median,
    percentile,
    rss_bytes,
    save_json,
)
from bench.passthrough import produce_latencies
from bench.tail import rotation
from bench.tiering import produce_and_tier, remote_tier, servers_from_env, tier_settings
from protocol.messages import ApiKey, request_class
from proxy.embedded import BrokerInfo, create_topic
from proxy.embedded.tierproxy import TierproxyServer, proxy_process

DIRECT = "direct"
PRODUCE_VERSION = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    end_offset: int
    """The readers read [0, end_offset): the tiered topic's copied range, or all of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputRound:
    workload: str
    case: str
    mib: float
    seconds: float
    mib_per_s: float
    proxy_cpu_s_per_gib: float
    broker_cpu_s_per_gib: float
    client_cpu_s_per_gib: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Proxy:
    name: str
    server: TierproxyServer

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(name=self.name, host=self.server.host, port=self.server.port)

    def pids(self) -> list[int]:
        """The proxy's process and its workers."""
        pid = self.server.process.pid
        assert pid is not None
        return [pid, *descendants(pid)]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, from ``/proc`` (parents listed before children)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = sorted(child for child, parent in parents.items() if parent in frontier)
        found.extend(children)
        frontier = children
    return found


def tree_cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds so far of ``pids`` (a process that ended since is left out)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


# -- set-up --------------------------------------------------------------------------------


async def plain_topic(broker: BrokerInfo, data_mib: int) -> Topic:
    name = f"bench-scale-plain-{uuid.uuid4().hex[:8]}"
    await create_topic(
        broker.bootstrap, name, partitions=1, configs={"segment.bytes": str(SEGMENT_BYTES)}
    )
    await asyncio.to_thread(preload, broker.bootstrap, name, data_mib * MIB // RECORD_BYTES)
    direct = Endpoint(name=DIRECT, host=broker.host, port=broker.port)
    topic_id, end = await topic_id_and_end(direct, name)
    return Topic(name=name, topic_id=topic_id, end_offset=end)


@contextlib.contextmanager
def running_proxies(
    broker: BrokerInfo, settings: dict[str, Any], workers: int
) -> Iterator[list[Proxy]]:
    """The baseline (one process) and the candidate (``workers`` workers), started."""
    log_dir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    proxies = [
        Proxy(name=f"{count} worker{'s' if count > 1 else ''}", server=proxy_process(
            broker, log_dir, settings, workers=count
        ))
        for count in (1, workers)
    ]  # fmt: skip
    try:
        for proxy in proxies:
            proxy.server.start()
        yield proxies
    finally:
        for proxy in proxies:
            proxy.server.stop()


# -- throughput ------------------------------------------------------------------------------


async def read_for(
    endpoint: Endpoint, topic: Topic, *, consumers: int, processes: int, seconds: float
) -> float:
    """Bytes the consumers read from ``endpoint`` in ``seconds``, in ``processes`` loads."""
    loads = []
    for index in range(processes):
        share = consumers // processes + (1 if index < consumers % processes else 0)
        spec = LoadSpec(
            endpoint=endpoint,
            topic=topic.name,
            topic_id=topic.topic_id,
            end_offset=topic.end_offset,
            consumers=share,
        )
        loads.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.catchup_load",
                *argv(spec),
                stdout=asyncio.subprocess.PIPE,
            )
        )
    total = 0.0
    try:
        for load in loads:
            assert load.stdout is not None
            if (await load.stdout.readline()).decode().strip() != READY:
                raise RuntimeError("a consumer load did not start")
        await asyncio.sleep(seconds)
    finally:
        for load in loads:
            if load.returncode is None:
                load.terminate()
        for load in loads:
            assert load.stdout is not None
            output = (await load.stdout.read()).decode().strip().splitlines()
            if await load.wait() == 0 and output:
                total += float(json.loads(output[-1])["bytes"])
    return total


async def throughput_round(
    workload: str,
    case: str,
    endpoint: Endpoint,
    topic: Topic,
    *,
    proxy_pids: Sequence[int],
    broker_pid: int | None,
    args: argparse.Namespace,
) -> ThroughputRound:
    def cpu() -> tuple[float, float, float]:
        broker = cpu_seconds(broker_pid) if broker_pid is not None else float("nan")
        return tree_cpu_seconds(proxy_pids), broker, client_cpu_seconds()

    before = cpu()
    started = time.perf_counter()
    received = await read_for(
        endpoint,
        topic,
        consumers=args.consumers,
        processes=args.load_processes,
        seconds=args.round_seconds,
    )
    elapsed = time.perf_counter() - started
    after = cpu()
    gib = max(received, 1.0) / GIB
    return ThroughputRound(
        workload=workload,
        case=case,
        mib=received / MIB,
        seconds=elapsed,
        mib_per_s=received / MIB / elapsed,
        proxy_cpu_s_per_gib=(after[0] - before[0]) / gib,
        broker_cpu_s_per_gib=(after[1] - before[1]) / gib,
        client_cpu_s_per_gib=(after[2] - before[2]) / gib,
    )


async def throughput(
    workload: str,
    topic: Topic,
    broker: BrokerInfo,
    *,
    broker_pid: int | None,
    proxies: Sequence[Proxy],
    args: argparse.Namespace,
) -> list[dict[str, ThroughputRound]]:
    cases: dict[str, tuple[Endpoint, list[int]]] = {
        DIRECT: (Endpoint(name=DIRECT, host=broker.host, port=broker.port), [])
    }
    for proxy in proxies:
        cases[proxy.name] = (proxy.endpoint, proxy.pids())
    rounds: list[dict[str, ThroughputRound]] = []
    for index in range(args.pairs):
        measured: dict[str, ThroughputRound] = {}
        for case in rotation(list(cases), index):
            endpoint, pids = cases[case]
            measured[case] = await throughput_round(
                workload, case, endpoint, topic, proxy_pids=pids, broker_pid=broker_pid, args=args
            )
            print(
                f"{workload:16} {case:10} {measured[case].mib_per_s:8.1f} MiB/s  "
                f"proxy {measured[case].proxy_cpu_s_per_gib:5.2f} CPU-s/GiB"
            )
        rounds.append(measured)
    return rounds


def summarise_throughput(
    rounds: Sequence[dict[str, ThroughputRound]], baseline: str, candidate: str
) -> dict[str, float]:
    summary: dict[str, float] = {}
    for case in rounds[0]:
        summary[f"{case} MiB/s"] = median([r[case].mib_per_s for r in rounds])
        summary[f"{case} broker CPU-s/GiB"] = median([r[case].broker_cpu_s_per_gib for r in rounds])
        summary[f"{case} client CPU-s/GiB"] = median([r[case].client_cpu_s_per_gib for r in rounds])
        if case != DIRECT:
            summary[f"{case} proxy CPU-s/GiB"] = median(
                [r[case].proxy_cpu_s_per_gib for r in rounds]
            )
            summary[f"{case} ratio_to_direct"] = median(
                [r[case].mib_per_s / r[DIRECT].mib_per_s for r in rounds]
            )
    summary[f"ratio {candidate} to {baseline}"] = median(
        [r[candidate].mib_per_s / r[baseline].mib_per_s for r in rounds]
    )
    return summary


# -- connections -------------------------------------------------------------------------------


async def connections(
    proxy: Proxy, broker: BrokerInfo, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """RSS of each of the proxy's processes before and with the idle clients (after the
    throughput rounds: its caches hold what they read), then produce latency through it and
    direct while they are held."""
    idle = []
    body = request_class(ApiKey.API_VERSIONS, 0)()
    before = {str(pid): rss_bytes(pid) / MIB for pid in proxy.pids()}
    try:
        for _ in range(args.idle_connections):
            connection = await RawConnection.open(proxy.endpoint)
            connection.send(ApiKey.API_VERSIONS, 0, body)
            await connection.receive()
            idle.append(connection)
        await asyncio.sleep(2.0)
        rss = {str(pid): rss_bytes(pid) / MIB for pid in proxy.pids()}
        direct = Endpoint(name=DIRECT, host=broker.host, port=broker.port)
        proxied, straight = await produce_latencies(
            proxy.endpoint,
            direct,
            topic,
            version=PRODUCE_VERSION,
            rate=args.produce_rate,
            seconds=args.produce_seconds,
        )
    finally:
        for connection in idle:
            await connection.close()
    result = {
        "idle_connections": args.idle_connections,
        "rss_mib_before_by_pid": before,
        "rss_mib_by_pid": rss,
        "max_process_rss_mib": max(rss.values()),
        "total_rss_mib": sum(rss.values()),
        "produce_p50_ms_proxy": percentile(proxied, 0.5) * 1000,
        "produce_p99_ms_proxy": percentile(proxied, 0.99) * 1000,
        "produce_p50_ms_direct": percentile(straight, 0.5) * 1000,
        "produce_p99_ms_direct": percentile(straight, 0.99) * 1000,
    }
    print(f"{proxy.name}: {json.dumps(result)}")
    return result


# -- run -----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        servers_from_env(with_s3=args.tier == "s3") as servers,
        remote_tier(args.tier, servers.s3, "bench-scale") as target,
    ):
        broker = servers.broker
        tiered_name = f"bench-scale-tiered-{uuid.uuid4().hex[:8]}"
        metadata_topic = f"__rlm-{tiered_name}"
        spill = Path(tempfile.mkdtemp(prefix="bench-scale-spill-"))
        await produce_and_tier(
            broker,
            target,
            topic=tiered_name,
            spill=spill,
            data_mib=args.data_mib,
            segment_bytes=SEGMENT_BYTES,
        )
        plain = await plain_topic(broker, args.data_mib)
        settings = {
            **tier_settings(target, metadata_topic),
            "remote.fetch.offload.enable": True,
            "log.level": "WARNING",
        }
        with running_proxies(broker, settings, args.workers) as proxies:
            baseline, candidate = proxies[0].name, proxies[1].name
            for proxy in proxies:
                await asyncio.to_thread(wait_ready, proxy.server)
            tiered_id, _ = await topic_id_and_end(proxies[0].endpoint, tiered_name)
            tiered = Topic(
                name=tiered_name,
                topic_id=tiered_id,
                end_offset=await tiered_end(broker, tiered_name, metadata_topic),
            )
            throughput_rounds = {
                "pass-through": await throughput(
                    "pass-through",
                    plain,
                    broker,
                    broker_pid=servers.broker_pid,
                    proxies=proxies,
                    args=args,
                ),
                "remote catch-up": await throughput(
                    "remote catch-up",
                    tiered,
                    broker,
                    broker_pid=servers.broker_pid,
                    proxies=proxies,
                    args=args,
                ),
            }
            memory = {
                proxy.name: await connections(proxy, broker, plain.name, args) for proxy in proxies
            }
    return {
        "benchmark": "scale",
        "date": time.strftime("%Y-%m-%d"),
        "args": vars(args),
        "broker": broker.kind,
        "summary": {
            workload: summarise_throughput(rounds, baseline, candidate)
            for workload, rounds in throughput_rounds.items()
        },
        "connections": memory,
        "rounds": {
            workload: [{case: asdict(r) for case, r in measured.items()} for measured in rounds]
            for workload, rounds in throughput_rounds.items()
        },
    }


def wait_ready(server: TierproxyServer) -> None:
    """Until the proxy's ``/readyz`` answers 200 (its metadata view caught up)."""
    deadline = time.monotonic() + 120
    while server.health("/readyz")[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the proxy did not become ready")
        time.sleep(0.5)


def plot(result: dict[str, Any]) -> Path:
    panels: list[tuple[str, str, dict[str, dict[str, float]]]] = []
    for workload, summary in result["summary"].items():
        cases = [key.removesuffix(" MiB/s") for key in summary if key.endswith(" MiB/s")]
        panels.append(
            (
                f"{workload}: aggregate MiB/s",
                "MiB/s",
                {c: {"MiB/s": summary[f"{c} MiB/s"]} for c in cases},
            )
        )
    panels.append(
        (
            "RSS with idle connections",
            "MiB",
            {
                name: {
                    "largest process": figures["max_process_rss_mib"],
                    "all processes": figures["total_rss_mib"],
                }
                for name, figures in result["connections"].items()
            },
        )
    )
    return bar_chart("scale", panels, title="tierproxy: workers on one host")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-mib", type=int, default=256)
    parser.add_argument("--tier", choices=("local", "s3"), default="local")
    parser.add_argument("--workers", type=int, default=2, help="the candidate's workers")
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--load-processes", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3, help="rounds of the three cases")
    parser.add_argument("--round-seconds", type=float, default=15.0)
    parser.add_argument("--idle-connections", type=int, default=2000)
    parser.add_argument("--produce-rate", type=float, default=200.0)
    parser.add_argument("--produce-seconds", type=float, default=10.0)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    path = save_json("scale", result)
    print(f"results: {path} and {plot(result)}")


if __name__ == "__main__":
    main()
