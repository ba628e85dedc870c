"""What the pass-through proxy costs: the same workloads directly against the broker and
through ``tierproxy serve``, alternating in one run.

Run::

    .venv/bin/python -m bench.passthrough                        # embedded Apache Kafka 4.x
    .venv/bin/python -m bench.passthrough --data-mib 256 --pairs 3   # quicker, noisier
    KAFKA_HOME=/opt/kafka .venv/bin/python -m bench.passthrough  # another Kafka (KRaft)
    KAFKA_BOOTSTRAP=host:9092 .venv/bin/python -m bench.passthrough
    TIERPROXY_BENCH_RESULTS=/tmp/r .venv/bin/python -m bench.passthrough --only 'raw Fetch'

Workloads, each run direct (A) and through the proxy (B), alternating A B / B A for
``--pairs`` pairs after ``--warmup`` unmeasured rounds of each, reporting medians and the
median of the per-pair ratios (1 GiB of data keeps a raw 1 MiB round at seconds, not tenths
of one, and the warm-up rounds warm the broker's JIT):

* consumer throughput, 1 KiB records, one partition of ``--data-mib`` MiB written before the
  rounds (so the data is warm in the broker): a raw Fetch loop (one Fetch in flight, records
  left as bytes, the next offset taken from the last batch header) at Fetch v12, which the
  proxy forwards untouched, and at v16 and v17 when the broker speaks them, whose responses
  stream through the proxy holding only their tail (KIP-951 node endpoints); each with 1 MiB
  and 8 MiB ``partition_max_bytes`` (the topic has Kafka's default 1 GiB segments, so an
  8 MiB fetch gets 8 MiB answers); confluent-kafka (librdkafka) with
  ``fetch.queue.backoff.ms=0``; kcat where it can talk to the broker directly; and Kafka's
  Java consumer (``ConsumerPerformance`` from the broker's jars; JVM start-up, about 3 s on a
  busy machine, is in each round on both paths, hence the default ``--data-mib`` 1024).
  CPU seconds per GiB of the proxy process, the broker and the client, and the client's
  wake-ups per MiB, are recorded next to MiB/s.
* the anchor: the raw Fetch loops through tierproxy against a plain TCP forwarder
  (:mod:`bench.forwarder`, which understands nothing), alternating. Kroxylicious would be the
  fairer anchor, but ``io.kroxylicious:kroxylicious-app`` is not on this Maven Central
  mirror. With ``--baseline-tree DIR`` the same loops also run through the proxy of another
  source tree (the commit before an optimisation), alternating with this one.
* produce latency at moderate load: one 1 KiB record per Produce (acks=1, v8 which the proxy
  forwards untouched, and v11 whose responses it scans for KIP-951 node endpoints), sent
  open-loop at ``--produce-rate`` requests/s for ``--produce-seconds`` on one connection
  direct and one through the proxy at the same time, staggered by half a period (so a
  stall of the shared machine hits both); p50 and p99 of send-to-response time and the
  proxy's overhead, per pair, the leading path alternating.
* proxy memory: RSS of the freshly started proxy, then with 200 idle client connections
  (each has done one ApiVersions round trip, so its broker connection is open too).

Goals: consumer >= 0.90 x direct for raw Fetch v12 and v17, librdkafka and the Java
consumer; proxy / TCP forwarder >= 1.0; proxy CPU <= 0.3 s per GiB passed through; produce
p99 overhead <= 1 ms, RSS <= 200 MiB with 200 idle connections. Results:
``bench/results/passthrough.json`` and ``.png`` (``$TIERPROXY_BENCH_RESULTS`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import forwarder
from bench.clients import (
    RECORD_BYTES,
    Endpoint,
    RawConnection,
    confluent_consume,
    java_consume,
    preload,
    raw_fetch_all,
    topic_id_and_end,
)
from bench.common import (
    GIB,
    MIB,
    Pair,
    alternate_async,
    bar_chart,
    cpu_seconds,
    median,
    percentile,
    rss_bytes,
    save_json,
    throughput_summary,
)
from bench.profile import record, summarise
from protocol.messages import ApiKey, nested_class, request_class
from protocol.records import Record, build_record_batch
from proxy.embedded import (
    KAFKA_4,
    ManagedProcess,
    broker_from_env,
    create_topic,
    ensure_jars,
    free_port,
)
from proxy.embedded.info import BrokerInfo
from proxy.embedded.probe import api_versions

SEGMENT_BYTES = GIB
"""Kafka's default ``log.segment.bytes``. A Fetch answer never spans segments, and the
embedded broker's 1 MiB segments (small for the tests' sake) made every "8 MiB" round
fetch 1 MiB answers."""
IDLE_CONNECTIONS = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerRound:
    workload: str
    path: str
    mib: float
    seconds: float
    mib_per_s: float
    proxy_cpu_s_per_gib: float
    broker_cpu_s_per_gib: float
    client_cpu_s_per_gib: float
    client_wakeups_per_mib: float
    """Voluntary context switches of the client (this process, and a client tool run to
    completion) per MiB. The client's figures show a cost of the proxy that the proxy's own
    do not (more wake-ups, more CPU per GiB in the client)."""


def client_usage() -> tuple[float, int]:
    """CPU seconds and voluntary context switches of this process and of its children that
    have exited and been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
        own.ru_nvcsw + children.ru_nvcsw,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRound:
    path: str
    requests: int
    p50_ms: float
    p99_ms: float
    max_ms: float


# -- clients (the others are in bench.clients) --------------------------------------------


def kcat_consume_all(kcat: str, endpoint: Endpoint, topic: str, fetch_bytes: int) -> int:
    result = subprocess.run(
        [
            kcat, "-C", "-b", endpoint.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
            "-e", "-q", "-f", "%S\n",
            "-X", "fetch.queue.backoff.ms=0",
            "-X", f"max.partition.fetch.bytes={fetch_bytes}",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    return sum(int(line) for line in result.stdout.split())


def kcat_works(kcat: str | None, endpoint: Endpoint) -> bool:
    """Whether kcat talks to ``endpoint`` and its librdkafka knows
    ``fetch.queue.backoff.ms`` (2.1 on): an older one refuses the setting the rounds need
    (without it, a consumer behind its queue pauses a second at a time)."""
    if kcat is None:
        return False
    probe = subprocess.run(
        [kcat, "-b", endpoint.bootstrap, "-L", "-m", "5", "-X", "fetch.queue.backoff.ms=0"],
        check=False,
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


class TimedProducer:
    """One connection sending Produce requests (acks=1, one 1 KiB record each) and timing
    each from send to response."""

    def __init__(self, connection: RawConnection, topic: str, version: int) -> None:
        self._connection = connection
        self._version = version
        body_class = request_class(ApiKey.PRODUCE, version)
        self._body_class = body_class
        self._topic_class = nested_class(body_class, "topic_data")
        self._partition_class = nested_class(self._topic_class, "partition_data")
        self._topic = topic
        self._value = os.urandom(RECORD_BYTES)
        self._sent: deque[float] = deque()
        self.latencies: list[float] = []

    def send(self) -> None:
        batch = build_record_batch(
            base_offset=0, records=[Record(value=self._value, timestamp=int(time.time() * 1000))]
        )
        body = self._body_class(
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                self._topic_class(
                    name=self._topic,
                    partition_data=(self._partition_class(index=0, records=batch),),
                ),
            ),
        )
        self._sent.append(time.perf_counter())
        self._connection.send(ApiKey.PRODUCE, self._version, body)

    async def receive(self, count: int) -> None:
        for _ in range(count):
            await self._connection.receive()
            self.latencies.append(time.perf_counter() - self._sent.popleft())


async def produce_latencies(
    first: Endpoint,
    second: Endpoint,
    topic: str,
    *,
    version: int,
    rate: float,
    seconds: float,
) -> tuple[list[float], list[float]]:
    """Open-loop produce to both endpoints in the same period, staggered by half a period
    (``first`` leads), so both see the same moments of a noisy machine; seconds per request."""
    connections = [await RawConnection.open(first), await RawConnection.open(second)]
    producers = [TimedProducer(c, topic, version) for c in connections]
    total = int(rate * seconds)
    receivers = [asyncio.create_task(p.receive(total)) for p in producers]
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        for i in range(2 * total):
            await asyncio.sleep(max(0.0, started + i / (2 * rate) - loop.time()))
            producers[i % 2].send()
        await asyncio.wait_for(asyncio.gather(*receivers), 60)
    finally:
        for receiver in receivers:
            receiver.cancel()
        for connection in connections:
            await connection.close()
    return producers[0].latencies, producers[1].latencies


async def idle_connections_rss(endpoint: Endpoint, proxy_pid: int, count: int) -> int:
    """Proxy RSS while ``count`` clients sit idle after one ApiVersions round trip each."""
    connections = [await RawConnection.open(endpoint) for _ in range(count)]
    try:
        body = request_class(ApiKey.API_VERSIONS, 0)()
        for connection in connections:
            connection.send(ApiKey.API_VERSIONS, 0, body)
        for connection in connections:
            await connection.receive()
        await asyncio.sleep(1.0)
        return rss_bytes(proxy_pid)
    finally:
        for connection in connections:
            await connection.close()


# -- set-up ------------------------------------------------------------------------------


@contextlib.contextmanager
def running_forwarder(broker: BrokerInfo, log_dir: Path) -> Iterator[tuple[Endpoint, int]]:
    """The plain TCP forwarder of :mod:`bench.forwarder` in front of ``broker``."""
    with forwarder.running(broker.bootstrap, log_dir) as (port, pid):
        yield Endpoint(name="forwarder", host="127.0.0.1", port=port), pid


@contextlib.contextmanager
def running_proxy(
    broker: BrokerInfo, log_dir: Path, *, source: Path | None = None, name: str = "proxy"
) -> Iterator[tuple[Endpoint, int]]:
    """``tierproxy serve`` in front of ``broker``: this checkout's, or the one in ``source``
    (a baseline tree, e.g. from ``git archive``) first on the module path.

    A baseline runs with ``-P``: ``python -m`` puts the working directory ahead of
    ``PYTHONPATH``, so run from a checkout, the "baseline" imported that checkout's proxy
    and every A/B compared the tree with itself.
    """
    port = free_port()
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    isolation = [] if source is None else ["-P"]
    process = ManagedProcess(
        name,
        [
            sys.executable, *isolation, "-m", "proxy.cli", "serve",
            "--bootstrap", broker.bootstrap, "--listen", f"127.0.0.1:{port}",
            "--log-level", "WARNING",
        ],
        log_path=log_dir / f"{name}.log",
        env=env,
    )  # fmt: skip
    process.start()
    try:
        process.wait_ready(lambda: bool(api_versions("127.0.0.1", port)), timeout_s=30)
        assert process.pid is not None
        yield Endpoint(name=name, host="127.0.0.1", port=port), process.pid
    finally:
        process.stop()


def charged(
    workload: str,
    endpoint: Endpoint,
    path_pid: int | None,
    broker_pid: int | None,
    consume: Callable[[Endpoint], Awaitable[int]],
) -> Callable[[], Awaitable[ConsumerRound]]:
    """A round of ``consume`` against ``endpoint`` with MiB/s and CPU seconds per GiB of the
    process in the path (``path_pid``: the proxy or the forwarder; none when direct)."""

    async def measure() -> ConsumerRound:
        path_before = cpu_seconds(path_pid) if path_pid else 0.0
        broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
        client_cpu_before, client_wakeups_before = client_usage()
        started = time.perf_counter()
        received = await consume(endpoint)
        seconds = time.perf_counter() - started
        client_cpu, client_wakeups = client_usage()
        gib = received / GIB
        proxy_cpu = cpu_seconds(path_pid) - path_before if path_pid else 0.0
        broker_cpu = cpu_seconds(broker_pid) - broker_before if broker_pid else float("nan")
        return ConsumerRound(
            workload=workload,
            path=endpoint.name,
            mib=received / MIB,
            seconds=seconds,
            mib_per_s=received / MIB / seconds,
            proxy_cpu_s_per_gib=proxy_cpu / gib,
            broker_cpu_s_per_gib=broker_cpu / gib,
            client_cpu_s_per_gib=(client_cpu - client_cpu_before) / gib,
            client_wakeups_per_mib=(client_wakeups - client_wakeups_before) / (received / MIB),
        )

    return measure


def consumer_workloads(
    broker: BrokerInfo,
    direct: Endpoint,
    *,
    topic: str,
    topic_id: uuid.UUID,
    end_offset: int,
    count: int,
) -> dict[str, Callable[[Endpoint], Awaitable[int]]]:
    """Every consumer workload that can run against this broker, by name."""
    workloads: dict[str, Callable[[Endpoint], Awaitable[int]]] = {}

    def raw(version: int, fetch_bytes: int) -> Callable[[Endpoint], Awaitable[int]]:
        async def consume(endpoint: Endpoint) -> int:
            return await raw_fetch_all(
                endpoint,
                version=version,
                topic=topic,
                topic_id=topic_id,
                end_offset=end_offset,
                partition_max_bytes=fetch_bytes,
            )

        return consume

    def threaded(
        target: Callable[[Endpoint, int], int], fetch_bytes: int
    ) -> Callable[[Endpoint], Awaitable[int]]:
        async def consume(endpoint: Endpoint) -> int:
            return await asyncio.to_thread(target, endpoint, fetch_bytes)

        return consume

    versions = [12] + [v for v in (16, 17) if broker.supports(ApiKey.FETCH, v)]
    for version in versions:
        for fetch_mib in (1, 8):
            workloads[f"raw Fetch v{version}, {fetch_mib} MiB"] = raw(version, fetch_mib * MIB)
    for fetch_mib in (1, 8):
        workloads[f"confluent-kafka, {fetch_mib} MiB"] = threaded(
            lambda endpoint, fetch_bytes: (
                confluent_consume(endpoint, topic, {0: count}, fetch_bytes).bytes
            ),
            fetch_mib * MIB,
        )
    for name, target in client_tools(broker, direct, topic, count).items():
        for fetch_mib in (1, 8):
            workloads[f"{name}, {fetch_mib} MiB"] = threaded(target, fetch_mib * MIB)
    return workloads


def client_tools(
    broker: BrokerInfo, direct: Endpoint, topic: str, count: int
) -> dict[str, Callable[[Endpoint, int], int]]:
    """The external consumers that can run here: Kafka's Java consumer (Apache Kafka only),
    and kcat where it can talk to the broker directly."""
    tools: dict[str, Callable[[Endpoint, int], int]] = {}
    if broker.kind == "kafka":
        distribution = ensure_jars(KAFKA_4)
        tools["Java consumer"] = lambda endpoint, fetch_bytes: (
            java_consume(distribution, endpoint, topic, count, fetch_bytes).bytes
        )
    kcat = shutil.which("kcat")
    if kcat is not None and kcat_works(kcat, direct):
        tools["kcat"] = lambda endpoint, fetch_bytes: kcat_consume_all(
            kcat, endpoint, topic, fetch_bytes
        )
    return tools


async def measure_produce(
    args: argparse.Namespace, broker: BrokerInfo, direct: Endpoint, proxy: Endpoint
) -> dict[str, Any]:
    """Open-loop produce latency, direct and through the proxy: Produce v8, which the proxy
    forwards untouched, and v11 when the broker speaks it, whose responses the proxy scans
    for KIP-951 node endpoints. Each pair is one period in which both paths send, staggered,
    direct leading in even pairs and the proxy in odd ones."""
    produce_topic = f"bench-produce-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, produce_topic, partitions=1)

    def summary(path: str, latencies: list[float]) -> ProduceRound:
        return ProduceRound(
            path=path,
            requests=len(latencies),
            p50_ms=percentile(latencies, 0.5) * 1000,
            p99_ms=percentile(latencies, 0.99) * 1000,
            max_ms=max(latencies) * 1000,
        )

    results: dict[str, Any] = {}
    for version in [8] + ([11] if broker.supports(ApiKey.PRODUCE, 11) else []):
        pairs: list[Pair[ProduceRound]] = []
        for index in range(args.pairs):
            order = (direct, proxy) if index % 2 == 0 else (proxy, direct)
            first, second = await produce_latencies(
                *order,
                produce_topic,
                version=version,
                rate=args.produce_rate,
                seconds=args.produce_seconds,
            )
            by_path = dict(zip((order[0].name, order[1].name), (first, second), strict=True))
            pairs.append(
                Pair(
                    index=index,
                    a=summary("direct", by_path["direct"]),
                    b=summary("proxy", by_path["proxy"]),
                )
            )
        produce = {
            "rate_per_s": args.produce_rate,
            "seconds": args.produce_seconds,
            "direct_p50_ms": median([p.a.p50_ms for p in pairs]),
            "proxy_p50_ms": median([p.b.p50_ms for p in pairs]),
            "direct_p99_ms": median([p.a.p99_ms for p in pairs]),
            "proxy_p99_ms": median([p.b.p99_ms for p in pairs]),
            "p50_overhead_ms": median([p.b.p50_ms - p.a.p50_ms for p in pairs]),
            "p99_overhead_ms": median([p.b.p99_ms - p.a.p99_ms for p in pairs]),
            "rounds": [asdict(p) for p in pairs],
        }
        results[f"Produce v{version}"] = produce
        print(
            f"Produce v{version} @ {args.produce_rate:.0f}/s: p50 direct "
            f"{produce['direct_p50_ms']:.3f} ms, proxy {produce['proxy_p50_ms']:.3f} ms; p99 "
            f"direct {produce['direct_p99_ms']:.3f} ms, proxy {produce['proxy_p99_ms']:.3f} ms; "
            f"overhead p50 {produce['p50_overhead_ms']:.3f} ms, p99 "
            f"{produce['p99_overhead_ms']:.3f} ms"
        )
    return results


async def warmed_alternation(
    args: argparse.Namespace,
    a: Callable[[], Awaitable[ConsumerRound]],
    b: Callable[[], Awaitable[ConsumerRound]],
) -> list[Pair[ConsumerRound]]:
    """``--warmup`` unmeasured rounds of each path, then ``--pairs`` alternating pairs.

    Without them the first pairs of a run would measure a broker whose JIT is still cold,
    and rows measured later (the forwarder anchors) a warm one.
    """
    for _ in range(args.warmup):
        await a()
        await b()
    return await alternate_async(args.pairs, a, b)


def client_summary(pairs: list[Pair[ConsumerRound]]) -> dict[str, float]:
    """Medians of what the client spent on the direct (``a``) and proxy (``b``) rounds."""
    return {
        "client_cpu_s_per_gib_direct": median([p.a.client_cpu_s_per_gib for p in pairs]),
        "client_cpu_s_per_gib_proxy": median([p.b.client_cpu_s_per_gib for p in pairs]),
        "client_wakeups_per_mib_direct": median([p.a.client_wakeups_per_mib for p in pairs]),
        "client_wakeups_per_mib_proxy": median([p.b.client_wakeups_per_mib for p in pairs]),
    }


def profile_path(directory: Path | None, workload: str) -> Path | None:
    """Where the proxy's profile during ``workload`` goes, if profiling."""
    if directory is None:
        return None
    slug = "".join(c if c.isalnum() else "-" for c in workload.lower()).strip("-")
    return directory / f"passthrough-{slug}.txt"


async def against(
    args: argparse.Namespace,
    baseline: tuple[Endpoint, int],
    candidate: tuple[Endpoint, int],
    workloads: dict[str, Callable[[Endpoint], Awaitable[int]]],
) -> dict[str, Any]:
    """The raw Fetch loops through ``baseline`` (A) and ``candidate`` (B), alternating; the
    CPU-s/GiB are those of the process in each path."""
    (a, a_pid), (b, b_pid) = baseline, candidate
    results: dict[str, Any] = {}
    for name, workload in workloads.items():
        if not name.startswith("raw Fetch"):
            continue
        pairs = await warmed_alternation(
            args,
            charged(name, a, a_pid, None, workload),
            charged(name, b, b_pid, None, workload),
        )
        ratios = [p.b.mib_per_s / p.a.mib_per_s for p in pairs]
        summary = {
            f"{a.name}_mib_per_s": median([p.a.mib_per_s for p in pairs]),
            f"{b.name}_mib_per_s": median([p.b.mib_per_s for p in pairs]),
            f"ratio_{b.name}_to_{a.name}": median(ratios),
            f"ratio_{b.name}_to_{a.name}_min": min(ratios),
            f"ratio_{b.name}_to_{a.name}_max": max(ratios),
            f"{a.name}_cpu_s_per_gib": median([p.a.proxy_cpu_s_per_gib for p in pairs]),
            f"{b.name}_cpu_s_per_gib": median([p.b.proxy_cpu_s_per_gib for p in pairs]),
        }
        results[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
        print(f"{name:24s} " + "  ".join(f"{key} {value:.3f}" for key, value in summary.items()))
    return results


async def measure_anchors(
    args: argparse.Namespace,
    *,
    broker: BrokerInfo,
    log_dir: Path,
    proxy: tuple[Endpoint, int],
    workloads: dict[str, Callable[[Endpoint], Awaitable[int]]],
) -> dict[str, Any]:
    """tierproxy against the plain TCP forwarder (the floor of any Kafka proxy: it cannot
    rewrite Metadata, so client libraries would leave it), and with ``--baseline-tree``
    against the proxy of another source tree: the optimisation in question, A/B."""
    anchors: dict[str, Any] = {
        "anchor": "plain asyncio TCP forwarder (bench/forwarder.py); Kroxylicious is not on "
        "this machine's Maven Central mirror (io.kroxylicious:kroxylicious-app missing)"
    }
    with running_forwarder(broker, log_dir) as plain:
        anchors["forwarder"] = await against(args, plain, proxy, workloads)
    if args.baseline_tree is not None:
        with running_proxy(broker, log_dir, source=args.baseline_tree, name="baseline") as old:
            anchors["baseline"] = await against(args, old, proxy, workloads)
    return anchors


async def run(
    args: argparse.Namespace, broker: BrokerInfo, broker_pid: int | None
) -> dict[str, Any]:
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-passthrough-"))
    result: dict[str, Any] = {
        "broker": broker.version,
        "data_mib": args.data_mib,
        "pairs": args.pairs,
        "warmup_rounds_per_path": args.warmup,
        "record_bytes": RECORD_BYTES,
        "produce_rate": args.produce_rate,
        "data": "warm (written just before the rounds)",
        "load_average_at_start": os.getloadavg(),
    }
    with running_proxy(broker, log_dir) as (proxy, proxy_pid):
        rss_fresh = rss_bytes(proxy_pid)
        rss_idle = await idle_connections_rss(proxy, proxy_pid, IDLE_CONNECTIONS)
        result["memory"] = {
            "rss_fresh_mib": rss_fresh / MIB,
            f"rss_with_{IDLE_CONNECTIONS}_idle_connections_mib": rss_idle / MIB,
        }
        print(f"proxy RSS: fresh {rss_fresh / MIB:.1f} MiB, with {IDLE_CONNECTIONS} idle "
              f"connections {rss_idle / MIB:.1f} MiB")  # fmt: skip

        topic = f"bench-passthrough-{uuid.uuid4().hex[:8]}"
        await create_topic(
            broker.bootstrap, topic, partitions=1, configs={"segment.bytes": str(SEGMENT_BYTES)}
        )
        count = args.data_mib * MIB // RECORD_BYTES
        started = time.perf_counter()
        await asyncio.to_thread(preload, broker.bootstrap, topic, count)
        print(f"preloaded {count} records of {RECORD_BYTES} B in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        topic_id, end_offset = await topic_id_and_end(direct, topic)

        workloads = {
            name: workload
            for name, workload in consumer_workloads(
                broker, direct, topic=topic, topic_id=topic_id, end_offset=end_offset, count=count
            ).items()
            if not args.only or any(name.startswith(prefix) for prefix in args.only)
        }
        if not args.only and not any(name.startswith("kcat") for name in workloads):
            result["kcat"] = (
                "skipped: kcat missing, cannot talk to this broker directly, or its "
                "librdkafka predates fetch.queue.backoff.ms"
            )
            print(result["kcat"])
        consumer: dict[str, Any] = {}
        for name, workload in workloads.items():
            profile = profile_path(args.profile, name)
            with record(proxy_pid, profile):
                pairs = await warmed_alternation(
                    args,
                    charged(name, direct, None, broker_pid, workload),
                    charged(name, proxy, proxy_pid, broker_pid, workload),
                )
            if profile is not None:
                print("\n".join(summarise(profile, top=12).lines()))
            summary = {**throughput_summary(pairs), **client_summary(pairs)}
            consumer[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
            print(
                f"{name:28s} direct {summary['direct_mib_per_s']:7.1f} MiB/s  proxy "
                f"{summary['proxy_mib_per_s']:7.1f} MiB/s  ratio "
                f"{summary['ratio_proxy_to_direct']:.3f}  proxy CPU "
                f"{summary['proxy_cpu_s_per_gib']:.2f} s/GiB  client CPU "
                f"{summary['client_cpu_s_per_gib_direct']:.2f} direct, "
                f"{summary['client_cpu_s_per_gib_proxy']:.2f} proxy s/GiB"
            )
        result["consumer"] = consumer
        result["anchors"] = await measure_anchors(
            args, broker=broker, log_dir=log_dir, proxy=(proxy, proxy_pid), workloads=workloads
        )
        if not args.skip_produce:
            result["produce"] = await measure_produce(args, broker, direct, proxy)
        result["memory"]["rss_after_all_rounds_mib"] = rss_bytes(proxy_pid) / MIB
    result["load_average_at_end"] = os.getloadavg()
    start, end = (
        tuple(round(v, 2) for v in result[key])
        for key in ("load_average_at_start", "load_average_at_end")
    )
    print(f"load average (1, 5, 15 min): {start} at start, {end} at end (shared machine)")
    return result


def plot(result: dict[str, Any]) -> Path:
    consumer = {
        name: {
            "direct": entry["summary"]["direct_mib_per_s"],
            "proxy": entry["summary"]["proxy_mib_per_s"],
        }
        for name, entry in result["consumer"].items()
    }
    latency = {
        f"{name} {q}": {"direct": entry[f"direct_{q}_ms"], "proxy": entry[f"proxy_{q}_ms"]}
        for name, entry in result.get("produce", {}).items()
        for q in ("p50", "p99")
    }
    memory = {
        label.replace("_mib", "").replace("_", " "): {"proxy": value}
        for label, value in result["memory"].items()
    }
    panels = [
        ("consumer throughput, 1 KiB records", "MiB/s", consumer),
        (f"produce latency, 1 KiB @ {result['produce_rate']:.0f} req/s", "ms", latency),
        ("proxy RSS", "MiB", memory),
    ]
    return bar_chart(
        "passthrough",
        [panel for panel in panels if panel[2]],  # --skip-produce leaves latency empty
        title=f"tierproxy pass-through vs direct ({result['broker']}, medians of "
        f"{result['pairs']} pairs)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-mib",
        type=int,
        default=1024,
        help="consumer data (1 partition); at 256 a raw 1 MiB round lasted 0.3 s",
    )
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs per workload (>= 3)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured rounds of each path per workload"
    )
    parser.add_argument("--produce-rate", type=float, default=500.0, help="Produce requests/s")
    parser.add_argument("--produce-seconds", type=float, default=6.0)
    parser.add_argument(
        "--only", nargs="*", default=[], help="consumer workloads starting with these names"
    )
    parser.add_argument("--skip-produce", action="store_true", help="no produce latency rounds")
    parser.add_argument(
        "--profile", type=Path, help="sample the proxy with py-spy per workload into this dir"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run the raw Fetch loops through the proxy of this source tree (A) and this "
        "one (B), e.g. a 'git archive' of the commit before an optimisation",
    )
    args = parser.parse_args()
    with broker_from_env(os.environ) as server:
        broker = server.start()
        broker_pid = getattr(server, "pid", None)
        result = asyncio.run(run(args, broker, broker_pid))
    print(f"saved {save_json('passthrough', result)} and {plot(result)}")


if __name__ == "__main__":
    main()
