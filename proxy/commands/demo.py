"""``tierproxy demo``: its arguments; the steps it runs are :mod:`proxy.commands.demo_steps`,
imported only when the demo runs."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]

_DESCRIPTION = """\
Show tiered storage end to end on embedded servers: start Apache Kafka (KRaft, one node) on a
free loopback port, create a topic and produce records; run the tiering pipeline once on local
Spark (tierproxy tier --once), which copies the closed ranges of every partition to a
local-directory remote tier with Kafka's index files and KIP-405 metadata and then lets the
broker drop them (DeleteRecords: the broker's log start moves past the tiered range); start
the proxy (tierproxy serve) with the remote tier; consume every partition from offset 0
through the proxy, check that every record came back exactly and in order, and
say how many were served from the remote tier and how many by the broker; finally count the
topic with the Spark data source (spark.read.format("tierproxy")) and compare.

Apache Kafka's jars come from Maven Central (fetched once into .kafka/ by `make kafka-jars`,
or here if missing). KAFKA_BOOTSTRAP=HOST:PORT uses a running broker as is, and KAFKA_HOME=DIR
starts Apache Kafka from that release instead. --broker tansu uses the embedded Tansu, which
never deletes anything: the proxy's offload policy then serves the tiered range. Nothing is
left running afterwards; the work directory (config, remote tier, logs) is removed unless
--work-dir keeps it or a step failed.

exit status: 0 when every record came back intact, 1 when verification failed, 2 when a
server could not be started, the pipeline failed, or the broker refused a request (e.g.
--topic exists already)."""


def register(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` the ``demo`` subcommand's."""
    parser.description = _DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--records",
        type=_positive_int,
        default=20_000,
        metavar="N",
        help="records to produce and read back (default: %(default)s)",
    )
    parser.add_argument(
        "--topic",
        metavar="NAME",
        help="topic to create (default: tierproxy-demo-<random>); it must not exist yet",
    )
    parser.add_argument(
        "--partitions",
        type=_positive_int,
        default=3,
        metavar="N",
        help="partitions of the topic (default: %(default)s)",
    )
    parser.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help="the embedded broker: Apache Kafka (default) or Tansu, which never deletes",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="keep the config, remote tier and logs here (default: a temporary directory, "
        "removed at the end)",
    )
    parser.add_argument(
        "--value-bytes",
        type=_positive_int,
        default=200,
        metavar="N",
        help="size of each record's value in bytes (default: %(default)s)",
    )
    parser.set_defaults(handler=_handle)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _handle(args: argparse.Namespace) -> int:
    from proxy.commands.demo_steps import run  # noqa: PLC0415 (the servers, only to run)

    return run(args)
