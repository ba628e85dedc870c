"""A full-history scan with ``format("tierproxy")`` (the remote tier) next to Spark's own Kafka
source reading the same topic through the broker, in the same Spark (goal: at least 2x).

Run::

    .venv/bin/python -m bench.spark_source                    # 128 MiB over 4 partitions
    .venv/bin/python -m bench.spark_source --gib 1 --pairs 3 --backend local

Servers: the broker the environment names (``KAFKA_BOOTSTRAP`` > ``KAFKA_HOME`` > embedded
Apache Kafka) and, for the s3 backend, SeaweedFS (or ``S3_ENDPOINT``); Spark ``local[2]`` with
``spark-sql-kafka-0-10`` from Maven Central (4.2.0: Maven Central has no 4.3.0 build).

Data: ``--gib`` of 1 KiB records (random, uncompressed, stamped a day ago) in
``--partitions`` partitions, tiered once by one pipeline cycle (64 MiB segments); the broker
keeps its copy, so both sources read the same records. Rounds alternate (kafka, tierproxy,
tierproxy, kafka, ...): each scans the whole topic and aggregates ``count(*)`` and
``sum(length(value))`` (every row and value reaches Spark). ``tierproxy`` runs with
``includeLocal=false``: the remote tier only, which holds every closed segment.

Before the pairs, ``--warmup`` unmeasured rounds of each source (one by default, as
``bench.passthrough``): the first round of each paid once-per-session costs the others do not
(the data source's Python workers importing PySpark, pyarrow and botocore; the Kafka source's
consumer code compiling), and with three pairs a cold first pair could be the median.

Figures per round: rows/s, MB/s (record values), CPU seconds per GiB of this process tree
(driver, Spark JVM, Python workers; without the servers) and of each of those parts, the
broker's and the S3 server's. Medians over ``--pairs`` rounds and the per-round ratio
tierproxy / kafka.

Spark's Kafka source runs as a user would run it: one task per partition (``minPartitions``
unset: the 4 partitions already give ``local[2]`` two tasks per core) and the consumer's
fetch sizes, unless ``--kafka-fetch-mib`` sets ``kafka.max.partition.fetch.bytes`` (1 MiB by
default).

Results: ``bench/results/<--out>.json`` and ``.png`` (``spark_source`` by default). Timing
on a shared machine is indicative only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import alternate, bar_chart, median, save_json
from bench.pipeline import (
    GIB,
    MIB,
    VALUE_BYTES,
    CpuMeter,
    Target,
    pipeline_cycles,
    produce,
    servers,
    settings,
    target_for,
)
from proxy.embedded import create_topic
from proxy.embedded.info import BrokerInfo
from storage.spark_source import register

KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
GOAL_RATIO = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    rows: int
    value_bytes: int
    seconds: float
    cpu_s: float
    broker_cpu_s: float
    s3_cpu_s: float
    parts_cpu_s: dict[str, float]
    """This tree's CPU seconds by part: driver, jvm (Spark) and workers (Python)."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / MIB / self.seconds

    def cpu_per_gib(self, cpu: float) -> float:
        return cpu / (self.value_bytes / GIB)


def spark_session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("tierproxy-bench-spark-source")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.jars.packages", KAFKA_PACKAGE)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def scan(frame: Any, meter: CpuMeter) -> Scan:
    before = meter.sample()
    parts_before = meter.parts()
    started = time.perf_counter()
    row = frame.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    seconds = time.perf_counter() - started
    after = meter.sample()
    parts_after = meter.parts()
    ours, broker, s3 = (b - a for a, b in zip(before, after, strict=True))
    return Scan(
        rows=int(row.n),
        value_bytes=int(row.bytes or 0),
        seconds=seconds,
        cpu_s=ours,
        broker_cpu_s=broker,
        s3_cpu_s=s3,
        parts_cpu_s={part: parts_after[part] - parts_before[part] for part in parts_after},
    )


def tierproxy_frame(spark: Any, broker: BrokerInfo, target: Target, topic: str, run: str) -> Any:
    reader = (
        spark.read.format("tierproxy")
        .option("subscribe", topic)
        .option("includeLocal", "false")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("tierproxy.remote.log.storage.prefix", run)
        .option("tierproxy.remote.log.metadata.topic.name", f"__rlm-bench-{run}")
        .option("tierproxy.remote.log.metadata.topic.partitions", "3")
    )
    for key, value in target.storage_settings().items():
        reader = reader.option(
            f"tierproxy.{key}", str(value).lower() if isinstance(value, bool) else str(value)
        )
    return reader.load()


def kafka_frame(spark: Any, broker: BrokerInfo, topic: str, fetch_mib: int | None) -> Any:
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    if fetch_mib is not None:
        reader = reader.option("kafka.max.partition.fetch.bytes", str(fetch_mib * MIB))
    return reader.load()


def summary(pairs: list[Any]) -> dict[str, float]:
    def med(side: str, figure: str) -> float:
        return median([getattr(getattr(p, side), figure) for p in pairs])

    def part(side: str, name: str) -> float:
        scans = [getattr(p, side) for p in pairs]
        return median([s.cpu_per_gib(s.parts_cpu_s[name]) for s in scans])

    return {
        "kafka_rows_per_s": median([p.a.rows_per_s for p in pairs]),
        "tierproxy_rows_per_s": median([p.b.rows_per_s for p in pairs]),
        "kafka_mb_per_s": median([p.a.mb_per_s for p in pairs]),
        "tierproxy_mb_per_s": median([p.b.mb_per_s for p in pairs]),
        "tierproxy_to_kafka_ratio": median([p.b.mb_per_s / p.a.mb_per_s for p in pairs]),
        "kafka_cpu_s_per_gib": median([p.a.cpu_per_gib(p.a.cpu_s) for p in pairs]),
        "tierproxy_cpu_s_per_gib": median([p.b.cpu_per_gib(p.b.cpu_s) for p in pairs]),
        "kafka_broker_cpu_s_per_gib": median([p.a.cpu_per_gib(p.a.broker_cpu_s) for p in pairs]),
        "tierproxy_s3_cpu_s_per_gib": median([p.b.cpu_per_gib(p.b.s3_cpu_s) for p in pairs]),
        "kafka_jvm_cpu_s_per_gib": part("a", "jvm"),
        "tierproxy_jvm_cpu_s_per_gib": part("b", "jvm"),
        "tierproxy_workers_cpu_s_per_gib": part("b", "workers"),
        "kafka_seconds": med("a", "seconds"),
        "tierproxy_seconds": med("b", "seconds"),
    }


def commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=0.125)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured rounds of each source before the pairs"
    )
    parser.add_argument("--backend", choices=("s3", "local"), default="s3")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", default="spark_source")
    parser.add_argument(
        "--kafka-fetch-mib",
        type=int,
        default=None,
        help="kafka.max.partition.fetch.bytes of Spark's Kafka source (default: Kafka's, 1 MiB)",
    )
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="tierproxy-bench-"))
    run = uuid.uuid4().hex[:8]
    topic = f"bench-spark-source-{run}"
    try:
        with servers(args.backend == "s3") as (broker, s3, broker_pid, s3_pid):
            asyncio.run(create_topic(broker.bootstrap, topic, partitions=args.partitions))
            produce(broker.bootstrap, topic, args.partitions, int(args.gib * GIB))
            spark = spark_session(args.master)
            try:
                target = target_for(args.backend, s3, scratch, "bench-spark-source")
                config = settings(broker, target, topic, run=run, spill=scratch / "spill")
                (report,) = asyncio.run(pipeline_cycles(spark, config, 1))
                meter = CpuMeter(broker_pid, s3_pid)

                def kafka_round() -> Scan:
                    return scan(kafka_frame(spark, broker, topic, args.kafka_fetch_mib), meter)

                def tierproxy_round() -> Scan:
                    return scan(tierproxy_frame(spark, broker, target, topic, run), meter)

                for _ in range(args.warmup):
                    kafka_round()
                    tierproxy_round()
                pairs = alternate(args.pairs, kafka_round, tierproxy_round)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "commit": commit(),
        "broker": broker.kind,
        "backend": args.backend,
        "master": args.master,
        "mib": args.gib * 1024,
        "partitions": args.partitions,
        "warmup_rounds_per_source": args.warmup,
        "kafka_fetch_mib": args.kafka_fetch_mib,
        "value_bytes": VALUE_BYTES,
        "segments_copied": report.segments_copied,
        "pairs": [{"kafka": asdict(p.a), "tierproxy": asdict(p.b)} for p in pairs],
        **summary(pairs),
        "goal_ratio": GOAL_RATIO,
    }
    save_json(args.out, result)
    bar_chart(
        args.out,
        [
            (
                "scan throughput",
                "MB/s",
                {
                    "full history": {
                        "kafka": result["kafka_mb_per_s"],
                        "tierproxy": result["tierproxy_mb_per_s"],
                    }
                },
            ),
            (
                "CPU",
                "CPU-s per GiB",
                {
                    "this process tree": {
                        "kafka": result["kafka_cpu_s_per_gib"],
                        "tierproxy": result["tierproxy_cpu_s_per_gib"],
                    }
                },
            ),
        ],
        title=f"format('tierproxy') vs format('kafka'), {args.gib} GiB",
    )
    print(
        f"median: kafka {result['kafka_mb_per_s']:.1f} MB/s "
        f"({result['kafka_rows_per_s']:.0f} rows/s), "
        f"tierproxy {result['tierproxy_mb_per_s']:.1f} MB/s "
        f"({result['tierproxy_rows_per_s']:.0f} rows/s), "
        f"ratio {result['tierproxy_to_kafka_ratio']:.2f} (goal {GOAL_RATIO})"
    )


if __name__ == "__main__":
    main()
