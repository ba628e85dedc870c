"""Catch-up reads from the remote tier through the proxy versus reads of the broker's log.

Question: when N consumers catch up on the same old range of a partition, how fast do they
read it from the remote tier through ``tierproxy serve`` (SeaweedFS as object storage by
default, the question being object storage; ``--tier local`` for a local-directory tier; the
offload policy on, so the proxy serves the tiered range although the broker still has it)
compared with reading it directly from the broker; and how much do those catch-up readers
slow down a consumer at the head of the log that goes through the same proxy?

Run::

    .venv/bin/python -m bench.catchup                      # embedded Tansu + SeaweedFS
    .venv/bin/python -m bench.catchup --data-mib 512 --pairs 5 --consumers 1 4 8
    .venv/bin/python -m bench.catchup --tier local      # no SeaweedFS: a directory tier
    KAFKA_HOME=/opt/kafka .venv/bin/python -m bench.catchup

Set-up: one partition of ``--data-mib`` MiB of 1 KiB records (uncompressed) is produced and
tiered by the real pipeline (Spark local[2], 8 MiB segments; the last, partial one stays
local, as Kafka's active segment would),
then ``--tail-mib`` more is produced in 16 KiB batches that stays local. The proxy runs with
its default chunks (4 MiB, read ahead from 2 up to the bound of :mod:`storage.read_ahead`,
64 MiB, within the default read-ahead budget of 64 MiB: memory apart from the cache) and a
chunk cache of ``--chunk-cache-mib`` (96 MiB by default). The cache is smaller than the data
(256 MiB by default), so every round reads the whole range from SeaweedFS again (an LRU
smaller than a sequential scan never hits; GETs per GiB, about 256 for 4 MiB chunks, show it;
concurrent readers of one chunk still share its GET). The budget holds only chunks read ahead
and not read yet, so it does not let the cache keep the range either. The cache is not
smaller than it needs to be: a cache far below the proxy's default (256 MiB) evicts the
chunks a response is still writing, whose buffers then cannot take the next GETs
(:class:`storage.rsm.s3_ranged_get.SpareBodies`). The data must exceed the cache by a
reader's deepest read-ahead (:data:`storage.read_ahead.MAX_READ_AHEAD_BYTES`, 64 MiB): after
a round, the cache holds the range's last ``--chunk-cache-mib``, so a reader back at its start
finds the chunks more than data - cache ahead of it still cached; read-ahead skips those, and
the reader's own misses evict them before it gets there, which caps the read-ahead below what
the reader needs (a cold catch-up, of a range not read before, has no such cap). More data
also makes rounds long against the round's first read, cold by design. Why these sizes, with
the runs behind them: ``docs/decisions/0012-benchmark-method.md``.

Catch-up: N raw Fetch loops (Fetch v12, one request in flight each, records left as bytes),
each reading offsets [0, tiered end] with ``partition_max_bytes`` of 1 MiB and 8 MiB, run
at once; rounds alternate direct and proxy (A B / B A, ``--pairs`` pairs). Reported: the
median aggregate MiB/s of each path, the median per-pair ratio proxy/direct, and CPU
seconds per GiB of the proxy, broker and SeaweedFS processes and of the consumers (this
process): what a GiB costs the whole machine on each path, since all of them share its cores
(with SeaweedFS on the same machine, the proxy's path runs three busy processes where the
direct one runs two). Each proxy (the baseline's too) first reads the range once, unmeasured:
a fresh proxy's first read also loads every index and fills its empty cache
(:func:`warm_up`).

Tail latency (:mod:`bench.tail`): one raw Fetch loop through the proxy reading the last 32
records of the log (64 KiB fetches, the untiered head) for ``--tail-seconds``: alone, while 4
catch-up loops (in a process of their own) read the tiered range through the proxy, and while
they read it directly from the broker (the same load on the machine without the proxy's part
in it), in rotating order; p50/p99 of the Fetch round trip, the load's MiB/s and the proxy's
event-loop lag. ``bench.native`` holds the same tail against Kafka's native tiered storage.

Object-storage latency (``--s3-first-byte-ms``, default 20 and 50; 0 is the control): a second
proxy reads SeaweedFS through :mod:`bench.forwarder` (``--splice``: in the kernel, so the
emulation costs little CPU), which holds each answer's first byte that long (a GET's time to
first byte on real object storage); one catch-up loop alternates between the undelayed proxy
and the delayed one, each warmed first (:func:`warm_up`: a cold proxy's first round GETs every
offset index through the delay, one segment after another). Reported: the ratio delayed /
undelayed (both read the range from object storage: the chunk cache is smaller than it),
object-storage GETs per GiB, from the proxy's cache metrics (chunk GETs + index misses), and
the forwarder's CPU seconds per GiB. Skipped with ``--tier local``, which has no object
storage to delay.

``--profile DIR`` samples the proxy with py-spy during each catch-up cell (both paths'
rounds; the proxy is idle while the broker is read directly) and prints where its CPU went.
``--tail-seconds 0`` skips the tail-latency rounds. ``--baseline-tree DIR`` also runs a proxy
from another checkout (say, the commit before a change) and alternates one catch-up
consumer between it and this tree's proxy: before/after figures from one run (the
object-storage-latency rows too: both proxies behind the same delaying forwarder), with the
spread of the pairs' ratios (the machine is shared: a median alone hides how noisy it was)
and the S3 process's CPU per GiB behind each proxy (a change to the GETs may cost or save
the store more than the proxy: they share the cores).

Data is warm on both paths: the broker's log and SeaweedFS's volume files (or the local tier's
files) in the page cache. With ``--tier local`` no S3 CPU is measured: the rounds' figure is
``None`` and the summaries leave it out. Everything shares the machine's two cores. Results:
``bench/results/catchup.json`` and ``.png``. Goals: remote >= 0.8 x local, delayed / undelayed
>= 0.7, GETs <= 300 per GiB; the tail rows are reported here (the goal, tail p99 under load /
alone no worse than with Kafka's native tiered storage serving the same load, is measured like
with like by ``bench/native.py``).
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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

from bench import forwarder
from bench.clients import (
    RECORD_BYTES,
    Endpoint,
    FetchTally,
    raw_fetch_all,
    topic_id_and_end,
)
from bench.common import (
    GIB,
    KIB,
    MIB,
    Pair,
    alternate_async,
    bar_chart,
    cpu_seconds,
    median,
    produce_retrying,
    save_json,
    throughput_summary,
)
from bench.pipeline import BACKENDS, Target
from bench.profile import record
from bench.profile import summarise as summarise_profile
from bench.tail import (
    TAIL_LOAD_CONSUMERS,
    ProxyWatch,
    Setup,
    TailCase,
    tail_rounds,
)
from bench.tiering import produce_and_tier, remote_tier, servers_from_env, tier_settings
from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import TierproxyServer, proxy_process
from storage.read_ahead import MAX_READ_AHEAD_BYTES
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager

SEGMENT_BYTES = 8 * MIB
TAIL_VARIANTS = ("alone", "catch-up via broker", "catch-up via proxy")


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchupRound:
    path: str
    consumers: int
    fetch_mib: int
    mib: float
    seconds: float
    mib_per_s: float
    proxy_cpu_s_per_gib: float
    broker_cpu_s_per_gib: float
    s3_cpu_s_per_gib: float | None
    """None when no S3 process is measured (a local-directory tier, external S3)."""
    client_cpu_s_per_gib: float
    """The consumers' (this process's): with the other processes' figures, what a GiB costs
    the whole machine on each path (the proxy's path runs three processes, the direct one
    two, on the same cores)."""
    fetches_per_gib: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Pids:
    proxy: int
    broker: int | None
    s3: int | None

    def cpu(self) -> tuple[float, float, float | None]:
        """CPU seconds so far of the proxy, the broker (0 if external) and S3 (None if no
        S3 process is measured: a local-directory tier has none, an external one is apart)."""
        broker = cpu_seconds(self.broker) if self.broker is not None else 0.0
        s3 = cpu_seconds(self.s3) if self.s3 is not None else None
        return cpu_seconds(self.proxy), broker, s3


# -- set-up --------------------------------------------------------------------------------


async def prepare(
    args: argparse.Namespace, broker: BrokerInfo, target: Target, spill: Path
) -> Setup:
    topic = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    await produce_and_tier(
        broker,
        target,
        topic=topic,
        spill=spill,
        data_mib=args.data_mib,
        segment_bytes=SEGMENT_BYTES,
    )
    await asyncio.to_thread(
        produce_head, broker.bootstrap, topic, args.tail_mib * MIB // RECORD_BYTES
    )
    return await tiered_setup(broker, topic, metadata_topic)


async def tiered_setup(broker: BrokerInfo, topic: str, metadata_topic: str) -> Setup:
    """The topic's tiered range, from the metadata topic of one of its tiers."""
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    topic_id, high_watermark = await topic_id_and_end(direct, topic)
    end = await tiered_end(broker, topic, metadata_topic)
    return Setup(topic=topic, topic_id=topic_id, tiered_end=end, high_watermark=high_watermark)


async def tiered_end(broker: BrokerInfo, topic: str, metadata_topic: str) -> int:
    """One past the last offset of partition 0 that the pipeline copied, from the metadata
    topic: below it, the proxy serves from the remote tier."""
    rlmm = TopicBasedRemoteLogMetadataManager(
        RemoteLogMetadataConfig(topic_name=metadata_topic, topic_partitions=3),
        bootstrap_servers=broker.bootstrap,
    )
    await rlmm.start()
    try:
        tp = rlmm.cache.topic_id_partition(topic, 0)
        end = None if tp is None else rlmm.cache.remote_log_end_offset(tp)
    finally:
        await rlmm.close()
    if end is None:
        raise RuntimeError("nothing was tiered")
    return end + 1


def produce_head(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    """The untiered head, in the 16 KiB batches of a default producer (the bulk before it
    is written in 1 MiB batches to load fast), ``count`` records spread over
    ``partitions``."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16 * KIB, "acks": 1}
    )
    value = os.urandom(RECORD_BYTES)
    for i in range(count):
        produce_retrying(
            producer, topic, key=b"head-%08d" % i, value=value, partition=i % partitions
        )
    if producer.flush(60):
        raise RuntimeError("the head was not produced")


@contextlib.contextmanager
def running_proxy(
    args: argparse.Namespace,
    broker: BrokerInfo,
    target: Target,
    topic: str,
    *,
    tree: Path | None = None,
) -> Iterator[TierproxyServer]:
    """A proxy serving the tiered range; from the checkout ``tree`` (its ``PYTHONPATH``)
    instead of this one if given."""
    proxy = proxy_process(
        broker,
        Path(tempfile.mkdtemp(prefix="bench-catchup-")),
        {
            **tier_settings(target, f"__rlm-{topic}"),
            "remote.fetch.offload.enable": True,
            "remote.fetch.chunk.cache.size.bytes": args.chunk_cache_mib * MIB,
            "log.level": "WARNING",
        },
        # PYTHONSAFEPATH: python -m would put the working directory (this checkout) first.
        env=None
        if tree is None
        else {**os.environ, "PYTHONPATH": str(tree.resolve()), "PYTHONSAFEPATH": "1"},
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


# -- catch-up ------------------------------------------------------------------------------


def catchup_round(
    endpoint: Endpoint, setup: Setup, pids: Pids, consumers: int, fetch_mib: int
) -> Callable[[], Awaitable[CatchupRound]]:
    async def measure() -> CatchupRound:
        before, client_before = pids.cpu(), cpu_seconds()
        tally = FetchTally()
        started = time.perf_counter()
        totals = await asyncio.gather(
            *(
                raw_fetch_all(
                    endpoint,
                    version=12,
                    topic=setup.topic,
                    topic_id=setup.topic_id,
                    end_offset=setup.tiered_end,
                    partition_max_bytes=fetch_mib * MIB,
                    tally=tally,
                )
                for _ in range(consumers)
            )
        )
        seconds = time.perf_counter() - started
        after, client_cpu = pids.cpu(), cpu_seconds() - client_before
        gib = sum(totals) / GIB
        proxy_cpu, broker_cpu = after[0] - before[0], after[1] - before[1]
        s3_cpu = None if after[2] is None or before[2] is None else after[2] - before[2]
        return CatchupRound(
            path=endpoint.name,
            consumers=consumers,
            fetch_mib=fetch_mib,
            mib=sum(totals) / MIB,
            seconds=seconds,
            mib_per_s=sum(totals) / MIB / seconds,
            proxy_cpu_s_per_gib=proxy_cpu / gib,
            broker_cpu_s_per_gib=broker_cpu / gib,
            s3_cpu_s_per_gib=None if s3_cpu is None else s3_cpu / gib,
            client_cpu_s_per_gib=client_cpu / gib,
            fetches_per_gib=tally.requests / gib,
        )

    return measure


async def warm_up(endpoint: Endpoint, setup: Setup) -> None:
    """Read the range once through a fresh proxy, unmeasured: its first read GETs every
    offset index (aiobotocore sets up its client then too) and fills its empty chunk cache
    with new buffers, about twice the CPU per GiB of later rounds. Without this the first
    cell of a run (and the baseline proxy's first cell, against a warm proxy from this
    tree) carried that cost."""
    await raw_fetch_all(
        endpoint,
        version=12,
        topic=setup.topic,
        topic_id=setup.topic_id,
        end_offset=setup.tiered_end,
        partition_max_bytes=8 * MIB,
    )


def summarise(pairs: list[Pair[CatchupRound]]) -> dict[str, float]:
    """Medians of the pairs; ``s3_cpu_s_per_gib_proxy`` only when an S3 process was measured
    (absent, not 0, for a local-directory tier)."""
    s3_cpu = [p.b.s3_cpu_s_per_gib for p in pairs if p.b.s3_cpu_s_per_gib is not None]
    return {
        **throughput_summary(pairs),
        **({"s3_cpu_s_per_gib_proxy": median(s3_cpu)} if len(s3_cpu) == len(pairs) else {}),
        "client_cpu_s_per_gib_direct": median([p.a.client_cpu_s_per_gib for p in pairs]),
        "client_cpu_s_per_gib_proxy": median([p.b.client_cpu_s_per_gib for p in pairs]),
        "direct_fetches_per_gib": median([p.a.fetches_per_gib for p in pairs]),
        "proxy_fetches_per_gib": median([p.b.fetches_per_gib for p in pairs]),
    }


# -- tail latency --------------------------------------------------------------------------


async def tail_comparison(
    proxy: Endpoint,
    direct: Endpoint,
    setup: Setup,
    *,
    pairs: int,
    seconds: float,
    watch: ProxyWatch | None = None,
) -> dict[str, Any]:
    """The tail consumer through the proxy alone, while catch-up readers read the tiered
    range through the proxy, and while they read it directly from the broker (the same load
    on the machine without the proxy's part in it), in rotating order."""
    summary, rounds = await tail_rounds(
        {
            "alone": TailCase(tail=proxy, topic=setup),
            "catch-up via broker": TailCase(tail=proxy, topic=setup, load=direct),
            "catch-up via proxy": TailCase(tail=proxy, topic=setup, load=proxy),
        },
        {"catch-up via broker": "alone", "catch-up via proxy": "alone"},
        rounds=pairs,
        seconds=seconds,
        watch=watch,
    )
    summary["p99_ratio_proxy_load_to_broker_load"] = median(
        [
            p.p99_ms / b.p99_ms
            for p, b in zip(
                rounds["catch-up via proxy"], rounds["catch-up via broker"], strict=True
            )
        ]
    )
    return summary


# -- run -----------------------------------------------------------------------------------


async def run(
    args: argparse.Namespace,
    broker: BrokerInfo,
    s3: S3Info | None,
    broker_pid: int | None,
    s3_pid: int | None,
) -> dict[str, Any]:
    with remote_tier(args.tier, s3, "bench-catchup") as target:
        setup = await prepare(args, broker, target, Path(tempfile.mkdtemp(prefix="spill-")))
        print(f"tiered range [0, {setup.tiered_end}), untiered head up to {setup.high_watermark}")
        result: dict[str, Any] = {
            "broker": broker.version,
            "tier": args.tier,
            "s3": None if s3 is None else s3.kind,
            "data_mib": args.data_mib,
            "tail_mib": args.tail_mib,
            "chunk_cache_mib": args.chunk_cache_mib,
            "pairs": args.pairs,
            "record_bytes": RECORD_BYTES,
            "data": "warm: broker log in memory (Tansu) or page cache; SeaweedFS or local tier "
            "files in page cache; the proxy's chunk cache is smaller than the range, so rounds "
            "re-read it",
            "cpu_count": os.cpu_count(),
        }
        direct = Endpoint(name="direct", host=broker.host, port=broker.port)
        with running_proxy(args, broker, target, setup.topic) as process:
            proxy = Endpoint(name="proxy", host="127.0.0.1", port=process.port)
            assert process.process.pid is not None
            pids = Pids(proxy=process.process.pid, broker=broker_pid, s3=s3_pid)
            await warm_up(proxy, setup)
            catchup: dict[str, Any] = {}
            for fetch_mib in args.fetch_mib:
                for consumers in args.consumers:
                    name = f"{consumers} consumer(s), {fetch_mib} MiB fetches"
                    gets_before = gets(process)
                    with record(pids.proxy, profile_path(args.profile, consumers, fetch_mib)):
                        pairs = await alternate_async(
                            args.pairs,
                            catchup_round(direct, setup, pids, consumers, fetch_mib),
                            catchup_round(proxy, setup, pids, consumers, fetch_mib),
                        )
                    summary = summarise(pairs)
                    summary["proxy_gets_per_gib"] = (gets(process) - gets_before) / (
                        sum(p.b.mib for p in pairs) / 1024
                    )
                    catchup[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
                    print(
                        f"{name:30s} direct {summary['direct_mib_per_s']:7.1f} MiB/s  proxy "
                        f"{summary['proxy_mib_per_s']:7.1f} MiB/s  ratio "
                        f"{summary['ratio_proxy_to_direct']:.3f}  proxy CPU "
                        f"{summary['proxy_cpu_s_per_gib']:.2f} s/GiB  GETs/GiB "
                        f"{summary['proxy_gets_per_gib']:.0f}  CPU s/GiB: direct broker "
                        f"{summary['broker_cpu_s_per_gib_direct']:.2f} client "
                        f"{summary['client_cpu_s_per_gib_direct']:.2f}, proxy path S3 "
                        f"{summary.get('s3_cpu_s_per_gib_proxy', float('nan')):.2f} client "
                        f"{summary['client_cpu_s_per_gib_proxy']:.2f}"
                    )
                    print_profile(args.profile, consumers, fetch_mib)
            result["catchup"] = catchup
            if args.baseline_tree is not None:
                result["baseline"] = await baseline_rounds(
                    args, broker=broker, target=target, setup=setup, pids=pids, proxy=proxy
                )
            if args.tail_seconds > 0:
                result["tail"] = await tail_comparison(
                    proxy,
                    direct,
                    setup,
                    pairs=args.pairs,
                    seconds=args.tail_seconds,
                    watch=ProxyWatch.of(process),
                )
            if args.s3_first_byte_ms and target.s3 is not None:
                result["object storage latency"] = await latency_rounds(
                    args, broker=broker, target=target, setup=setup, warm=process, pids=pids
                )
            if "tail" in result:
                tail = result["tail"]
                print(
                    "tail p99: alone {:.2f} ms, with {} catch-up readers via the broker "
                    "{:.2f} ms, via the proxy {:.2f} ms".format(
                        tail["alone"]["p99_ms"],
                        TAIL_LOAD_CONSUMERS,
                        tail["catch-up via broker"]["p99_ms"],
                        tail["catch-up via proxy"]["p99_ms"],
                    )
                )
        return result


async def baseline_rounds(
    args: argparse.Namespace,
    *,
    broker: BrokerInfo,
    target: Target,
    setup: Setup,
    pids: Pids,
    proxy: Endpoint,
) -> dict[str, Any]:
    """The same catch-up through a proxy run from ``--baseline-tree`` (another checkout, the
    code before a change) against this one, alternating (A B / B A): before/after figures
    from one run, on the same data and the same machine load."""
    results: dict[str, Any] = {}
    with running_proxy(args, broker, target, setup.topic, tree=args.baseline_tree) as old:
        assert old.process.pid is not None
        old_pids = dataclasses.replace(pids, proxy=old.process.pid)
        before = Endpoint(name="baseline", host="127.0.0.1", port=old.port)
        await warm_up(before, setup)
        for fetch_mib in args.fetch_mib:
            pairs = await alternate_async(
                args.pairs,
                catchup_round(before, setup, old_pids, 1, fetch_mib),
                catchup_round(proxy, setup, pids, 1, fetch_mib),
            )
            ratios = [p.b.mib_per_s / p.a.mib_per_s for p in pairs]
            summary = {
                "baseline_mib_per_s": median([p.a.mib_per_s for p in pairs]),
                "proxy_mib_per_s": median([p.b.mib_per_s for p in pairs]),
                "ratio_proxy_to_baseline": median(ratios),
                "baseline_cpu_s_per_gib": median([p.a.proxy_cpu_s_per_gib for p in pairs]),
                "proxy_cpu_s_per_gib": median([p.b.proxy_cpu_s_per_gib for p in pairs]),
                **_s3_cpu(pairs),
            }
            name = f"1 consumer, {fetch_mib} MiB fetches"
            results[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
            print(
                f"{name:28s} baseline {summary['baseline_mib_per_s']:7.1f} MiB/s "
                f"{summary['baseline_cpu_s_per_gib']:.2f} CPU-s/GiB  this tree "
                f"{summary['proxy_mib_per_s']:7.1f} MiB/s {summary['proxy_cpu_s_per_gib']:.2f} "
                f"CPU-s/GiB  ratio {summary['ratio_proxy_to_baseline']:.3f} "
                f"({min(ratios):.3f}-{max(ratios):.3f})" + _s3_cpu_text(summary)
            )
    return results


def _s3_cpu(pairs: list[Pair[CatchupRound]]) -> dict[str, float]:
    """Medians of the S3 process's CPU per GiB behind each proxy (none for a directory
    tier): what a change to the GETs costs or saves the store, which shares the cores."""
    if any(p.a.s3_cpu_s_per_gib is None or p.b.s3_cpu_s_per_gib is None for p in pairs):
        return {}
    return {
        "baseline_s3_cpu_s_per_gib": median([p.a.s3_cpu_s_per_gib or 0.0 for p in pairs]),
        "proxy_s3_cpu_s_per_gib": median([p.b.s3_cpu_s_per_gib or 0.0 for p in pairs]),
    }


def _s3_cpu_text(summary: dict[str, float]) -> str:
    if "proxy_s3_cpu_s_per_gib" not in summary:
        return ""
    return (
        f"  S3 CPU-s/GiB baseline {summary['baseline_s3_cpu_s_per_gib']:.2f} "
        f"this tree {summary['proxy_s3_cpu_s_per_gib']:.2f}"
    )


GET_METRICS = (
    "tierproxy_remote_chunk_cache_gets_total",
    "tierproxy_remote_index_cache_misses_total",
)
"""The proxy's object-storage GETs: the chunk cache counts its ranged GETs, and every index it
misses is one GET. (Chunk misses plus read-aheads would count a read that joins a read-ahead
in flight twice, and with slow GETs most reads do.)"""


def gets(proxy: TierproxyServer, metrics: Sequence[str] = GET_METRICS) -> float:
    """The proxy's object-storage GETs so far, the sum of ``metrics``."""
    return sum(proxy.metric(name) for name in metrics)


async def latency_rounds(
    args: argparse.Namespace,
    *,
    broker: BrokerInfo,
    target: Target,
    setup: Setup,
    warm: TierproxyServer,
    pids: Pids,
) -> dict[str, Any]:
    """Catch-up through a proxy whose object storage answers each GET's first byte late
    (SeaweedFS behind :mod:`bench.forwarder` with a delay) against the proxy with no delay
    (A B / B A): MiB/s delayed / undelayed (goal >= 0.7) and GETs per GiB (<= 300)."""
    results: dict[str, Any] = {}
    warm_endpoint = Endpoint(name="proxy", host="127.0.0.1", port=warm.port)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    assert target.s3 is not None
    upstream = target.s3.endpoint_url.removeprefix("http://").rstrip("/")
    for delay in args.s3_first_byte_ms:
        with (
            forwarder.running(upstream, log_dir, delay_ms=delay, splice=True) as (
                port,
                forwarder_pid,
            ),
            running_proxy(args, broker, through(target, port), setup.topic) as slow,
        ):
            assert slow.process.pid is not None
            slow_pids = dataclasses.replace(pids, proxy=slow.process.pid)
            slow_endpoint = Endpoint(name="proxy", host="127.0.0.1", port=slow.port)
            await warm_up(slow_endpoint, setup)
            slow_round = catchup_round(slow_endpoint, setup, slow_pids, 1, max(args.fetch_mib))
            before = (gets(warm), gets(slow), cpu_seconds(forwarder_pid))
            pairs = await alternate_async(
                args.pairs,
                catchup_round(warm_endpoint, setup, pids, 1, max(args.fetch_mib)),
                slow_round,
            )
            after = (gets(warm), gets(slow), cpu_seconds(forwarder_pid))
            baseline = None
            if args.baseline_tree is not None:
                with running_proxy(
                    args, broker, through(target, port), setup.topic, tree=args.baseline_tree
                ) as old:
                    assert old.process.pid is not None
                    old_endpoint = Endpoint(name="baseline", host="127.0.0.1", port=old.port)
                    await warm_up(old_endpoint, setup)
                    old_round = catchup_round(
                        old_endpoint,
                        setup,
                        dataclasses.replace(pids, proxy=old.process.pid),
                        1,
                        max(args.fetch_mib),
                    )
                    baseline = await alternate_async(args.pairs, old_round, slow_round)
        counted = [end - start for start, end in zip(before, after, strict=True)]
        summary = latency_summary(pairs, counted)
        name = f"first byte after {delay:g} ms"
        results[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
        print(
            f"{name:28s} undelayed {summary['undelayed_mib_per_s']:7.1f} MiB/s  delayed "
            f"{summary['delayed_mib_per_s']:7.1f} MiB/s  ratio "
            f"{summary['ratio_delayed_to_undelayed']:.3f}  GETs/GiB "
            f"{summary['undelayed_gets_per_gib']:.0f} / {summary['delayed_gets_per_gib']:.0f}  "
            f"forwarder CPU {summary['forwarder_cpu_s_per_gib']:.2f} s/GiB"
        )
        if baseline is not None:
            results[name]["baseline"] = {
                "baseline_delayed_mib_per_s": median([p.a.mib_per_s for p in baseline]),
                "delayed_mib_per_s": median([p.b.mib_per_s for p in baseline]),
                "ratio_to_baseline": median([p.b.mib_per_s / p.a.mib_per_s for p in baseline]),
                "rounds": [asdict(p) for p in baseline],
            }
            print(
                f"{'':28s} delayed: baseline tree "
                f"{results[name]['baseline']['baseline_delayed_mib_per_s']:7.1f} MiB/s  this "
                f"tree {results[name]['baseline']['delayed_mib_per_s']:7.1f} MiB/s  ratio "
                f"{results[name]['baseline']['ratio_to_baseline']:.3f}"
            )
    return results


def latency_summary(pairs: list[Pair[CatchupRound]], counted: list[float]) -> dict[str, float]:
    """Medians of undelayed (a) / delayed (b) pairs; GETs per GiB of each proxy and the
    forwarder's CPU seconds per GiB (``counted``: GETs of each, forwarder CPU seconds). The
    forwarder's CPU is the emulation's, not object storage's: on a shared machine it slows
    the delayed path by more than the delay."""
    slow_gib = sum(p.b.mib for p in pairs) / 1024
    return {
        "undelayed_mib_per_s": median([p.a.mib_per_s for p in pairs]),
        "delayed_mib_per_s": median([p.b.mib_per_s for p in pairs]),
        "ratio_delayed_to_undelayed": median([p.b.mib_per_s / p.a.mib_per_s for p in pairs]),
        "undelayed_gets_per_gib": counted[0] / (sum(p.a.mib for p in pairs) / 1024),
        "delayed_gets_per_gib": counted[1] / slow_gib,
        "forwarder_cpu_s_per_gib": counted[2] / slow_gib,
    }


def through(target: Target, port: int) -> Target:
    """``target``'s bucket reached through the forwarder on ``port``."""
    assert target.s3 is not None
    s3 = dataclasses.replace(target.s3, endpoint_url=f"http://127.0.0.1:{port}")
    return dataclasses.replace(target, s3=s3)


def profile_path(directory: Path | None, consumers: int, fetch_mib: int) -> Path | None:
    """Where the proxy's profile of one catch-up cell goes, if profiling."""
    if directory is None:
        return None
    return directory / f"catchup-{consumers}c-{fetch_mib}mib.txt"


def print_profile(directory: Path | None, consumers: int, fetch_mib: int) -> None:
    path = profile_path(directory, consumers, fetch_mib)
    if path is not None:
        print("\n".join(summarise_profile(path, top=25).lines()))


def plot(result: dict[str, Any]) -> Path:
    throughput = {
        name.replace(" consumer(s), ", "c, ").replace(" fetches", ""): {
            "direct": entry["summary"]["direct_mib_per_s"],
            "proxy (remote)": entry["summary"]["proxy_mib_per_s"],
        }
        for name, entry in result["catchup"].items()
    }
    charts = [("catch-up aggregate throughput (consumers, fetch size)", "MiB/s", throughput)]
    if "tail" in result:
        tail = result["tail"]
        latency = {
            quantile: {name: tail[name][f"{quantile}_ms"] for name in TAIL_VARIANTS}
            for quantile in ("p50", "p99")
        }
        charts.append(("tail consumer Fetch latency through the proxy", "ms", latency))
    return bar_chart(
        "catchup",
        charts,
        title=f"catch-up from the remote tier vs the broker ({result['broker']}, "
        f"{result['s3'] or result['tier']}; medians of {result['pairs']} pairs)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-mib", type=int, default=256, help="tiered data (1 partition)")
    parser.add_argument("--tail-mib", type=int, default=4, help="untiered data after it")
    parser.add_argument(
        "--chunk-cache-mib",
        type=int,
        default=96,
        help="at least 64 below --data-mib (see the docstring)",
    )
    parser.add_argument(
        "--tier",
        choices=BACKENDS,
        default="s3",
        help="the remote tier: S3 (SeaweedFS unless S3_ENDPOINT; the default, catch-up being "
        "about object storage) or a local directory (no S3 server started)",
    )
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs per cell (>= 3)")
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--fetch-mib", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--tail-seconds", type=float, default=5.0, help="0: skip the tail-latency rounds"
    )
    parser.add_argument(
        "--profile", type=Path, help="sample the proxy with py-spy during each catch-up cell"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also alternate with a proxy run from this checkout (before/after in one run)",
    )
    parser.add_argument(
        "--s3-first-byte-ms",
        type=float,
        nargs="*",
        default=[20.0, 50.0],
        help="object-storage first-byte delays to compare with none (none: skip)",
    )
    args = parser.parse_args()
    if args.chunk_cache_mib + MAX_READ_AHEAD_BYTES // MIB > args.data_mib:
        parser.error(
            "--data-mib must exceed --chunk-cache-mib by the deepest read-ahead "
            f"({MAX_READ_AHEAD_BYTES // MIB} MiB): rounds must read object storage"
        )
    with servers_from_env(with_s3=args.tier == "s3") as servers:
        result = asyncio.run(
            run(args, servers.broker, servers.s3, servers.broker_pid, servers.s3_pid)
        )
    print(f"saved {save_json('catchup', result)} and {plot(result)}")


if __name__ == "__main__":
    main()
