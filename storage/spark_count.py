"""Count a topic's records with ``format("tierproxy")``: the demo's last step, and a smoke
test of a deployment::

    python -m storage.spark_count --config tierproxy.toml --topic orders

Prints one JSON line: ``{"topic": ..., "records": N, "slices": M}`` (M: Spark tasks).

It starts Spark as the pipeline does (:func:`storage.tiering.job.build_spark`), so it lives
beside the source rather than in it: :mod:`storage.spark_source` never imports the pipeline.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from storage.spark_source.source import register
from storage.tiering.job import build_spark

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.spark_count")
    parser.add_argument("--config", required=True, help="the tierproxy.toml")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--isolation-level",
        default="read_uncommitted",
        choices=("read_uncommitted", "read_committed"),
    )
    args = parser.parse_args(argv)
    spark = build_spark(args.master, app_name="tierproxy-count")
    try:
        register(spark)
        frame = (
            spark.read.format("tierproxy")
            .option("config", args.config)
            .option("subscribe", args.topic)
            .option("isolationLevel", args.isolation_level)
            .load()
        )
        count = frame.count()
        slices = frame.rdd.getNumPartitions()
    finally:
        spark.stop()
    print(json.dumps({"topic": args.topic, "records": count, "slices": slices}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
