"""tierproxy's remote tier against Kafka's own (KIP-405 with LocalTieredStorage) and Kafka's
local log, on one broker, in one run: the catch-up matrix.

Question: per number of partitions (1, 8), client (a raw Fetch v12 loop,
librdkafka, Kafka's Java consumer) and ``max.partition.fetch.bytes`` (1, 8 MiB), how fast is a
catch-up read (a) from Kafka's native tiered storage, (b) from tierproxy's remote tier
through the proxy, (c) from the broker's local log; b/c (goal >= 0.8 in every cell), b/a
(goal >= 1.5), a/c; CPU seconds per GiB of the broker, the proxy and the client on each path
(proxy goal <= 1.5); Fetch requests per GiB on each path (8 partitions: b/c <= 1.1)?

Run::

    .venv/bin/python -m bench.native                     # the whole matrix, then the tail
    .venv/bin/python -m bench.native --clients "raw Fetch v12" --partitions 8 --tail-seconds 0
    .venv/bin/python -m bench.native --fetch-mib 1 --pairs 5 --profile /tmp/profile
    .venv/bin/python -m bench.native --tier s3 --pairs 3   # tierproxy on SeaweedFS instead
    TIERPROXY_BENCH_RESULTS=/tmp/r .venv/bin/python -m bench.native

Set-up: one embedded Apache Kafka 4.x with native tiered storage switched on
(``KafkaBroker(native_tiered=True)``: Kafka's LocalTieredStorage in the work directory).
tierproxy's remote tier (``--tier``) is a local directory by default, like LocalTieredStorage,
so that both remote tiers read local files and the comparison is of the two read paths alone;
``--tier s3`` puts it on SeaweedFS, whose own CPU then shares the machine with the proxy while
the native side pays nothing of the kind (its CPU is then reported too). SeaweedFS is started
only for ``--tier s3``. Per partition count in ``--partitions``, two topics of ``--data-mib``
MiB of 1 KiB records (split evenly over the partitions), 8 MiB segments, each followed by an
untiered head of ``--tail-mib`` MiB:

* tierproxy's topic, tiered by one cycle of the real pipeline (:func:`bench.tiering.
  produce_and_tier`; every topic's metadata in one RLMM topic, so one proxy serves them all).
  *Local* (c) reads it directly from the broker, which still holds it; *tierproxy remote*
  (b) reads it through the proxy with the offload policy on (the proxy serves the tiered
  range from its remote tier although the broker has it: the broker's copy plays no part,
  as if gone). Both read each partition's tiered range, [0, remote log end].
* the native topic, with ``NATIVE_TIERED_TOPIC_CONFIGS`` (every closed segment copied, then
  deleted locally at once); *native remote* (a) reads it directly, [0, local log start).

Clients (``--clients``), each reading every partition from offset 0 to the range's end:

* ``raw Fetch v12``: one Fetch for all the partitions not yet read to their end, one request
  in flight, records left as bytes (the client costs little, so the path's cost shows);
  Fetch requests counted by the loop.
* ``librdkafka``: confluent-kafka's consumer (``fetch.queue.backoff.ms`` 0), standing in for
  kcat: Debian's kcat links a librdkafka that predates ``fetch.queue.backoff.ms`` and cannot
  run these rounds. Fetch requests from its statistics.
* ``Java consumer``: Kafka's ``ConsumerPerformance`` from the broker's jars (Kafka's Java
  perf test), a fresh group per round, ``--messages`` the range's record count (it reads
  the partitions in its own order, so it may read a few records of one partition's head
  before another's range is done). MiB/s from its own ``fetch.time.ms`` (the JVM start and
  the group join left out); the CPU figures of the round include them. Fetch requests from
  its ``fetch-total`` metric.

Each cell (partitions, client, fetch size) runs ``--pairs`` visits; a visit reads the data on
all three paths, in an order that rotates from visit to visit (c b a, b a c, a c b), so every
pair of paths meets in both orders (:mod:`bench.matrix`). The ratios b/c, b/a and a/c are
taken per visit (two paths back to back, an A/B pair) and their medians reported. Before the
cells, each path of each topic is read once, unmeasured (a fresh proxy's first read loads
every index; the broker's JIT warms up). Reported per cell: median MiB/s of each path, the
ratios, CPU seconds per GiB of the broker on each path, of the proxy on tierproxy's, of the
client (this process and the JVM it ran) on each, and Fetch requests per GiB on each (on
tierproxy's, also those the proxy forwarded to the broker rather than answering alone,
``proxy_forwarded_fetches_per_gib_tierproxy``); ``headline``: the worst and median cells
against the goals. Data is warm (page cache) on every path. The proxy runs with its default
chunk cache (256 MiB, ``--chunk-cache-mib``), smaller than the data, so every round reads
the remote tier again; its GETs per GiB (``proxy_gets_per_gib_tierproxy``; 256 would be each
4 MiB chunk once) show it, and show a cache too small for its readers (who then evict each
other's chunks). ``--profile DIR``
samples the proxy with py-spy during each cell; ``--baseline-tree DIR`` adds a fourth path,
the same reads through a proxy run from another checkout (the code before a change), for
before/after figures from one run.

Tail latency (:mod:`bench.tail`, ``--tail-seconds`` per round, 0 to skip; needs 1 in
``--partitions``): a consumer at the head of the log (raw Fetch v12, 64 KiB fetches) alone and
while 4 catch-up readers (1 MiB fetches, in a process of their own) read the tiered range, in
each deployment as a user would run it: with tierproxy everything goes through the proxy and
the catch-up is served from its remote tier; with native tiered storage everything goes to
the broker and the catch-up is served by its RemoteLogManager. Each deployment reads its own
one-partition topic, written alike. The four cases rotate, ``--pairs`` rounds. Reported:
p50/p99, each loaded p99 over its own alone p99 (per round, then the median), the ratio of
those two ratios (goal <= 1), the load's MiB/s (the two remote tiers do not serve the readers
at the same rate; ``--tail-load-mib-per-s`` adds loaded cases capped at one rate in both) and
the proxy's event-loop lag. Results: ``native.json`` and ``native.png``, with the tier kind in
``tier``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.catchup import SEGMENT_BYTES, Pids, gets, produce_head, running_proxy
from bench.clients import (
    READ_COMMITTED,
    RECORD_BYTES,
    Consumed,
    Endpoint,
    FetchTally,
    confluent_consume,
    java_consume,
    preload,
    raw_fetch_partitions,
    topic_id_and_end,
)
from bench.common import MIB, bar_chart, client_cpu_seconds, save_json
from bench.matrix import (
    BASELINE,
    CLIENTS,
    JAVA,
    LIBRDKAFKA,
    LOCAL,
    NATIVE,
    PATHS,
    TIERPROXY,
    Cell,
    Data,
    PathRound,
    headline,
    path_round,
    plan,
    summarise_cell,
    visit_order,
)
from bench.pipeline import BACKENDS, Target
from bench.profile import record
from bench.profile import summarise as summarise_profile
from bench.tail import (
    TAIL_LOAD_CONSUMERS,
    ProxyWatch,
    Setup,
    TailCase,
    ratio_of_ratios,
    tail_rounds,
)
from bench.tiering import produce_and_tier, remote_tier
from proxy.embedded import (
    KAFKA_4,
    NATIVE_TIERED_TOPIC_CONFIGS,
    BrokerInfo,
    KafkaBroker,
    S3Info,
    SeaweedFS,
    create_topic,
    ensure_jars,
)
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.tierproxy import TierproxyServer
from storage.kafka_client import KafkaClient
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager

EARLIEST_LOCAL = -4  # ListOffsets: the local log start (KIP-405)
TIERING_TIMEOUT_S = 300.0


# -- set-up --------------------------------------------------------------------------------


async def local_log_starts(bootstrap: str, topic: str, partitions: int) -> list[int]:
    async with KafkaClient(bootstrap) as client:
        listed = await client.list_offsets(
            None, [(topic, partition, EARLIEST_LOCAL) for partition in range(partitions)]
        )
    return [entry.offset for entry in sorted(listed, key=lambda entry: entry.partition)]


async def remote_log_ends(
    bootstrap: str, metadata_topic: str, topic: str, partitions: int
) -> list[int]:
    """The first offset after each partition's tiered range, from the RLMM's metadata."""
    rlmm = TopicBasedRemoteLogMetadataManager(
        RemoteLogMetadataConfig(topic_name=metadata_topic, topic_partitions=3),
        bootstrap_servers=bootstrap,
    )
    await rlmm.start()
    try:
        ends = []
        for partition in range(partitions):
            tp = rlmm.cache.topic_id_partition(topic, partition)
            end = None if tp is None else rlmm.cache.remote_log_end_offset(tp)
            if end is None:
                raise RuntimeError(f"nothing of {topic}-{partition} was tiered")
            ends.append(end + 1)
    finally:
        await rlmm.close()
    return ends


async def tier_ours(
    args: argparse.Namespace,
    broker: BrokerInfo,
    target: Target,
    *,
    partitions: int,
    metadata_topic: str,
) -> str:
    """A topic tiered by tierproxy's pipeline, its metadata in ``metadata_topic``."""
    topic = f"bench-native-ours-{uuid.uuid4().hex[:8]}"
    await produce_and_tier(
        broker,
        target,
        topic=topic,
        spill=Path(tempfile.mkdtemp(prefix="spill-")),
        data_mib=args.data_mib,
        segment_bytes=SEGMENT_BYTES,
        partitions=partitions,
        metadata_topic=metadata_topic,
    )
    return topic


async def prepare_ours(
    args: argparse.Namespace, broker: BrokerInfo, target: Target, metadata_topic: str
) -> dict[int, tuple[Data, int]]:
    """Per partition count, a topic tiered by tierproxy's pipeline: its tiered range and
    partition 0's high watermark. Every topic is tiered before any gets its head: a later
    cycle would tier an earlier topic's last segment, rolled by its head, too."""
    counts = sorted(set(args.partitions))
    topics = {
        partitions: await tier_ours(
            args, broker, target, partitions=partitions, metadata_topic=metadata_topic
        )
        for partitions in counts
    }
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    prepared = {}
    for partitions, topic in topics.items():
        await asyncio.to_thread(
            produce_head, broker.bootstrap, topic, args.tail_mib * MIB // RECORD_BYTES, partitions
        )
        topic_id, high_watermark = await topic_id_and_end(direct, topic)
        ends = await remote_log_ends(broker.bootstrap, metadata_topic, topic, partitions)
        print(f"tierproxy, {partitions} partition(s): tiered up to {ends}")
        prepared[partitions] = (
            Data(topic=topic, topic_id=topic_id, ends=tuple(ends)),
            high_watermark,
        )
    return prepared


async def prepare_native(
    args: argparse.Namespace, broker: BrokerInfo, *, partitions: int
) -> tuple[Data, int]:
    """A natively tiered topic whose closed segments have left the broker's disk; its range
    below the local log start and partition 0's high watermark."""
    topic = f"bench-native-{uuid.uuid4().hex[:8]}"
    await create_topic(
        broker.bootstrap,
        topic,
        partitions=partitions,
        configs={**NATIVE_TIERED_TOPIC_CONFIGS, "segment.bytes": str(SEGMENT_BYTES)},
    )
    count = args.data_mib * MIB // RECORD_BYTES
    await asyncio.to_thread(preload, broker.bootstrap, topic, count, partitions)
    # A head after the bulk rolls each partition's last segment, so all of it can be tiered.
    await asyncio.to_thread(
        produce_head, broker.bootstrap, topic, args.tail_mib * MIB // RECORD_BYTES, partitions
    )
    deadline = time.monotonic() + TIERING_TIMEOUT_S
    starts = [0] * partitions
    while time.monotonic() < deadline:
        starts = await local_log_starts(broker.bootstrap, topic, partitions)
        if min(starts) >= count / partitions * 0.9:
            break
        await asyncio.sleep(1.0)
    if min(starts) <= 0:
        raise RuntimeError("Kafka tiered nothing natively within the timeout")
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    topic_id, high_watermark = await topic_id_and_end(direct, topic)
    print(f"native, {partitions} partition(s): local logs start at {starts}")
    return Data(topic=topic, topic_id=topic_id, ends=tuple(starts)), high_watermark


# -- the matrix ----------------------------------------------------------------------------


async def consume(cell: Cell, endpoint: Endpoint, data: Data, java: KafkaDistribution) -> Consumed:
    """One read of ``data`` by the cell's client."""
    fetch_bytes = cell.fetch_mib * MIB
    if cell.client == LIBRDKAFKA:
        return await asyncio.to_thread(
            confluent_consume, endpoint, data.topic, data.by_partition(), fetch_bytes
        )
    if cell.client == JAVA:
        return await asyncio.to_thread(
            java_consume, java, endpoint, data.topic, data.records, fetch_bytes
        )
    tally = FetchTally()
    received = await raw_fetch_partitions(
        endpoint,
        version=12,
        topic=data.topic,
        topic_id=data.topic_id,
        ends=data.by_partition(),
        partition_max_bytes=fetch_bytes,
        tally=tally,
    )
    return Consumed(bytes=received, fetches=tally.requests)


def reader(
    cell: Cell, path: str, route: tuple[Endpoint, Data], pids: Pids, java: KafkaDistribution
) -> Callable[[], Awaitable[PathRound]]:
    """A measured read of the cell on ``path``: ``route`` is where it connects and what it
    reads."""
    endpoint, data = route

    async def measure() -> PathRound:
        before, client_before = pids.cpu(), client_cpu_seconds()
        started = time.perf_counter()
        consumed = await consume(cell, endpoint, data, java)
        wall = time.perf_counter() - started
        after, client_after = pids.cpu(), client_cpu_seconds()
        return path_round(
            path,
            received=consumed.bytes,
            seconds=consumed.seconds if consumed.seconds is not None else wall,
            fetches=consumed.fetches,
            cpu={
                "proxy": after[0] - before[0],
                "broker": after[1] - before[1],
                "client": client_after - client_before,
            },
        )

    return measure


async def warm_up(routes: Mapping[int, Mapping[str, tuple[Endpoint, Data]]]) -> None:
    """Read every path of every topic once, unmeasured: a fresh proxy's first read loads
    every index and fills its empty chunk cache; the broker's JIT warms up.

    READ_COMMITTED, as librdkafka reads by default (``isolation.level``): such a read also
    loads each segment's transaction index (and the last one's producer snapshot), which a
    READ_UNCOMMITTED warm-up left to the first librdkafka cell. Those 52 index GETs (51
    segments) were counted in that cell's GETs per GiB: 301-304 for librdkafka at 1 MiB
    (its first cell) against 265-273 for every other cell, with the same chunk loads per
    round (a trace of the chunk cache's loads and the index cache's misses)."""
    for by_path in routes.values():
        for endpoint, data in by_path.values():
            await raw_fetch_partitions(
                endpoint,
                version=12,
                topic=data.topic,
                topic_id=data.topic_id,
                ends=data.by_partition(),
                partition_max_bytes=8 * MIB,
                isolation_level=READ_COMMITTED,
            )


async def measure_matrix(
    args: argparse.Namespace,
    cells: Sequence[Cell],
    routes: Mapping[int, Mapping[str, tuple[Endpoint, Data]]],
    proxies: Mapping[str, tuple[Pids, TierproxyServer]],
) -> tuple[dict[str, Any], dict[Cell, dict[str, float]]]:
    """Every cell's visits (:func:`bench.matrix.visit_order`) and summaries. ``proxies``:
    per path through a proxy, the processes to charge and the proxy (its GETs per GiB are
    reported); the local and native paths are charged to the first's processes."""
    java = ensure_jars(KAFKA_4)
    await warm_up(routes)
    results: dict[str, Any] = {}
    summaries: dict[Cell, dict[str, float]] = {}
    paths = (*PATHS, *(path for path in proxies if path not in PATHS))
    for cell in cells:
        reads = {
            path: reader(
                cell,
                path,
                routes[cell.partitions][path],
                proxies.get(path, proxies[TIERPROXY])[0],
                java,
            )
            for path in paths
        }
        visits: list[dict[str, PathRound]] = []
        profile = profile_path(args.profile, cell)
        gets_before = {path: gets(proxy) for path, (_pids, proxy) in proxies.items()}
        alone_before = {path: answered_alone(proxy) for path, (_pids, proxy) in proxies.items()}
        with record(proxies[TIERPROXY][0].proxy, profile):
            for index in range(args.pairs):
                visits.append({path: await reads[path]() for path in visit_order(index, paths)})
        summary = summarise_cell(visits)
        for path, (_pids, proxy) in proxies.items():
            gib = sum(visit[path].mib for visit in visits) / 1024
            key = "tierproxy" if path == TIERPROXY else "baseline"
            summary[f"proxy_gets_per_gib_{key}"] = (gets(proxy) - gets_before[path]) / gib
            # The client's Fetches less those the proxy answered alone: what reached the broker.
            fetches = sum(visit[path].fetches_per_gib * visit[path].mib / 1024 for visit in visits)
            alone = answered_alone(proxy) - alone_before[path]
            summary[f"proxy_forwarded_fetches_per_gib_{key}"] = (fetches - alone) / gib
        summaries[cell] = summary
        results[cell.name] = {
            "summary": summary,
            "visits": [
                {path: asdict(round_) for path, round_ in visit.items()} for visit in visits
            ],
        }
        print_cell(cell, summary)
        if profile is not None:
            print("\n".join(summarise_profile(profile, top=25).lines()))
    return results, summaries


def answered_alone(proxy: TierproxyServer) -> float:
    """Fetches the proxy answered without asking the broker (it forwarded the others)."""
    return proxy.metric("tierproxy_remote_fetch_answered_without_broker_total")


def profile_path(directory: Path | None, cell: Cell) -> Path | None:
    """Where the proxy's profile during ``cell`` goes, if profiling."""
    if directory is None:
        return None
    slug = "".join(c if c.isalnum() else "-" for c in cell.name.lower()).strip("-")
    return directory / f"native-{slug}.txt"


def print_cell(cell: Cell, summary: Mapping[str, float]) -> None:
    print(
        f"{cell.name}: b/c {summary['ratio_tierproxy_to_local']:.2f}, "
        f"b/a {summary['ratio_tierproxy_to_native']:.2f}, "
        f"a/c {summary['ratio_native_to_local']:.2f}\n"
        f"  MiB/s a {summary['native_mib_per_s']:.0f} b {summary['tierproxy_mib_per_s']:.0f} "
        f"c {summary['local_mib_per_s']:.0f}; CPU-s/GiB broker a "
        f"{summary['broker_cpu_s_per_gib_native']:.2f} b "
        f"{summary['broker_cpu_s_per_gib_tierproxy']:.2f} c "
        f"{summary['broker_cpu_s_per_gib_local']:.2f}, proxy b "
        f"{summary['proxy_cpu_s_per_gib_tierproxy']:.2f}, client a "
        f"{summary['client_cpu_s_per_gib_native']:.2f} b "
        f"{summary['client_cpu_s_per_gib_tierproxy']:.2f} c "
        f"{summary['client_cpu_s_per_gib_local']:.2f}; Fetches/GiB a "
        f"{summary['fetches_per_gib_native']:.0f} b {summary['fetches_per_gib_tierproxy']:.0f} "
        f"c {summary['fetches_per_gib_local']:.0f} (b forwarded to the broker "
        f"{summary['proxy_forwarded_fetches_per_gib_tierproxy']:.0f}); proxy GETs/GiB b "
        f"{summary['proxy_gets_per_gib_tierproxy']:.0f}"
    )
    if "ratio_tierproxy_to_baseline" in summary:
        print(
            f"  baseline tree: {summary['baseline_mib_per_s']:.0f} MiB/s, proxy "
            f"{summary['proxy_cpu_s_per_gib_baseline']:.2f} CPU-s/GiB, Fetches/GiB forwarded "
            f"{summary['proxy_forwarded_fetches_per_gib_baseline']:.0f}; this tree / baseline "
            f"{summary['ratio_tierproxy_to_baseline']:.2f}"
        )


# -- tail latency --------------------------------------------------------------------------


TAIL_PROXY_ALONE = "tierproxy: alone"
TAIL_NATIVE_ALONE = "native: alone"
GOAL_TAIL_RATIO = 1.0


def loaded_names(cap_mib_per_s: float | None) -> tuple[str, str]:
    """The loaded cases' names (tierproxy, native), uncapped or at ``cap_mib_per_s``."""
    rate = "" if cap_mib_per_s is None else f" at {cap_mib_per_s:g} MiB/s"
    return (
        f"tierproxy: {TAIL_LOAD_CONSUMERS} catch-up from its remote tier{rate}",
        f"native: {TAIL_LOAD_CONSUMERS} catch-up from native remote{rate}",
    )


async def tail_comparison(
    args: argparse.Namespace,
    *,
    proxy: Endpoint,
    direct: Endpoint,
    ours: Setup,
    native: Setup,
    watch: ProxyWatch,
) -> dict[str, Any]:
    """A tail consumer's p99 under catch-up load over its p99 alone, in each deployment: with
    tierproxy (tail and catch-up readers through the proxy, the catch-up served from its
    remote tier) and with Kafka's native tiered storage (both directly to the broker, the
    catch-up served by the broker's RemoteLogManager). Each reads the head of its own topic,
    written alike. With ``--tail-load-mib-per-s`` the loaded cases run a second time with the
    load capped at that rate in both. Goal: tierproxy's ratio <= native's."""
    caps = [None] if args.tail_load_mib_per_s is None else [None, args.tail_load_mib_per_s]
    cases = {
        TAIL_PROXY_ALONE: TailCase(tail=proxy, topic=ours),
        TAIL_NATIVE_ALONE: TailCase(tail=direct, topic=native),
    }
    baselines: dict[str, str] = {}
    for cap in caps:
        ours_loaded, native_loaded = loaded_names(cap)
        cases[ours_loaded] = TailCase(tail=proxy, topic=ours, load=proxy, load_mib_per_s=cap)
        cases[native_loaded] = TailCase(tail=direct, topic=native, load=direct, load_mib_per_s=cap)
        baselines |= {ours_loaded: TAIL_PROXY_ALONE, native_loaded: TAIL_NATIVE_ALONE}
    summary, rounds = await tail_rounds(
        cases, baselines, rounds=args.pairs, seconds=args.tail_seconds, watch=watch
    )
    for cap in caps:
        ours_loaded, native_loaded = loaded_names(cap)
        ratio = ratio_of_ratios(
            rounds, (ours_loaded, TAIL_PROXY_ALONE), (native_loaded, TAIL_NATIVE_ALONE)
        )
        key = "" if cap is None else "_capped"
        summary[f"p99_ratio_tierproxy_load_to_native_load{key}"] = ratio
        summary[f"within_native_ratio{key}"] = ratio <= GOAL_TAIL_RATIO
    summary["goal_p99_ratio_tierproxy_load_to_native_load"] = GOAL_TAIL_RATIO
    summary["load_cap_mib_per_s"] = args.tail_load_mib_per_s
    print_tail(summary, baselines)
    return summary


def print_tail(summary: dict[str, Any], baselines: dict[str, str]) -> None:
    print(
        "tail p99 ms (ratio to alone) [load MiB/s] {proxy loop: lag mean ms, share of the "
        "time its thread ran / waited for a CPU}:"
    )
    nan = float("nan")
    for name in (TAIL_PROXY_ALONE, TAIL_NATIVE_ALONE, *baselines):
        figures = summary[name]
        print(
            f"  {name:58s} {figures['p99_ms']:6.2f}"
            f" ({figures.get('p99_ratio_to_alone', 1.0):.2f})"
            f" [{figures.get('load_mib_per_s', 0.0):.0f}]"
            f" {{{figures.get('proxy_loop_lag_mean_ms', nan):.2f},"
            f" {figures.get('proxy_loop_on_cpu_share', nan):.2f} /"
            f" {figures.get('proxy_loop_waiting_share', nan):.2f}}}"
        )
    for key, value in summary.items():
        if key.startswith("p99_ratio_tierproxy"):
            verdict = "met" if value <= GOAL_TAIL_RATIO else "missed"
            print(f"{key}: {value:.2f} (goal <= {GOAL_TAIL_RATIO:g}: {verdict})")


# -- the run -------------------------------------------------------------------------------


def tail_setup(data: Data, high_watermark: int) -> Setup:
    """A one-partition topic as :mod:`bench.tail` reads it."""
    return Setup(
        topic=data.topic,
        topic_id=data.topic_id,
        tiered_end=data.ends[0],
        high_watermark=high_watermark,
    )


async def run(
    args: argparse.Namespace,
    broker: BrokerInfo,
    s3: S3Info | None,
    broker_pid: int | None,
    s3_pid: int | None,
) -> dict[str, Any]:
    cells = plan(args.partitions, args.clients, args.fetch_mib)
    # One RLMM topic for every tierproxy topic: one proxy serves them all.
    group = f"bench-native-{uuid.uuid4().hex[:8]}"
    with remote_tier(args.tier, s3, "bench-native") as target:
        ours = await prepare_ours(args, broker, target, f"__rlm-{group}")
        native = {
            partitions: await prepare_native(args, broker, partitions=partitions)
            for partitions in ours
        }
        direct = Endpoint(name="direct", host=broker.host, port=broker.port)
        result: dict[str, Any] = {
            "broker": broker.version,
            "tier": args.tier,
            "data_mib": args.data_mib,
            "pairs": args.pairs,
            "record_bytes": RECORD_BYTES,
            "data": f"warm: broker log, LocalTieredStorage and tierproxy's {args.tier} tier "
            "files in page cache",
            "clients": "raw Fetch v12; librdkafka is confluent-kafka's, standing in for kcat "
            "(Debian's kcat links a librdkafka without fetch.queue.backoff.ms); the Java "
            "consumer is Kafka's ConsumerPerformance",
            "load_average_at_start": os.getloadavg(),
        }
        with contextlib.ExitStack() as proxies:
            process = proxies.enter_context(running_proxy(args, broker, target, group))
            proxy = Endpoint(name="proxy", host="127.0.0.1", port=process.port)
            assert process.process.pid is not None
            pids = Pids(proxy=process.process.pid, broker=broker_pid, s3=s3_pid)
            charged = {TIERPROXY: (pids, process)}
            routes: dict[int, dict[str, tuple[Endpoint, Data]]] = {
                partitions: {
                    LOCAL: (direct, ours[partitions][0]),
                    TIERPROXY: (proxy, ours[partitions][0]),
                    NATIVE: (direct, native[partitions][0]),
                }
                for partitions in ours
            }
            if args.baseline_tree is not None:
                old = proxies.enter_context(
                    running_proxy(args, broker, target, group, tree=args.baseline_tree)
                )
                assert old.process.pid is not None
                charged[BASELINE] = (dataclasses.replace(pids, proxy=old.process.pid), old)
                before = Endpoint(name="baseline", host="127.0.0.1", port=old.port)
                for partitions, by_path in routes.items():
                    by_path[BASELINE] = (before, ours[partitions][0])
            result["matrix"], summaries = await measure_matrix(args, cells, routes, charged)
            result["headline"] = headline(summaries)
            if args.tail_seconds > 0 and 1 in ours:
                profile = None if args.profile is None else args.profile / "tail.txt"
                with record(pids.proxy, profile):
                    result["tail"] = await tail_comparison(
                        args,
                        proxy=proxy,
                        direct=direct,
                        ours=tail_setup(*ours[1]),
                        native=tail_setup(*native[1]),
                        watch=ProxyWatch.of(process),
                    )
                if profile is not None:
                    print("\n".join(summarise_profile(profile, top=30).lines()))
                key = "p99_ratio_tierproxy_load_to_native_load"
                result["headline"][key] = result["tail"][key]
                result["headline"][f"goal_{key}"] = GOAL_TAIL_RATIO
        result["load_average_at_end"] = os.getloadavg()
        print(
            "load average (1, 5, 15 min): "
            f"{tuple(round(v, 2) for v in result['load_average_at_start'])} at start, "
            f"{tuple(round(v, 2) for v in result['load_average_at_end'])} at end"
        )
        return result


def plot(result: Mapping[str, Any]) -> Path:
    throughput = {
        name.replace(" partitions", "p").replace(" partition", "p").replace(" fetches", ""): {
            "a native remote": entry["summary"]["native_mib_per_s"],
            "b tierproxy remote": entry["summary"]["tierproxy_mib_per_s"],
            "c local": entry["summary"]["local_mib_per_s"],
        }
        for name, entry in result["matrix"].items()
    }
    return bar_chart(
        "native",
        [("catch-up MiB/s (partitions, client, fetch size)", "MiB/s", throughput)],
        title=f"native tiered storage vs tierproxy vs local log ({result['broker']}, "
        f"{result['tier']} tier; medians of {result['pairs']} visits)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-mib",
        type=int,
        default=384,
        help="data per topic (split over its partitions); 384 MiB makes rounds of about a "
        "second with the raw client",
    )
    parser.add_argument("--tail-mib", type=int, default=4, help="untiered data after it")
    parser.add_argument(
        "--chunk-cache-mib",
        type=int,
        default=256,
        help="the proxy's chunk cache (its default); below --data-mib, so that every round "
        "reads the remote tier (an LRU smaller than a sequential scan never hits). The "
        "earlier 32 MiB held only the current chunk of each of 8 partitions: the proxy "
        "re-read each chunk 5.5 times (1,415 GETs per GiB) and spent 2.35 CPU-s/GiB",
    )
    parser.add_argument(
        "--tier",
        choices=BACKENDS,
        default="local",
        help="tierproxy's remote tier: a local directory (the default, like Kafka's "
        "LocalTieredStorage) or S3 on an embedded SeaweedFS",
    )
    parser.add_argument("--pairs", type=int, default=5, help="visits per cell (>= 3)")
    parser.add_argument(
        "--partitions", type=int, nargs="+", default=[1, 8], help="partitions per topic"
    )
    parser.add_argument(
        "--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS, help="the consumers"
    )
    parser.add_argument(
        "--fetch-mib",
        type=int,
        nargs="+",
        default=[1, 8],
        help="max.partition.fetch.bytes of the catch-up, in MiB",
    )
    parser.add_argument(
        "--tail-seconds",
        type=float,
        default=5.0,
        help="each tail-latency round (0: skip them; they need 1 in --partitions)",
    )
    parser.add_argument(
        "--tail-load-mib-per-s",
        type=float,
        help="also run the loaded tail cases with the catch-up capped at this aggregate rate "
        "in both deployments (the same load whichever serves faster)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the proxy with py-spy during each cell and the tail rounds",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also read through a proxy run from this checkout (the code before a change), "
        "a fourth path in every visit: before/after figures from one run",
    )
    args = parser.parse_args()
    if args.chunk_cache_mib >= args.data_mib:
        parser.error("--chunk-cache-mib must be below --data-mib: rounds must read the tier")
    with contextlib.ExitStack() as stack:
        server = KafkaBroker(ensure_jars(KAFKA_4), native_tiered=True)
        stack.callback(server.close)
        broker = server.start()
        seaweed = stack.enter_context(SeaweedFS()) if args.tier == "s3" else None
        s3 = None if seaweed is None else seaweed.start()
        s3_pid = None if seaweed is None else seaweed.pid
        result = asyncio.run(run(args, broker, s3, server.pid, s3_pid))
    print(f"saved {save_json('native', result)} and {plot(result)}")


if __name__ == "__main__":
    main()
