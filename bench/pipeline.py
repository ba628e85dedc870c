"""Tiering pipeline throughput next to a raw Fetch of the same data, and the cost of an idle cycle.

Questions: (1) how fast does one ``tierproxy tier`` cycle copy a backlog to remote storage
compared with simply reading the same bytes from the broker (goal: at least 0.7x), and (2) what
does a cycle cost when there is nothing to copy, for 1,000 partitions (goal: under 2 s)?

Run::

    .venv/bin/python -m bench.pipeline                 # 256 MiB over 8 partitions, 5 rounds
    .venv/bin/python -m bench.pipeline --gib 2 --out pipeline-2gib   # 2 GiB
    .venv/bin/python -m bench.pipeline --gib 0.5 --pairs 5 --backends local

Servers: the broker the environment names (``KAFKA_BOOTSTRAP`` > ``KAFKA_HOME`` > embedded
Apache Kafka) and, when the s3 backend is measured, SeaweedFS (or ``S3_ENDPOINT``), as the tests use
them; Spark ``local[2]``.

Two candidates (``--backends``, default both): the cycle copying to S3, and the same cycle with
the local-directory backend (``remote.log.storage.backend = "local"``, a fresh temporary
directory on the machine's disk, removed after each cycle outside the timing). SeaweedFS
shares the machine's cores and costs several times what the pipeline does per GiB, so the S3
ratio mostly measures SeaweedFS; the local-directory cycle shows what the pipeline costs
without it.

Throughput: ``--gib`` of 1 KiB records (random, uncompressed, stamped a day ago so that every
segment is closed) go to ``--partitions`` partitions of a topic whose broker-side
``segment.bytes`` is ``--broker-segment-mib`` (64 MiB by default, the pipeline's own segment
size; the embedded broker's default of 1 MiB, there for the tests, would cap every Fetch at
about 1 MiB, since a broker answers a partition from one log segment per Fetch). Then rounds
alternate (raw, S3, local, raw, S3, local, ...): a raw fetch of the whole topic (one Fetch per
round for every unfinished partition, 8 MiB per partition, batches counted but not decoded),
then one pipeline cycle per backend copying the whole topic under a fresh prefix with a fresh
metadata topic (so every cycle has the full backlog). Per round the ratio of each cycle's MB/s
to that round's raw MB/s; medians over ``--pairs`` rounds. Pipeline time is the whole cycle
(metadata, planning, the Spark job, metadata publishes), without starting the metadata
manager; the CPU figures cover that cycle alone too, from after the pipeline is opened (its
metadata topic created, the metadata manager started) to the cycle's end. Before the
measured rounds ``--warmup`` rounds run unrecorded: on a fresh broker the first cycles
otherwise measure the broker's JIT compiling the paths a raw Fetch never takes.
CPU seconds per GiB are given for this process tree (driver, Spark JVM and its Python
workers; each process's own time and that of its children that ended, from ``/proc``), the
broker and the S3 server; the tree's share is also split into the driver, the Spark JVM and the
Python workers (keys ``..._driver_cpu_s_per_gib``, ``..._jvm_cpu_s_per_gib``,
``..._workers_cpu_s_per_gib``), and the broker's share by thread role (``..._broker_network_``,
``_handlers_``, ``_jit_`` and ``_other_cpu_s_per_gib``: Kafka's network threads, its request
handler threads, the JVM's compiler threads and the rest; see :mod:`bench.jvm_threads`), for
the raw fetch too. Data is warm: just written, in the broker's page cache.

JSON keys: the S3 cycle keeps the original names (``pipeline_mb_s``, ``ratio``,
``pipeline_cpu_s_per_gib``, ``broker_cpu_s_per_gib``, ``s3_cpu_s_per_gib``, ...,
``median_pipeline_mb_s``, ``median_ratio``); the local-directory cycle has the same figures
prefixed ``local_`` (``local_mb_s``, ``local_ratio``, ``local_cpu_s_per_gib``, ...,
``median_local_ratio``). ``median_*`` also covers every MB/s, ratio and CPU figure.

Idle cycle: ``--idle-partitions`` partitions (topics of 100) each hold one recent record, so
nothing can close; after one warm-up cycle, ``--idle-cycles`` cycles are timed, with the first
of ``--backends``.

Results: ``bench/results/<--out>.json`` (with the commit and whether the tree was clean) and
``.png`` (``pipeline`` by default); ``$TIERPROXY_BENCH_RESULTS`` instead of ``bench/results``
when set, as for every benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import Producer

from bench.common import RESULTS, git_state
from bench.jvm_threads import ROLES, JvmThreads
from proxy.embedded import SeaweedFS, broker_from_env, create_bucket, create_topic
from proxy.embedded.info import BrokerInfo, S3Info
from proxy.embedded.s3 import s3_info_from_env
from storage.kafka_client import FetchTarget, KafkaClient
from storage.tiering.job import build_spark, open_pipeline, settings_from_flat
from storage.tiering.report import CycleReport

MIB = 1024 * 1024
GIB = 1024 * MIB
VALUE_BYTES = 1024
FETCH_BYTES = 8 * MIB
DAY_MS = 86_400_000

Backend = Literal["s3", "local"]
BACKENDS: tuple[Backend, ...] = ("s3", "local")
# The S3 cycle's figures keep the names bench/report.py and earlier results know; the
# local-directory cycle's are the same figures prefixed "local_".
_S3_KEYS = {
    "mb_s": "pipeline_mb_s",
    "seconds": "pipeline_seconds",
    "copy_seconds": "pipeline_copy_seconds",
    "cpu_s_per_gib": "pipeline_cpu_s_per_gib",
}
_MEDIAN_SUFFIXES = ("mb_s", "ratio", "cpu_s_per_gib")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cycle:
    """One pipeline cycle of a round, set against that round's raw fetch."""

    mb_s: float
    ratio: float
    seconds: float
    copy_seconds: float
    segments: int
    bytes_copied: int
    cpu_s_per_gib: float
    driver_cpu_s_per_gib: float
    jvm_cpu_s_per_gib: float
    workers_cpu_s_per_gib: float
    broker_cpu_s_per_gib: float
    broker_network_cpu_s_per_gib: float
    broker_handlers_cpu_s_per_gib: float
    broker_jit_cpu_s_per_gib: float
    broker_other_cpu_s_per_gib: float
    s3_cpu_s_per_gib: float

    def flat(self, backend: Backend) -> dict[str, float]:
        """The figures under their JSON names for ``backend``."""
        if backend == "s3":
            return {_S3_KEYS.get(k, k): v for k, v in asdict(self).items()}
        return {f"local_{k}": v for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """One raw fetch followed by one cycle per measured backend."""

    raw_mb_s: float
    raw_seconds: float
    raw_cpu_s_per_gib: float
    raw_broker_cpu_s_per_gib: float
    raw_broker_roles: dict[str, float]
    """The broker's CPU-s/GiB of the raw fetch by thread role (:data:`bench.jvm_threads.ROLES`)."""
    cycles: dict[Backend, Cycle]

    def flat(self) -> dict[str, float]:
        """The round as one flat JSON object (the shape of bench/report.py's tables)."""
        row = {
            "raw_mb_s": self.raw_mb_s,
            "raw_seconds": self.raw_seconds,
            "raw_cpu_s_per_gib": self.raw_cpu_s_per_gib,
            "raw_broker_cpu_s_per_gib": self.raw_broker_cpu_s_per_gib,
            **{f"raw_broker_{r}_cpu_s_per_gib": v for r, v in self.raw_broker_roles.items()},
        }
        for backend, cycle in self.cycles.items():
            row |= cycle.flat(backend)
        return row


def _cpu_of(pid: int) -> float:
    """User and system time of ``pid`` and of its children that ended (Spark's Python
    workers come and go between samples: a live tree alone would lose their time)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _kind_of(pid: int) -> str:
    """Which part of the pipeline a process of this tree is: driver, jvm or workers."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "driver"
    if b"pyspark.daemon" in command or b"pyspark.worker" in command:
        return "workers"
    if command.split(b"\0", 1)[0].endswith(b"java"):
        return "jvm"
    return "driver"


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
        self._broker_threads = JvmThreads(broker_pid) if broker_pid else None

    def sample(self) -> tuple[float, float, float]:
        ours = sum(_cpu_of(p) for p in _tree(os.getpid(), self._servers))
        broker = sum(_cpu_of(p) for p in _tree(self._broker, set())) if self._broker else 0.0
        s3 = sum(_cpu_of(p) for p in _tree(self._s3, set())) if self._s3 else 0.0
        return ours, broker, s3

    def parts(self) -> dict[str, float]:
        """This tree's CPU seconds by part: driver, jvm (Spark) and workers (Python)."""
        found = dict.fromkeys(("driver", "jvm", "workers"), 0.0)
        for pid in _tree(os.getpid(), self._servers):
            found[_kind_of(pid)] += _cpu_of(pid)
        return found

    def broker_roles(self) -> dict[str, float]:
        """The broker's CPU seconds by thread role (all zero for a broker not on a JVM)."""
        if self._broker_threads is None:
            return dict.fromkeys(ROLES, 0.0)
        return self._broker_threads.cpu_by_role()


@contextmanager
def servers(with_s3: bool) -> Iterator[tuple[BrokerInfo, S3Info | None, int | None, int | None]]:
    """The broker, and the S3 server only when a measured backend needs it."""
    broker_server = broker_from_env(os.environ)
    external_s3 = s3_info_from_env(os.environ) if with_s3 else None
    s3_server = SeaweedFS() if with_s3 and external_s3 is None else None
    try:
        broker = broker_server.start()
        s3 = external_s3 or (s3_server.start() if s3_server else None)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Where a cycle copies to: an S3 bucket, or a directory for the local backend."""

    backend: Backend
    s3: S3Info | None = None
    bucket: str = ""
    local_dir: Path | None = None

    def storage_settings(self) -> dict[str, Any]:
        if self.backend == "local":
            return {
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(self.local_dir),
            }
        assert self.s3 is not None
        return {
            "remote.log.storage.backend": "s3",
            "remote.log.storage.s3.bucket": self.bucket,
            "remote.log.storage.s3.endpoint": self.s3.endpoint_url,
            "remote.log.storage.s3.region": self.s3.region,
            "remote.log.storage.s3.access.key.id": self.s3.access_key,
            "remote.log.storage.s3.secret.access.key": self.s3.secret_key,
            "remote.log.storage.s3.path.style.access": True,
        }


def target_for(backend: Backend, s3: S3Info | None, scratch: Path, name: str) -> Target:
    """A fresh bucket (s3) or directory under ``scratch`` (local) for one benchmark part."""
    if backend == "local":
        return Target(backend="local", local_dir=scratch / name)
    assert s3 is not None
    bucket = f"{name}-{uuid.uuid4().hex[:8]}"
    create_bucket(s3, bucket)
    return Target(backend="s3", s3=s3, bucket=bucket)


def settings(
    broker: BrokerInfo,
    target: Target,
    pattern: str,
    *,
    run: str,
    spill: Path,
    segment_bytes: int = 64 * MIB,
) -> Any:
    return settings_from_flat(
        {
            "bootstrap.servers": broker.bootstrap,
            "remote.log.storage.prefix": run,
            **target.storage_settings(),
            "remote.log.metadata.topic.name": f"__rlm-bench-{run}",
            "remote.log.metadata.topic.partitions": 3,
            "tiering.fetch.max.bytes": FETCH_BYTES,
            "tiering.spill.dir": str(spill),
            "topics": [
                {
                    "pattern": pattern,
                    "remote.storage.enable": True,
                    "segment.bytes": segment_bytes,
                    "segment.ms": 3_600_000,
                }
            ],
        }
    )


async def pipeline_cycles(spark: Any, config: Any, cycles: int) -> list[CycleReport]:
    async with open_pipeline(config, spark) as pipeline:
        return [await pipeline.run_cycle() for _ in range(cycles)]


Sample = tuple[tuple[float, float, float], dict[str, float]]


async def metered_cycle(
    spark: Any, config: Any, meter: CpuMeter
) -> tuple[CycleReport, Sample, Sample]:
    """One cycle, with the CPU samples taken around the cycle alone: opening the pipeline
    (creating the metadata topic, the metadata manager's consumers) is not part of it."""
    async with open_pipeline(config, spark) as pipeline:
        before = meter.sample(), meter.parts() | meter.broker_roles()
        report = await pipeline.run_cycle()
        return report, before, (meter.sample(), meter.parts() | meter.broker_roles())


def measure_cycle(
    broker: BrokerInfo,
    target: Target,
    topic: str,
    meter: CpuMeter,
    *,
    spark: Any,
    spill: Path,
    read: int,
    raw_bytes_per_s: float,
    segment_bytes: int = 64 * MIB,
) -> Cycle:
    """One cycle copying the whole topic under a fresh prefix; checks that it copied it all."""
    run = f"{target.backend}-{uuid.uuid4().hex[:8]}"
    config = settings(broker, target, topic, run=run, spill=spill, segment_bytes=segment_bytes)
    report, (before, parts_before), (after, parts_after) = asyncio.run(
        metered_cycle(spark, config, meter)
    )
    if target.local_dir is not None:
        shutil.rmtree(target.local_dir, ignore_errors=True)
    copied = report.bytes_copied
    if report.errors or copied < read * 0.99:
        raise SystemExit(f"{target.backend}: copied {copied} of {read} bytes: {report.errors}")
    gib = read / GIB
    return Cycle(
        mb_s=copied / report.seconds / 1e6,
        ratio=(copied / report.seconds) / raw_bytes_per_s,
        seconds=report.seconds,
        copy_seconds=report.copy_seconds,
        segments=report.segments_copied,
        bytes_copied=copied,
        cpu_s_per_gib=(after[0] - before[0]) / gib,
        driver_cpu_s_per_gib=(parts_after["driver"] - parts_before["driver"]) / gib,
        jvm_cpu_s_per_gib=(parts_after["jvm"] - parts_before["jvm"]) / gib,
        workers_cpu_s_per_gib=(parts_after["workers"] - parts_before["workers"]) / gib,
        broker_cpu_s_per_gib=(after[1] - before[1]) / gib,
        broker_network_cpu_s_per_gib=(parts_after["network"] - parts_before["network"]) / gib,
        broker_handlers_cpu_s_per_gib=(parts_after["handlers"] - parts_before["handlers"]) / gib,
        broker_jit_cpu_s_per_gib=(parts_after["jit"] - parts_before["jit"]) / gib,
        broker_other_cpu_s_per_gib=(parts_after["other"] - parts_before["other"]) / gib,
        s3_cpu_s_per_gib=(after[2] - before[2]) / gib,
    )


def measure_rounds(
    args: argparse.Namespace,
    broker: BrokerInfo,
    s3: S3Info | None,
    meter: CpuMeter,
    *,
    spark: Any,
    spill: Path,
    scratch: Path,
) -> tuple[list[Round], int]:
    topic = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    total = int(args.gib * GIB)
    asyncio.run(
        create_topic(
            broker.bootstrap,
            topic,
            partitions=args.partitions,
            configs={"segment.bytes": str(args.broker_segment_mib * MIB)},
        )
    )
    started = time.monotonic()
    produce(broker.bootstrap, topic, args.partitions, total)
    print(f"produced {total / MIB:.0f} MiB in {time.monotonic() - started:.1f} s")
    targets = [target_for(b, s3, scratch, "bench") for b in args.backends]
    rounds = []
    for number in range(-args.warmup, args.pairs):
        before, roles_before = meter.sample(), meter.broker_roles()
        started = time.monotonic()
        read = asyncio.run(raw_fetch(broker.bootstrap, topic, args.partitions))
        raw_seconds = time.monotonic() - started
        raw_cpu, roles_after = meter.sample(), meter.broker_roles()
        cycles = {
            target.backend: measure_cycle(
                broker,
                target,
                topic,
                meter,
                spark=spark,
                spill=spill,
                read=read,
                raw_bytes_per_s=read / raw_seconds,
            )
            for target in targets
        }
        result = Round(
            raw_mb_s=read / raw_seconds / 1e6,
            raw_seconds=raw_seconds,
            raw_cpu_s_per_gib=(raw_cpu[0] - before[0]) / (read / GIB),
            raw_broker_cpu_s_per_gib=(raw_cpu[1] - before[1]) / (read / GIB),
            raw_broker_roles={r: (roles_after[r] - roles_before[r]) / (read / GIB) for r in ROLES},
            cycles=cycles,
        )
        print(
            f"round {number + 1 if number >= 0 else 'warm-up'}: raw {result.raw_mb_s:7.1f} MB/s"
            + "".join(
                f"  {b} {c.mb_s:6.1f} MB/s ({c.segments} segments, {c.seconds:.1f} s,"
                f" ratio {c.ratio:.2f})"
                for b, c in cycles.items()
            )
        )
        if number >= 0:
            rounds.append(result)
    return rounds, total


def measure_idle(
    args: argparse.Namespace, broker: BrokerInfo, target: Target, spark: Any, spill: Path
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
    config = settings(
        broker, target, f"{prefix}-.*", run=f"idle-{uuid.uuid4().hex[:6]}", spill=spill
    )
    reports = asyncio.run(pipeline_cycles(spark, config, args.idle_cycles + 1))
    seconds = [r.seconds for r in reports[1:]]
    partitions = sum(t.partitions for t in reports[-1].topics.values())
    print(
        f"idle cycle over {partitions} partitions ({target.backend}): median "
        f"{statistics.median(seconds):.2f} s (first {reports[0].seconds:.2f} s)"
    )
    return seconds


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """``median_<key>`` for every MB/s, ratio and CPU figure of the rounds."""
    keys = [k for k in rows[0] if k.endswith(_MEDIAN_SUFFIXES)]
    return {f"median_{k}": statistics.median(row[k] for row in rows) for k in keys}


_LABELS = {"s3": "pipeline → S3 (SeaweedFS)", "local": "pipeline → local dir"}
_PREFIXES = {"s3": "pipeline", "local": "local"}
_RATIO_KEYS = {"s3": "median_ratio", "local": "median_local_ratio"}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = result["pairs"]
    backends: list[Backend] = result["backends"]
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.5))
    numbers = range(1, len(pairs) + 1)
    left.plot(numbers, [p["raw_mb_s"] for p in pairs], "o-", label="raw Fetch")
    for backend, marker in zip(backends, "s^", strict=False):
        key = f"{_PREFIXES[backend]}_mb_s"
        ratio = result[_RATIO_KEYS[backend]]
        label = f"{_LABELS[backend]} (ratio {ratio:.2f})"
        left.plot(numbers, [p[key] for p in pairs], f"{marker}-", label=label)
    left.set_xticks(list(numbers))
    left.set_xlabel("round")
    left.set_ylabel("MB/s")
    left.set_yscale("log")
    left.set_title(f"{result['mib']:.0f} MiB, {result['partitions']} partitions")
    left.legend(fontsize="small")
    # Per candidate: its label, then the JSON keys of its CPU parts (this tree, broker, S3).
    columns = [("raw Fetch", "median_raw_cpu_s_per_gib", "median_raw_broker_cpu_s_per_gib", "")]
    for backend in backends:
        local = "" if backend == "s3" else "local_"
        columns.append(
            (
                _LABELS[backend].removeprefix("pipeline "),
                f"median_{_PREFIXES[backend]}_cpu_s_per_gib",
                f"median_{local}broker_cpu_s_per_gib",
                f"median_{local}s3_cpu_s_per_gib",
            )
        )
    bottoms = [0.0] * len(columns)
    for part, label in enumerate(("this process tree (driver, Spark)", "broker", "SeaweedFS")):
        heights = [result.get(column[part + 1], 0.0) for column in columns]
        middle.bar([column[0] for column in columns], heights, bottom=bottoms, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    middle.set_ylabel("CPU s/GiB (median)")
    middle.set_title("CPU cost per GiB")
    middle.legend(fontsize="small")
    right.bar(range(1, len(result["idle_seconds"]) + 1), result["idle_seconds"])
    right.axhline(2.0, color="red", linestyle="--", label="goal 2 s")
    right.set_xlabel("idle cycle")
    right.set_ylabel("seconds")
    right.set_title(
        f"idle cycle, {result['idle_partitions']} partitions ({result['idle_backend']})"
    )
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _backends(text: str) -> tuple[Backend, ...]:
    """``--backends``: a comma-separated subset of s3,local, in the order given."""
    known: dict[str, Backend] = {backend: backend for backend in BACKENDS}
    names = dict.fromkeys(name.strip() for name in text.split(","))
    try:
        return tuple(known[name] for name in names)
    except KeyError as err:
        raise argparse.ArgumentTypeError(f"unknown backend {err}; choose from s3,local") from err


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=0.25, help="data to tier (GiB)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--broker-segment-mib",
        type=int,
        default=64,
        help="segment.bytes of the benchmark topic at the broker (MiB)",
    )
    parser.add_argument("--pairs", type=int, default=5, help="rounds (raw, then each backend)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="unrecorded rounds first (the broker's JIT)"
    )
    parser.add_argument(
        "--backends",
        type=_backends,
        default=BACKENDS,
        help="remote storage backends to measure, in round order (default: s3,local)",
    )
    parser.add_argument("--idle-partitions", type=int, default=1000)
    parser.add_argument("--idle-cycles", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--out", default="pipeline", help="results file stem in bench/results (.json, .png)"
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    # Spill files and local-backend directories share one temporary directory, removed at exit.
    scratch = Path(tempfile.mkdtemp(prefix="tierproxy-bench-"))
    spill = scratch / "spill"
    try:
        with servers("s3" in args.backends) as (broker, s3, broker_pid, s3_pid):
            spark = build_spark(args.master, app_name="tierproxy-bench")
            spark.sparkContext.setLogLevel("ERROR")
            try:
                meter = CpuMeter(broker_pid, s3_pid)
                rounds, total = measure_rounds(
                    args, broker, s3, meter, spark=spark, spill=spill, scratch=scratch
                )
                idle_target = target_for(args.backends[0], s3, scratch, "bench-idle")
                idle = measure_idle(args, broker, idle_target, spark, spill)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [r.flat() for r in rounds]
    result = {
        **git_state(),
        "broker": broker.kind,
        "s3": s3.kind if s3 else None,
        "backends": list(args.backends),
        "master": args.master,
        "mib": total / MIB,
        "partitions": args.partitions,
        "value_bytes": VALUE_BYTES,
        "fetch_mib": FETCH_BYTES / MIB,
        "segment_mib": 64,
        "broker_segment_mib": args.broker_segment_mib,
        "pairs": rows,
        **medians(rows),
        "goal_ratio": 0.7,
        "idle_backend": idle_target.backend,
        "idle_partitions": args.idle_partitions,
        "idle_seconds": idle,
        "median_idle_seconds": statistics.median(idle),
        "goal_idle_seconds": 2.0,
    }
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / f"{args.out}.png")
    print(f"median: raw {result['median_raw_mb_s']:.1f} MB/s", end="")
    for backend in args.backends:
        print(
            f"; {backend} {result[f'median_{_PREFIXES[backend]}_mb_s']:.1f} MB/s, ratio "
            f"{result[_RATIO_KEYS[backend]]:.2f}",
            end="",
        )
    print(f" (goal 0.7); idle cycle {result['median_idle_seconds']:.2f} s (goal < 2 s)")


if __name__ == "__main__":
    main()
