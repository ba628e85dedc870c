"""tierproxy's remote tier against Kafka's own (KIP-405 with LocalTieredStorage) and Kafka's
local log, on one broker, in one run.

Question (issue 13): how fast is a catch-up read from the remote tier through tierproxy
compared with the same read from Kafka's native tiered storage, and with Kafka's local log;
how many Fetch requests per GiB does each take, and how much CPU does each process spend?

Run::

    .venv/bin/python -m bench.native --data-mib 96 --pairs 5
    .venv/bin/python -m bench.native --tier s3 --pairs 3   # tierproxy on SeaweedFS instead
    TIERPROXY_BENCH_RESULTS=/tmp/r .venv/bin/python -m bench.native --pairs 3

Set-up: one embedded Apache Kafka 4.x with native tiered storage switched on
(``KafkaBroker(native_tiered=True)``: Kafka's LocalTieredStorage in the work directory).
tierproxy's remote tier (``--tier``) is a local directory by default, like LocalTieredStorage,
so that both remote tiers read local files and the comparison is of the two read paths alone;
``--tier s3`` puts it on SeaweedFS, whose own CPU (about 1.3 CPU-s/GiB on two cores) then
shares the machine with the proxy while the native side pays nothing of the kind. SeaweedFS
is started only for ``--tier s3``. Three topics of ``--data-mib`` MiB of 1 KiB records, 8 MiB
segments:

* *local*: the tierproxy topic of :func:`bench.catchup.prepare`, read directly from the
  broker, which still holds it;
* *tierproxy remote*: the same topic tiered by tierproxy's pipeline and read through the
  proxy with the offload policy on (it serves the tiered range from its remote tier although
  the broker has it: the broker's copy plays no part, as if gone);
* *native remote*: a topic with ``NATIVE_TIERED_TOPIC_CONFIGS`` (every closed segment
  copied, then deleted locally at once), read directly below its local log start.

Each read is one raw Fetch v12 loop (``partition_max_bytes`` 1 MiB and 8 MiB). Two A/B
comparisons alternate (A B / B A, ``--pairs`` pairs): native remote / local, and tierproxy
remote / native remote. Reported: median MiB/s, the per-pair ratio, Fetch requests per GiB,
CPU seconds per GiB of the proxy, broker and SeaweedFS (absent with ``--tier local``). Goal:
tierproxy remote / native remote >= 1.5. Data is warm (page cache) on every path.

Tail latency (:mod:`bench.tail`, ``--tail-seconds`` per round, 0 to skip): a consumer at the
head of the log (raw Fetch v12, 64 KiB fetches) alone and while 4 catch-up readers (1 MiB
fetches, in a process of their own) read the tiered range, in each deployment as a user
would run it: with tierproxy everything goes through the proxy and the catch-up is served
from its remote tier; with native tiered storage everything goes to the broker and the
catch-up is served by its RemoteLogManager. Each deployment reads its own topic, written
alike. The four cases rotate, ``--pairs`` rounds. Reported: p50/p99, each loaded p99 over
its own alone p99 (per round, then the median), the ratio of those two ratios (goal <= 1),
the load's MiB/s (the two remote tiers do not serve the readers at the same rate;
``--tail-load-mib-per-s`` adds loaded cases capped at one rate in both) and the proxy's
event-loop lag. Results: ``native.json``, with the tier kind in ``tier``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.catchup import (
    SEGMENT_BYTES,
    Pids,
    catchup_round,
    prepare,
    produce_head,
    running_proxy,
    summarise,
)
from bench.common import MIB, alternate_async, save_json
from bench.passthrough import RECORD_BYTES, Endpoint, preload, topic_id_and_end
from bench.pipeline import BACKENDS
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
from bench.tiering import remote_tier
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
from storage.kafka_client import KafkaClient

EARLIEST_LOCAL = -4  # ListOffsets: the local log start (KIP-405)
TIERING_TIMEOUT_S = 300.0


async def local_log_start(bootstrap: str, topic: str) -> int:
    async with KafkaClient(bootstrap) as client:
        (listed,) = await client.list_offsets(None, [(topic, 0, EARLIEST_LOCAL)])
    return listed.offset


async def prepare_native(args: argparse.Namespace, broker: BrokerInfo) -> Setup:
    """A natively tiered topic whose closed segments have left the broker's disk."""
    topic = f"bench-native-{uuid.uuid4().hex[:8]}"
    await create_topic(
        broker.bootstrap,
        topic,
        configs={**NATIVE_TIERED_TOPIC_CONFIGS, "segment.bytes": str(SEGMENT_BYTES)},
    )
    count = args.data_mib * MIB // RECORD_BYTES
    await asyncio.to_thread(preload, broker.bootstrap, topic, count)
    # A head after the bulk rolls its last segment, so the whole bulk can be tiered.
    await asyncio.to_thread(
        produce_head, broker.bootstrap, topic, args.tail_mib * MIB // RECORD_BYTES
    )
    deadline = time.monotonic() + TIERING_TIMEOUT_S
    start = 0
    while time.monotonic() < deadline:
        start = await local_log_start(broker.bootstrap, topic)
        if start >= count * 0.9:
            break
        await asyncio.sleep(1.0)
    if start <= 0:
        raise RuntimeError("Kafka tiered nothing natively within the timeout")
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    topic_id, high_watermark = await topic_id_and_end(direct, topic)
    print(f"native: local log starts at {start} of {high_watermark}")
    return Setup(topic=topic, topic_id=topic_id, tiered_end=start, high_watermark=high_watermark)


async def compare(
    args: argparse.Namespace,
    pids: Pids,
    a: tuple[str, Endpoint, Setup],
    b: tuple[str, Endpoint, Setup],
) -> dict[str, Any]:
    """``b`` against ``a``, per fetch size; the summaries' direct_* fields are ``a``'s."""
    results: dict[str, Any] = {}
    for fetch_mib in args.fetch_mib:
        pairs = await alternate_async(
            args.pairs,
            catchup_round(a[1], a[2], pids, 1, fetch_mib),
            catchup_round(b[1], b[2], pids, 1, fetch_mib),
        )
        summary = summarise(pairs)
        name = f"{b[0]} / {a[0]}, {fetch_mib} MiB fetches"
        results[name] = {"summary": summary, "rounds": [asdict(p) for p in pairs]}
        print(
            f"{name}: ratio {summary['ratio_proxy_to_direct']:.3f}\n"
            f"  {a[0]:17s} {summary['direct_mib_per_s']:7.1f} MiB/s, "
            f"{summary['direct_fetches_per_gib']:6.0f} fetches/GiB, CPU-s/GiB broker "
            f"{summary['broker_cpu_s_per_gib_direct']:.2f}\n"
            f"  {b[0]:17s} {summary['proxy_mib_per_s']:7.1f} MiB/s, "
            f"{summary['proxy_fetches_per_gib']:6.0f} fetches/GiB, CPU-s/GiB broker "
            f"{summary['broker_cpu_s_per_gib_proxy']:.2f} proxy "
            f"{summary['proxy_cpu_s_per_gib']:.2f}{s3_column(summary.get('s3_cpu_s_per_gib_proxy'))}"
        )
    return results


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
    load capped at that rate in both. Goal (issue 13): tierproxy's ratio <= native's."""
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


def s3_column(cpu_s_per_gib: float | None) -> str:
    """The printout's S3 CPU figure; nothing when there is no S3 process (``--tier local``)."""
    return "" if cpu_s_per_gib is None else f" s3 {cpu_s_per_gib:.2f}"


async def run(
    args: argparse.Namespace,
    broker: BrokerInfo,
    s3: S3Info | None,
    broker_pid: int | None,
    s3_pid: int | None,
) -> dict[str, Any]:
    with remote_tier(args.tier, s3, "bench-native") as target:
        ours = await prepare(args, broker, target, Path(tempfile.mkdtemp(prefix="spill-")))
        native = await prepare_native(args, broker)
        direct = Endpoint(name="direct", host=broker.host, port=broker.port)
        result: dict[str, Any] = {
            "broker": broker.version,
            "tier": args.tier,
            "data_mib": args.data_mib,
            "pairs": args.pairs,
            "record_bytes": RECORD_BYTES,
            "data": f"warm: broker log, LocalTieredStorage and tierproxy's {args.tier} tier "
            "files in page cache",
            "load_average_at_start": os.getloadavg(),
        }
        with running_proxy(args, broker, target, ours.topic) as process:
            proxy = Endpoint(name="proxy", host="127.0.0.1", port=process.port)
            assert process.process.pid is not None
            pids = Pids(proxy=process.process.pid, broker=broker_pid, s3=s3_pid)
            result["native remote vs local"] = await compare(
                args, pids, ("local", direct, ours), ("native remote", direct, native)
            )
            profile = None if args.profile is None else args.profile / "native-remote-path.txt"
            with record(pids.proxy, profile):
                result["tierproxy remote vs native remote"] = await compare(
                    args,
                    pids,
                    ("native remote", direct, native),
                    ("tierproxy remote", proxy, ours),
                )
            if profile is not None:
                print("\n".join(summarise_profile(profile, top=25).lines()))
            if args.tail_seconds > 0:
                profile = None if args.profile is None else args.profile / "tail.txt"
                with record(pids.proxy, profile):
                    result["tail"] = await tail_comparison(
                        args,
                        proxy=proxy,
                        direct=direct,
                        ours=ours,
                        native=native,
                        watch=ProxyWatch.of(process),
                    )
                if profile is not None:
                    print("\n".join(summarise_profile(profile, top=30).lines()))
        result["load_average_at_end"] = os.getloadavg()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-mib",
        type=int,
        default=384,
        help="data per topic (1 partition); 384 MiB makes rounds of about a second",
    )
    parser.add_argument("--tail-mib", type=int, default=4, help="untiered data after it")
    parser.add_argument("--chunk-cache-mib", type=int, default=32)
    parser.add_argument(
        "--tier",
        choices=BACKENDS,
        default="local",
        help="tierproxy's remote tier: a local directory (the default, like Kafka's "
        "LocalTieredStorage) or S3 on an embedded SeaweedFS",
    )
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs per cell (>= 3)")
    parser.add_argument(
        "--fetch-mib",
        type=int,
        nargs="*",
        default=[1, 8],
        help="catch-up fetch sizes (none: skip the throughput cells)",
    )
    parser.add_argument(
        "--tail-seconds",
        type=float,
        default=5.0,
        help="each tail-latency round (0: skip them)",
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
        help="sample the proxy with py-spy during its remote reads and the tail rounds",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        server = KafkaBroker(ensure_jars(KAFKA_4), native_tiered=True)
        stack.callback(server.close)
        broker = server.start()
        seaweed = stack.enter_context(SeaweedFS()) if args.tier == "s3" else None
        s3 = None if seaweed is None else seaweed.start()
        s3_pid = None if seaweed is None else seaweed.pid
        result = asyncio.run(run(args, broker, s3, server.pid, s3_pid))
    print(f"saved {save_json('native', result)}")


if __name__ == "__main__":
    main()
