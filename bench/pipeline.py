"""Tiering pipeline throughput next to a raw Fetch of the same data, and the cost of an idle cycle.

Questions: (1) how fast does one ``tierproxy tier`` cycle copy a backlog to S3 compared with
simply reading the same bytes from the broker (goal: at least 0.7x), and (2) what does a cycle
cost when there is nothing to copy, for 1,000 partitions (goal: under 2 s)?

Run::

    .venv/bin/python -m bench.pipeline                 # 256 MiB over 8 partitions, 3 pairs
    .venv/bin/python -m bench.pipeline --gib 2 --out pipeline-2gib   # the issue's 2 GiB
    .venv/bin/python -m bench.pipeline --gib 0.5 --pairs 5 --idle-partitions 1000

Servers: the broker the environment names (``KAFKA_BOOTSTRAP`` > ``KAFKA_HOME`` > embedded
Tansu) and SeaweedFS (or ``S3_ENDPOINT``), as the tests use them; Spark ``local[2]``.

Throughput: ``--gib`` of 1 KiB records (random, uncompressed, stamped a day ago so that every
segment is closed) go to ``--partitions`` partitions. Then rounds alternate: a raw fetch of the
whole topic (one Fetch per round for every unfinished partition, 8 MiB per partition, batches
counted but not decoded), then one pipeline cycle copying the whole topic into a fresh bucket
prefix with a fresh metadata topic (so every cycle has the full backlog). Per pair the ratio
pipeline MB/s / raw MB/s; medians over ``--pairs`` pairs. Pipeline time is the whole cycle
(metadata, planning, both Spark stages, metadata publishes), without starting the metadata
manager. CPU seconds per GiB are given for this process tree (driver, Spark JVM and its Python
workers), the broker and the S3 server. Data is warm: just written, in the broker's memory
(Tansu) or page cache.

Idle cycle: ``--idle-partitions`` partitions (topics of 100) each hold one recent record, so
nothing can close; after one warm-up cycle, ``--idle-cycles`` cycles are timed.

Results: ``bench/results/<--out>.json`` and ``.png`` (``pipeline`` by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from proxy.embedded import SeaweedFS, broker_from_env, create_bucket, create_topic
from proxy.embedded.info import BrokerInfo, S3Info
from proxy.embedded.s3 import s3_info_from_env
from storage.kafka_client import FetchTarget, KafkaClient
from storage.tiering.job import build_spark, open_pipeline, settings_from_flat
from storage.tiering.report import CycleReport

RESULTS = Path(__file__).parent / "results"
MIB = 1024 * 1024
GIB = 1024 * MIB
VALUE_BYTES = 1024
FETCH_BYTES = 8 * MIB
DAY_MS = 86_400_000


@dataclass
class Pair:
    raw_mb_s: float
    pipeline_mb_s: float
    ratio: float
    raw_seconds: float
    pipeline_seconds: float
    pipeline_copy_seconds: float
    segments: int
    bytes_copied: int
    raw_cpu_s_per_gib: float
    pipeline_cpu_s_per_gib: float
    broker_cpu_s_per_gib: float
    s3_cpu_s_per_gib: float


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    return parents


def _tree(root: int, exclude: set[int]) -> list[int]:
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        found.append(pid)
        todo += children.get(pid, [])
    return found


class CpuMeter:
    """CPU seconds of this process tree (without the servers), the broker and the S3 server."""

    def __init__(self, broker_pid: int | None, s3_pid: int | None) -> None:
        self._servers = {p for p in (broker_pid, s3_pid) if p is not None}
        self._broker = broker_pid
        self._s3 = s3_pid

    def sample(self) -> tuple[float, float, float]:
        ours = sum(_cpu_of(p) for p in _tree(os.getpid(), self._servers))
        broker = sum(_cpu_of(p) for p in _tree(self._broker, set())) if self._broker else 0.0
        s3 = sum(_cpu_of(p) for p in _tree(self._s3, set())) if self._s3 else 0.0
        return ours, broker, s3


@contextmanager
def servers() -> Iterator[tuple[BrokerInfo, S3Info, int | None, int | None]]:
    broker_server = broker_from_env(os.environ)
    external_s3 = s3_info_from_env(os.environ)
    s3_server = None if external_s3 else SeaweedFS()
    try:
        broker = broker_server.start()
        s3 = external_s3 or s3_server.start()  # type: ignore[union-attr]
        s3_pid = s3_server.pid if s3_server else None
        yield broker, s3, getattr(broker_server, "pid", None), s3_pid
    finally:
        if s3_server is not None:
            s3_server.close()
        broker_server.close()


def produce(bootstrap: str, topic: str, partitions: int, total_bytes: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 * MIB,
            "queue.buffering.max.kbytes": 512 * 1024,
            "enable.idempotence": False,
        }
    )
    stamp = int(time.time() * 1000) - DAY_MS
    value = os.urandom(VALUE_BYTES)
    for i in range(total_bytes // VALUE_BYTES):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions, timestamp=stamp)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)


async def raw_fetch(bootstrap: str, topic: str, partitions: int) -> int:
    """Read every partition to its high watermark with raw Fetches; the bytes read."""
    total = 0
    async with KafkaClient(bootstrap) as client:
        offsets = dict.fromkeys(range(partitions), 0)
        ends: dict[int, int] = {}
        while offsets:
            answers = await client.fetch(
                None,
                [
                    FetchTarget(topic=topic, partition=p, offset=o, max_bytes=FETCH_BYTES)
                    for p, o in offsets.items()
                ],
                max_wait_ms=10,
                max_bytes=64 * MIB,
            )
            for answer in answers:
                ends[answer.partition] = answer.high_watermark
                records = answer.records
                position = 0
                while len(records) - position >= 12:
                    length = int.from_bytes(records[position + 8 : position + 12], "big")
                    if len(records) - position < 12 + length:
                        break
                    base = int.from_bytes(records[position : position + 8], "big")
                    delta = int.from_bytes(records[position + 23 : position + 27], "big")
                    offsets[answer.partition] = base + delta + 1
                    position += 12 + length
                total += position
            for partition, end in ends.items():
                if partition in offsets and offsets[partition] >= end:
                    del offsets[partition]
    return total


def settings(
    broker: BrokerInfo, s3: S3Info, bucket: str, pattern: str, *, run: str, spill: Path
) -> Any:
    return settings_from_flat(
        {
            "bootstrap.servers": broker.bootstrap,
            "remote.log.storage.backend": "s3",
            "remote.log.storage.prefix": run,
            "remote.log.storage.s3.bucket": bucket,
            "remote.log.storage.s3.endpoint": s3.endpoint_url,
            "remote.log.storage.s3.region": s3.region,
            "remote.log.storage.s3.access.key.id": s3.access_key,
            "remote.log.storage.s3.secret.access.key": s3.secret_key,
            "remote.log.storage.s3.path.style.access": True,
            "remote.log.metadata.topic.name": f"__rlm-bench-{run}",
            "remote.log.metadata.topic.partitions": 3,
            "tiering.fetch.max.bytes": FETCH_BYTES,
            "tiering.spill.dir": str(spill),
            "topics": [
                {
                    "pattern": pattern,
                    "remote.storage.enable": True,
                    "segment.bytes": 64 * MIB,
                    "segment.ms": 3_600_000,
                }
            ],
        }
    )


async def pipeline_cycles(spark: Any, config: Any, cycles: int) -> list[CycleReport]:
    async with open_pipeline(config, spark) as pipeline:
        return [await pipeline.run_cycle() for _ in range(cycles)]


def measure_pairs(
    args: argparse.Namespace,
    broker: BrokerInfo,
    s3: S3Info,
    meter: CpuMeter,
    *,
    spark: Any,
    spill: Path,
) -> tuple[list[Pair], int]:
    topic = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    total = int(args.gib * GIB)
    asyncio.run(create_topic(broker.bootstrap, topic, partitions=args.partitions))
    started = time.monotonic()
    produce(broker.bootstrap, topic, args.partitions, total)
    print(f"produced {total / MIB:.0f} MiB in {time.monotonic() - started:.1f} s")
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    create_bucket(s3, bucket)
    pairs = []
    for number in range(args.pairs):
        before = meter.sample()
        started = time.monotonic()
        read = asyncio.run(raw_fetch(broker.bootstrap, topic, args.partitions))
        raw_seconds = time.monotonic() - started
        raw_cpu = meter.sample()
        config = settings(
            broker, s3, bucket, topic, run=f"run{number}-{uuid.uuid4().hex[:6]}", spill=spill
        )
        (report,) = asyncio.run(pipeline_cycles(spark, config, 1))
        after = meter.sample()
        copied = report.bytes_copied
        if report.errors or copied < read * 0.99:
            raise SystemExit(f"pipeline copied {copied} of {read} bytes: {report.errors}")
        gib = read / GIB
        pair = Pair(
            raw_mb_s=read / raw_seconds / 1e6,
            pipeline_mb_s=copied / report.seconds / 1e6,
            ratio=(copied / report.seconds) / (read / raw_seconds),
            raw_seconds=raw_seconds,
            pipeline_seconds=report.seconds,
            pipeline_copy_seconds=report.copy_seconds,
            segments=report.segments_copied,
            bytes_copied=copied,
            raw_cpu_s_per_gib=(raw_cpu[0] - before[0]) / gib,
            pipeline_cpu_s_per_gib=(after[0] - raw_cpu[0]) / gib,
            broker_cpu_s_per_gib=(after[1] - raw_cpu[1]) / gib,
            s3_cpu_s_per_gib=(after[2] - raw_cpu[2]) / gib,
        )
        print(
            f"pair {number + 1}: raw {pair.raw_mb_s:7.1f} MB/s  pipeline {pair.pipeline_mb_s:7.1f}"
            f" MB/s ({pair.segments} segments, {pair.pipeline_seconds:.1f} s)  ratio "
            f"{pair.ratio:.2f}"
        )
        pairs.append(pair)
    return pairs, total


def measure_idle(
    args: argparse.Namespace, broker: BrokerInfo, s3: S3Info, spark: Any, spill: Path
) -> list[float]:
    prefix = f"bench-idle-{uuid.uuid4().hex[:6]}"
    topics: list[tuple[str, int]] = []
    remaining = args.idle_partitions
    while remaining > 0:
        count = min(100, remaining)
        name = f"{prefix}-{len(topics)}"
        asyncio.run(create_topic(broker.bootstrap, name, partitions=count))
        topics.append((name, count))
        remaining -= count
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for name, count in topics:
        for partition in range(count):
            producer.produce(name, value=b"x" * 100, partition=partition)
    producer.flush(60)
    bucket = f"bench-idle-{uuid.uuid4().hex[:8]}"
    create_bucket(s3, bucket)
    config = settings(
        broker, s3, bucket, f"{prefix}-.*", run=f"idle-{uuid.uuid4().hex[:6]}", spill=spill
    )
    reports = asyncio.run(pipeline_cycles(spark, config, args.idle_cycles + 1))
    seconds = [r.seconds for r in reports[1:]]
    partitions = sum(t.partitions for t in reports[-1].topics.values())
    print(
        f"idle cycle over {partitions} partitions: median {statistics.median(seconds):.2f} s "
        f"(first {reports[0].seconds:.2f} s)"
    )
    return seconds


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = result["pairs"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    numbers = range(1, len(pairs) + 1)
    left.plot(numbers, [p["raw_mb_s"] for p in pairs], "o-", label="raw Fetch")
    left.plot(numbers, [p["pipeline_mb_s"] for p in pairs], "s-", label="pipeline cycle")
    left.set_xlabel("pair")
    left.set_ylabel("MB/s")
    left.set_ylim(bottom=0)
    left.set_title(
        f"{result['mib']:.0f} MiB, {result['partitions']} partitions, "
        f"ratio {result['median_ratio']:.2f}"
    )
    left.legend()
    right.bar(range(1, len(result["idle_seconds"]) + 1), result["idle_seconds"])
    right.axhline(2.0, color="red", linestyle="--", label="goal 2 s")
    right.set_xlabel("idle cycle")
    right.set_ylabel("seconds")
    right.set_title(f"idle cycle, {result['idle_partitions']} partitions")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=0.25, help="data to tier (GiB)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--idle-partitions", type=int, default=1000)
    parser.add_argument("--idle-cycles", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--out", default="pipeline", help="results file stem in bench/results (.json, .png)"
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    spill = Path(f"/tmp/tierproxy-bench-spill-{os.getpid()}")
    with servers() as (broker, s3, broker_pid, s3_pid):
        spark = build_spark(args.master, app_name="tierproxy-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            meter = CpuMeter(broker_pid, s3_pid)
            pairs, total = measure_pairs(args, broker, s3, meter, spark=spark, spill=spill)
            idle = measure_idle(args, broker, s3, spark, spill)
        finally:
            spark.stop()
    result = {
        "broker": broker.kind,
        "s3": s3.kind,
        "master": args.master,
        "mib": total / MIB,
        "partitions": args.partitions,
        "value_bytes": VALUE_BYTES,
        "fetch_mib": FETCH_BYTES / MIB,
        "segment_mib": 64,
        "pairs": [asdict(p) for p in pairs],
        "median_raw_mb_s": statistics.median(p.raw_mb_s for p in pairs),
        "median_pipeline_mb_s": statistics.median(p.pipeline_mb_s for p in pairs),
        "median_ratio": statistics.median(p.ratio for p in pairs),
        "goal_ratio": 0.7,
        "idle_partitions": args.idle_partitions,
        "idle_seconds": idle,
        "median_idle_seconds": statistics.median(idle),
        "goal_idle_seconds": 2.0,
    }
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / f"{args.out}.png")
    print(
        f"median: raw {result['median_raw_mb_s']:.1f} MB/s, pipeline "
        f"{result['median_pipeline_mb_s']:.1f} MB/s, ratio {result['median_ratio']:.2f} "
        f"(goal 0.7); idle cycle {result['median_idle_seconds']:.2f} s (goal < 2 s)"
    )


if __name__ == "__main__":
    main()
