"""The tiering pipeline's copy rate per partition next to Kafka's native copier, on one broker.

Question: does ``tierproxy tier`` copy closed segments to a local-directory tier at
least as fast per partition as Kafka's own RemoteLogManager copies them with
``LocalTieredStorage`` (goal: pipeline / native >= 1.0), and at what CPU cost?

Run::

    .venv/bin/python -m bench.native_copier                  # 256 MiB, 8 partitions, 3 pairs
    .venv/bin/python -m bench.native_copier --mib 512 --pairs 5

Set-up: one embedded Apache Kafka 4.x with native tiered storage switched on
(``KafkaBroker(native_tiered=True)``: RemoteLogManager's copy task every 500 ms, Kafka's
default copier thread pool, ``LocalTieredStorage`` in the broker's work directory), Spark
``local[2]`` for the pipeline. Every topic has ``--partitions`` partitions of ``--mib`` MiB
of 1 KiB records in total (random, uncompressed, stamped a day ago) and ``segment.bytes`` of
``--segment-mib`` at the broker; the pipeline cuts its segments at the same size.

Rounds alternate (native, pipeline; pipeline, native; ...):

* *native*: a fresh topic is created (``remote.storage.enable`` off, the default) and filled; then
  ``remote.storage.enable=true`` is set (IncrementalAlterConfigs) and the clock runs until
  ``LocalTieredStorage``'s directory holds every closed segment of the topic at its full size
  (the broker's own ``.log`` files of the topic except each partition's active one), polled
  every 20 ms. These are the bytes Kafka's ``RemoteCopyBytesPerSec`` meter counts; reading
  the meter itself needs a JMX connector in the broker, and its rates are one-minute
  averages, too coarse for copies of a few seconds. The time includes up to one copy-task
  interval (500 ms) before the first copy starts, as the pipeline's includes its planning.
* *pipeline*: one ``tierproxy tier`` cycle copies one topic filled the same way at the start
  (under a fresh prefix and metadata topic each round, to a fresh local directory), as in
  ``bench/pipeline.py``; its time is the whole cycle.

Before the recorded pairs, ``--warmup`` pairs run unrecorded: the first pipeline cycle on a
fresh Spark also starts its Python workers, and the first of either copier runs on a broker
whose JIT has not compiled its paths yet.

The two copiers do not promise the same: ``LocalTieredStorage``'s default transferer is
``Files.copy`` of each file (a copy in the kernel, never forced to disk), whereas the
pipeline's local-directory storage fsyncs every file before it publishes
COPY_SEGMENT_FINISHED, so its copy rate is bounded by the disk's flush rate as well.

MB/s per partition is the bytes copied / seconds / partitions. CPU seconds per GiB: the
broker while it copies natively; this process tree (driver, Spark JVM, Python workers) and
the broker for the pipeline. Data is warm (page cache). Results: ``native_copier.json``
(with the commit and whether the tree was clean) and ``native_copier.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType

from bench.common import GIB, MIB, alternate, bar_chart, git_state, median, save_json
from bench.pipeline import CpuMeter, measure_cycle, produce, target_for
from proxy.embedded import KAFKA_4, KafkaBroker, create_topic, ensure_jars
from proxy.embedded.info import BrokerInfo
from storage.tiering.job import build_spark

POLL_SECONDS = 0.02
COPY_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Copy:
    """One copy of a whole topic, by either copier."""

    mb_s_per_partition: float
    seconds: float
    bytes_copied: int
    cpu_s_per_gib: float
    """This process tree (pipeline only; the native copier runs in the broker)."""
    broker_cpu_s_per_gib: float


def _closed_segment_bytes(data_dirs: list[Path]) -> int:
    """Bytes of the ``.log`` files of ``data_dirs`` except each one's newest (active) one."""
    total = 0
    for directory in data_dirs:
        logs = sorted(directory.glob("*.log"))
        total += sum(log.stat().st_size for log in logs[:-1])
    return total


def _remote_bytes(tiered_dir: Path, topic: str) -> int:
    return sum(
        path.stat().st_size
        for path in tiered_dir.rglob("*.log")
        if path.parent.name.startswith(f"{topic}-")
    )


def _enable_remote_storage(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "remote.storage.enable",
                "true",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the futures are done
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)


def _fill(broker: BrokerInfo, topic: str, args: argparse.Namespace) -> None:
    """A fresh topic of ``--mib`` MiB; the broker does not tier it (remote storage is off by
    default) until told to."""
    configs = {"segment.bytes": str(args.segment_mib * MIB)}
    asyncio.run(create_topic(broker.bootstrap, topic, partitions=args.partitions, configs=configs))
    produce(broker.bootstrap, topic, args.partitions, args.mib * MIB)


def native_copy(
    server: KafkaBroker, broker: BrokerInfo, meter: CpuMeter, args: argparse.Namespace
) -> Copy:
    """Fill a fresh topic, switch tiering on, and time until every closed segment is copied."""
    topic = f"bench-native-{uuid.uuid4().hex[:8]}"
    _fill(broker, topic, args)
    data_dirs = [
        d
        for d in server.work_dir.rglob(f"{topic}-*")
        if d.is_dir() and server.tiered_storage_dir not in d.parents
    ]
    expected = _closed_segment_bytes(data_dirs)
    before = meter.sample()
    started = time.monotonic()
    _enable_remote_storage(broker.bootstrap, topic)
    while _remote_bytes(server.tiered_storage_dir, topic) < expected:
        if time.monotonic() - started > COPY_TIMEOUT_S:
            copied = _remote_bytes(server.tiered_storage_dir, topic)
            raise SystemExit(f"native copier: {copied} of {expected} bytes copied in time")
        time.sleep(POLL_SECONDS)
    seconds = time.monotonic() - started
    after = meter.sample()
    # The pipeline tiers every topic whose broker config says remote.storage.enable, so a
    # native topic left behind would be copied by the next pipeline cycle too.
    _delete_topic(broker.bootstrap, topic)
    return Copy(
        mb_s_per_partition=expected / seconds / 1e6 / args.partitions,
        seconds=seconds,
        bytes_copied=expected,
        cpu_s_per_gib=0.0,
        broker_cpu_s_per_gib=(after[1] - before[1]) / (expected / GIB),
    )


def pipeline_copy(
    broker: BrokerInfo,
    topic: str,
    meter: CpuMeter,
    args: argparse.Namespace,
    *,
    spark: Any,
    scratch: Path,
) -> Copy:
    """One pipeline cycle copying the whole of ``topic`` to a fresh local directory."""
    target = target_for("local", None, scratch, f"tier-{uuid.uuid4().hex[:6]}")
    cycle = measure_cycle(
        broker,
        target,
        topic,
        meter,
        spark=spark,
        spill=scratch / "spill",
        read=int(args.mib * MIB * 0.99),
        raw_bytes_per_s=1.0,
        segment_bytes=args.segment_mib * MIB,
    )
    return Copy(
        mb_s_per_partition=cycle.mb_s / args.partitions,
        seconds=cycle.seconds,
        bytes_copied=cycle.bytes_copied,
        cpu_s_per_gib=cycle.cpu_s_per_gib,
        broker_cpu_s_per_gib=cycle.broker_cpu_s_per_gib,
    )


@contextlib.contextmanager
def native_broker() -> Iterator[tuple[KafkaBroker, BrokerInfo]]:
    server = KafkaBroker(ensure_jars(KAFKA_4), native_tiered=True)
    try:
        yield server, server.start()
    finally:
        server.close()


def summary(pairs: list[dict[str, Any]]) -> dict[str, float]:
    native = [p["native"]["mb_s_per_partition"] for p in pairs]
    ours = [p["pipeline"]["mb_s_per_partition"] for p in pairs]
    return {
        "median_native_mb_s_per_partition": median(native),
        "median_pipeline_mb_s_per_partition": median(ours),
        "median_ratio": median([p["ratio"] for p in pairs]),
        "median_native_broker_cpu_s_per_gib": median(
            [p["native"]["broker_cpu_s_per_gib"] for p in pairs]
        ),
        "median_pipeline_cpu_s_per_gib": median([p["pipeline"]["cpu_s_per_gib"] for p in pairs]),
        "median_pipeline_broker_cpu_s_per_gib": median(
            [p["pipeline"]["broker_cpu_s_per_gib"] for p in pairs]
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="data per topic (MiB)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segment-mib", type=int, default=16, help="segment.bytes, both sides")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="unrecorded pairs first (JITs, Python workers)"
    )
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="tierproxy-bench-"))
    try:
        with native_broker() as (server, broker):
            spark = build_spark(args.master, app_name="tierproxy-bench")
            spark.sparkContext.setLogLevel("ERROR")
            try:
                meter = CpuMeter(server.pid, None)
                topic = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
                _fill(broker, topic, args)
                for _ in range(args.warmup):
                    native_copy(server, broker, meter, args)
                    pipeline_copy(broker, topic, meter, args, spark=spark, scratch=scratch)
                rounds = alternate(
                    args.pairs,
                    lambda: native_copy(server, broker, meter, args),
                    lambda: pipeline_copy(broker, topic, meter, args, spark=spark, scratch=scratch),
                )
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    pairs: list[dict[str, Any]] = [
        {
            "native": asdict(r.a),
            "pipeline": asdict(r.b),
            "ratio": r.b.mb_s_per_partition / r.a.mb_s_per_partition,
        }
        for r in rounds
    ]
    for number, pair in enumerate(pairs, start=1):
        print(
            f"pair {number}: native {pair['native']['mb_s_per_partition']:.1f} MB/s per "
            f"partition, pipeline {pair['pipeline']['mb_s_per_partition']:.1f}, "
            f"ratio {pair['ratio']:.2f}"
        )
    result = {
        **git_state(),
        "mib": args.mib,
        "partitions": args.partitions,
        "segment_mib": args.segment_mib,
        "value_bytes": 1024,
        "pairs": pairs,
        **summary(pairs),
        "goal_ratio": 1.0,
    }
    save_json("native_copier", result)
    bar_chart(
        "native_copier",
        [
            (
                "copy rate per partition",
                "MB/s",
                {
                    "median": {
                        "Kafka native copier": result["median_native_mb_s_per_partition"],
                        "tierproxy pipeline": result["median_pipeline_mb_s_per_partition"],
                    }
                },
            ),
            (
                "CPU per GiB copied",
                "CPU-s/GiB",
                {
                    "native (broker)": {"broker": result["median_native_broker_cpu_s_per_gib"]},
                    "pipeline": {
                        "broker": result["median_pipeline_broker_cpu_s_per_gib"],
                        "pipeline processes": result["median_pipeline_cpu_s_per_gib"],
                    },
                },
            ),
        ],
        title=f"{args.mib} MiB, {args.partitions} partitions, {args.segment_mib} MiB segments",
    )
    print(
        f"median per partition: native {result['median_native_mb_s_per_partition']:.1f} MB/s, "
        f"pipeline {result['median_pipeline_mb_s_per_partition']:.1f} MB/s, ratio "
        f"{result['median_ratio']:.2f} (goal 1.0)"
    )


if __name__ == "__main__":
    main()
