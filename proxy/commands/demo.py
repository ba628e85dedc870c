"""``tierproxy demo``: run the project end to end on embedded servers and say what happened.

The demo is a list of steps run in order against a :class:`DemoRun` that carries what earlier
steps produced (the broker, the topic, the records written). Each step is timed and reported
on one line; the run ends with a summary table. The steps show the whole product on Apache
Kafka: a broker with a topic, the tiering pipeline on local Spark copying closed ranges to a
local-directory remote tier and then letting the broker drop them (its log start moves up:
the broker can no longer serve those offsets), ``tierproxy serve`` in front of the broker, and
an unmodified consumer reading from offset 0 through the proxy across the remote/local
boundary; last, ``spark.read.format("tierproxy")`` counts the topic (remote tier and the
broker's tail) and the count is compared with what was produced. The pipeline, the proxy and
the count run as subprocesses (``tierproxy tier``, ``tierproxy serve``,
``python -m storage.spark_source.count``), with one generated config file that the summary
names.

With ``--broker tansu`` (a broker that never deletes anything) the tiered range stays on the
broker and the proxy's offload policy serves it from the remote tier instead.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop
from rich.console import Console
from rich.table import Table

from proxy.embedded import (
    BrokerChoice,
    BrokerInfo,
    ServerStartError,
    broker_from_env,
    create_topic,
)
from proxy.embedded.kafka_jars import KafkaJarsError
from proxy.embedded.tierproxy import TierproxyServer
from storage.console import report_console
from storage.kafka_client import KafkaClient, KafkaClientError
from storage.kafka_client.consumer import AssignedConsumer
from storage.kafka_client.producer import TopicProducer

__all__ = ["DemoOptions", "register", "run"]

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

_CONSUME_TIMEOUT_S = 60.0
_BATCH_BYTES = 16 * 1024
"""Bytes of keys and values per produced batch: Kafka's producer ``batch.size`` default. The
batches must stay well below the demo's segment size, or every segment would be closed and
nothing left to read from the broker."""
_PIPELINE_TIMEOUT_S = 600.0
_PROXY_START_TIMEOUT_S = 60.0
_SEGMENTS_PER_PARTITION = 6
"""Segment size is chosen so that every partition has about this many to tier."""
_MIN_SEGMENT_BYTES = 16 * 1024
_REMOTE_FETCH_BYTES_METRIC = "tierproxy_remote_fetch_bytes_total"
_REMOTE_FETCH_REQUESTS_METRIC = "tierproxy_remote_fetch_requests_total"
_BROKER_ORIGIN = {"tansu": "embedded", "kafka": "embedded", "external": "KAFKA_BOOTSTRAP"}


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """What the user asked for on the command line."""

    records: int
    topic: str
    partitions: int
    value_bytes: int
    work_dir: Path | None
    broker: BrokerChoice


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredPartition:
    """What ``tierproxy status`` reports for one partition after the pipeline ran."""

    partition: int
    remote_log_end: int | None
    segments: int
    remote_bytes: int


@dataclass(slots=True, kw_only=True)
class DemoRun:
    """State shared by the steps of one run (filled in as the steps go)."""

    options: DemoOptions
    broker: BrokerInfo | None = None
    produced_bytes: int = 0
    produce_seconds: float = 0.0
    consumed: int = 0
    consume_seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    config_path: Path | None = None
    remote_dir: Path | None = None
    tiered: list[TieredPartition] = field(default_factory=list)
    proxy_bootstrap: str = ""
    remote_fetch_bytes: float = 0.0
    remote_fetch_requests: float = 0.0
    records_by_offset: dict[int, list[int]] = field(default_factory=dict)
    """Offsets read per partition, to tell remote-tier records from broker records."""
    log_start_before: dict[int, int] = field(default_factory=dict)
    """The broker's log start per partition before tiering."""
    log_start_after: dict[int, int] = field(default_factory=dict)
    """... and after the pipeline let it drop the tiered range."""
    spark_count: int | None = None
    """Records ``format("tierproxy")`` counted in the topic (the last step)."""

    @property
    def deletes(self) -> bool:
        """Whether the broker drops tiered data (Apache Kafka) or keeps it all (Tansu)."""
        return self.broker is not None and self.broker.supports_delete_records


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="run an end-to-end demo on embedded servers",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    parser.set_defaults(handler=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    """Handler of ``tierproxy demo``; returns the exit status."""
    options = DemoOptions(
        records=args.records,
        topic=args.topic or f"tierproxy-demo-{uuid.uuid4().hex[:6]}",
        partitions=args.partitions,
        value_bytes=args.value_bytes,
        work_dir=args.work_dir,
        broker=args.broker,
    )
    console = report_console()
    # Clients retry what a fresh topic answers at first (NOT_LEADER while its leader is being
    # elected) and log it as a warning; the demo's own lines say what matters.
    logging.getLogger("storage.kafka_client").setLevel(logging.ERROR)
    demo = DemoRun(options=options)
    reporter = _Reporter(console)
    failure: str | None = None
    work_dir = _work_dir(options.work_dir)
    try:
        with reporter.step(f"prepare the broker ({options.broker})") as note:
            server = broker_from_env(
                os.environ, choice=options.broker, work_dir=work_dir / "broker"
            )
            # A temporary work directory is removed at the end (or kept and named when a
            # step fails): its log path is worth printing only when the user chose it.
            if options.work_dir is not None:
                note(f"logs in {work_dir / 'broker'}")
    except KafkaJarsError as err:
        console.print(f"[red]could not get Apache Kafka: {err}[/red]")
        return 2
    try:
        # Servers start from the main thread: their kernel death signal follows it.
        with reporter.step("start the broker") as note:
            demo.broker = server.start()
            note(f"{demo.broker.version} at {demo.broker.bootstrap}")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_kafka_steps(demo, reporter))
            _tier_steps(demo, reporter, work_dir)
            runner.run(_log_starts_after(demo, reporter))
            runner.run(_proxy_steps(demo, reporter, work_dir))
            _spark_count_step(demo, reporter, work_dir)
    except ServerStartError as err:
        failure = f"could not start a server: {err}"
    except KafkaClientError as err:
        failure = f"the broker refused: {err}"
    except PipelineError as err:
        failure = str(err)
    finally:
        with reporter.step("stop the broker"):
            server.close()
    if failure is not None or demo.mismatches:
        console.print(f"[red]{failure}[/red]" if failure else "")
        console.print(f"the work directory is kept for you to look at: {work_dir}")
        if failure is not None:
            return 2
    else:
        _remove_unless_kept(work_dir, options.work_dir)
    _print_summary(console, demo, work_dir)
    return 1 if demo.mismatches else 0


async def _kafka_steps(demo: DemoRun, reporter: _Reporter) -> None:
    assert demo.broker is not None  # the caller started it
    bootstrap, options = demo.broker.bootstrap, demo.options
    with reporter.step("create the topic") as note:
        await create_topic(bootstrap, options.topic, partitions=options.partitions)
        note(f"{options.topic} with {options.partitions} partitions")
    with reporter.step("produce") as note:
        await _produce(demo, bootstrap)
        note(f"{options.records:,} records, {_mib(demo.produced_bytes)}")
    demo.log_start_before = await _log_starts(bootstrap, options)


async def _log_starts_after(demo: DemoRun, reporter: _Reporter) -> None:
    assert demo.broker is not None
    with reporter.step("read the broker's log start (ListOffsets EARLIEST, direct)") as note:
        demo.log_start_after = await _log_starts(demo.broker.bootstrap, demo.options)
        moved = sum(demo.log_start_after.values()) - sum(demo.log_start_before.values())
        if demo.deletes:
            note(f"{moved:,} offsets are gone from the broker: only the remote tier has them")
        else:
            note("unchanged: this broker never deletes; the offload policy serves the tier")


async def _log_starts(bootstrap: str, options: DemoOptions) -> dict[int, int]:
    """Each partition's log start as the broker itself answers ListOffsets EARLIEST."""
    async with KafkaClient(bootstrap) as client:
        return await AssignedConsumer(client, options.topic, options.partitions).start_offsets()


class PipelineError(RuntimeError):
    """``tierproxy tier`` or ``tierproxy status`` failed; the message says how."""


def _work_dir(requested: Path | None) -> Path:
    """The directory for the config, remote tier and logs: ``--work-dir`` or a new one."""
    if requested is not None:
        requested.mkdir(parents=True, exist_ok=True)
        return requested
    return Path(tempfile.mkdtemp(prefix="tierproxy-demo-"))


def _remove_unless_kept(work_dir: Path, requested: Path | None) -> None:
    if requested is None:
        shutil.rmtree(work_dir, ignore_errors=True)


def _write_config(demo: DemoRun, work_dir: Path) -> Path:
    """One config file for the pipeline and the proxy: a local-directory remote tier and small
    segments for the demo topic. On a broker that deletes (Apache Kafka), the pipeline then
    moves the broker's log start past what it tiered (``local.retention.ms`` 0: drop local
    copies as soon as they are safe in the remote tier) and the proxy serves those offsets
    because the broker no longer can. On one that keeps everything (Tansu), the offload
    policy tells the proxy to serve tiered ranges from the remote tier anyway."""
    assert demo.broker is not None
    demo.remote_dir = work_dir / "remote-tier"
    path = work_dir / "tierproxy.toml"
    local = "local.retention.ms = 0\nretention.ms = -1\n" if demo.deletes else ""
    offload = "" if demo.deletes else "remote.fetch.offload.enable = true\n"
    path.write_text(
        f"""# written by `tierproxy demo`
bootstrap.servers = "{demo.broker.bootstrap}"
remote.log.storage.system.enable = true
remote.log.storage.backend = "local"
remote.log.storage.local.dir = "{demo.remote_dir}"
remote.log.metadata.topic.partitions = 3
remote.log.metadata.snapshot.dir = "{work_dir / "rlmm-snapshots"}"
tiering.spill.dir = "{work_dir / "spill"}"
{offload}
[[topics]]
pattern = "{demo.options.topic}"
remote.storage.enable = true
segment.bytes = {_segment_bytes(demo)}
{local}""",
        encoding="utf-8",
    )
    return path


def _segment_bytes(demo: DemoRun) -> int:
    """Small segments, so that every partition has several closed ones whatever --records;
    the last, still open range of each partition stays on the broker (the local tail)."""
    per_partition = demo.produced_bytes // demo.options.partitions
    return max(_MIN_SEGMENT_BYTES, per_partition // _SEGMENTS_PER_PARTITION)


def _tierproxy(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "proxy.cli", *arguments]


def _run_logged(command: list[str], log_path: Path, *, what: str) -> str:
    """Run a step's subprocess with its output in ``log_path``; its standard output.

    :raises PipelineError: with the log's tail, when it fails.
    """
    with log_path.open("wb") as log:
        done = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            timeout=_PIPELINE_TIMEOUT_S,
            check=False,
        )
        log.write(done.stdout)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        raise PipelineError(
            f"{what} exited with {done.returncode} (log: {log_path}):\n" + "\n".join(tail)
        )
    return done.stdout.decode(errors="replace")


def _tier_steps(demo: DemoRun, reporter: _Reporter, work_dir: Path) -> None:
    demo.config_path = config = _write_config(demo, work_dir)
    with reporter.step("tier closed ranges: tierproxy tier --once (Spark local[2])") as note:
        log_path = work_dir / "tier.log"
        _run_logged(
            _tierproxy("tier", "--once", "--master", "local[2]", "--config", str(config)),
            log_path,
            what="tierproxy tier",
        )
        if demo.options.work_dir is not None:
            note(f"log in {log_path}")
    with reporter.step("read the tiering status: tierproxy status") as note:
        status = subprocess.run(
            _tierproxy("status", "--json", "--config", str(config), "--topic", demo.options.topic),
            capture_output=True,
            text=True,
            timeout=_PIPELINE_TIMEOUT_S,
            check=False,
        )
        if status.returncode != 0:
            raise PipelineError(f"tierproxy status failed: {status.stderr or status.stdout}")
        for line in status.stdout.splitlines():
            row = json.loads(line)
            demo.tiered.append(
                TieredPartition(
                    partition=row["partition"],
                    remote_log_end=row["remote_log_end"],
                    segments=row["segments"],
                    remote_bytes=row["remote_bytes"],
                )
            )
        segments = sum(p.segments for p in demo.tiered)
        remote_bytes = sum(p.remote_bytes for p in demo.tiered)
        note(f"{segments} segments, {_mib(remote_bytes)} in the remote tier")


async def _proxy_steps(demo: DemoRun, reporter: _Reporter, work_dir: Path) -> None:
    assert demo.config_path is not None
    proxy = TierproxyServer(
        config=demo.config_path,
        log_path=work_dir / "serve.log",
        start_timeout_s=_PROXY_START_TIMEOUT_S,
    )
    with reporter.step("start the proxy: tierproxy serve") as note:
        proxy.start()
        demo.proxy_bootstrap = proxy.bootstrap
        note(f"clients bootstrap to {demo.proxy_bootstrap}, metrics on :{proxy.metrics_port}")
    try:
        with reporter.step("consume from offset 0 through the proxy and verify") as note:
            await _consume_and_verify(demo, demo.proxy_bootstrap)
            demo.remote_fetch_bytes = proxy.metric(_REMOTE_FETCH_BYTES_METRIC)
            demo.remote_fetch_requests = proxy.metric(_REMOTE_FETCH_REQUESTS_METRIC)
            note(f"{demo.consumed:,} records read back, {len(demo.mismatches)} problems")
    finally:
        with reporter.step("stop the proxy"):
            proxy.stop()


def _spark_count_step(demo: DemoRun, reporter: _Reporter, work_dir: Path) -> None:
    """Count the topic with the Spark data source (remote tier + the broker's tail), in a
    subprocess like the pipeline (the demo process never loads Spark), and compare."""
    assert demo.config_path is not None
    title = 'count the topic with Spark: spark.read.format("tierproxy")'
    with reporter.step(title) as note:
        log_path = work_dir / "spark-count.log"
        command = [sys.executable, "-m", "storage.spark_source.count"]
        counted = _run_logged(
            [*command, "--config", str(demo.config_path), "--topic", demo.options.topic],
            log_path,
            what="the Spark count",
        )
        result = json.loads(counted.strip().splitlines()[-1])
        demo.spark_count = int(result["records"])
        if demo.spark_count != demo.options.records:
            demo.mismatches.append(
                f"the Spark data source counted {demo.spark_count:,} records, "
                f"{demo.options.records:,} were produced"
            )
        note(
            f"{demo.spark_count:,} records in {result['slices']} Spark tasks "
            f"({demo.options.records:,} produced)"
        )


def _record(index: int, value_bytes: int) -> tuple[bytes, bytes]:
    """Record ``index``: key ``k<index>`` and a value derived from it, so any mix-up shows."""
    key = f"k{index:09d}".encode()
    seed = hashlib.sha256(key).digest()
    value = (seed * (value_bytes // len(seed) + 1))[:value_bytes]
    return key, value


async def _produce(demo: DemoRun, bootstrap: str) -> None:
    """Record ``i`` to partition ``i mod partitions``, in batches, every partition at once."""
    options = demo.options
    started = time.monotonic()

    async def fill(producer: TopicProducer, partition: int) -> None:
        indexes = range(partition, options.records, options.partitions)
        per_batch = max(1, _BATCH_BYTES // (options.value_bytes + len(_record(0, 0)[0])))
        for first in range(0, len(indexes), per_batch):
            batch = [_record(i, options.value_bytes) for i in indexes[first : first + per_batch]]
            await producer.send_batch(partition, batch)
            demo.produced_bytes += sum(len(key) + len(value) for key, value in batch)

    try:
        async with KafkaClient(bootstrap) as client:
            producer = TopicProducer(client, options.topic)
            await asyncio.gather(*(fill(producer, p) for p in range(options.partitions)))
    finally:
        demo.produce_seconds = time.monotonic() - started


async def _consume_and_verify(demo: DemoRun, bootstrap: str) -> None:
    """Read every partition from the start; each must hold its records in order, exactly."""
    options = demo.options
    expected_next = {p: p for p in range(options.partitions)}  # record index due next
    started = time.monotonic()
    client = KafkaClient(bootstrap)
    try:
        consumer = AssignedConsumer(client, options.topic, options.partitions)
        async with asyncio.timeout(_CONSUME_TIMEOUT_S):
            while demo.consumed < options.records:
                for partition, records in (await consumer.poll()).items():
                    for record in records:
                        index = expected_next[partition]
                        if (record.key, record.value) != _record(index, options.value_bytes):
                            demo.mismatches.append(
                                f"partition {partition} offset {record.offset}: "
                                f"expected record {index}, got key {record.key!r}"
                            )
                        expected_next[partition] = index + options.partitions
                        demo.records_by_offset.setdefault(partition, []).append(record.offset)
                        demo.consumed += 1
    except TimeoutError:
        demo.mismatches.append(
            f"only {demo.consumed} of {options.records} records came back "
            f"within {_CONSUME_TIMEOUT_S:.0f} s"
        )
    finally:
        demo.consume_seconds = time.monotonic() - started
        await client.close()


class _Reporter:
    """Prints one line per step: what it did and how long it took.

    On a terminal a spinner names the step while it runs (JVM and Spark start-ups take
    seconds); in a pipe or a CI log only the finished lines appear, without carriage returns.
    """

    def __init__(self, console: Console) -> None:
        self._console = console

    @contextmanager
    def step(self, title: str) -> Iterator[Any]:
        details: list[str] = []
        started = time.monotonic()
        try:
            if self._console.is_terminal:
                with self._console.status(f"{title} ..."):
                    yield details.append
            else:
                yield details.append
        except BaseException:
            self._console.print(f"[red]✗[/red] {title} [dim]({time.monotonic() - started:.2f} s)")
            raise
        detail = f": {details[-1]}" if details else ""
        elapsed = time.monotonic() - started
        self._console.print(f"[green]✓[/green] {title}{detail} [dim]({elapsed:.2f} s)")


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.2f} MiB"


def _rate(count: int, size: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{count / seconds:,.0f} records/s, {size / seconds / (1024 * 1024):.1f} MiB/s"


def _print_summary(console: Console, demo: DemoRun, work_dir: Path) -> None:
    options, broker = demo.options, demo.broker
    table = Table(title="tierproxy demo", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if broker is not None:
        origin = _BROKER_ORIGIN[broker.kind]
        table.add_row("broker", f"{broker.version} ({origin}) at {broker.bootstrap}")
        if broker.limitations():
            table.add_row("broker limits", "; ".join(broker.limitations()))
    table.add_row("topic", f"{options.topic} ({options.partitions} partitions)")
    produce_rate = _rate(options.records, demo.produced_bytes, demo.produce_seconds)
    table.add_row(
        "produced",
        f"{options.records:,} records, {_mib(demo.produced_bytes)} in "
        f"{demo.produce_seconds:.2f} s ({produce_rate})",
    )
    table.add_row(
        "consumed",
        f"{demo.consumed:,} records in {demo.consume_seconds:.2f} s "
        f"({_rate(demo.consumed, demo.produced_bytes, demo.consume_seconds)})",
    )
    verdict = (
        "[green]every record came back exactly, in order[/green]"
        if not demo.mismatches
        else f"[red]{len(demo.mismatches)} problems[/red]: " + "; ".join(demo.mismatches[:5])
    )
    table.add_row("verified", verdict)
    if demo.spark_count is not None:
        table.add_row(
            "Spark data source",
            f'{demo.spark_count:,} records counted by spark.read.format("tierproxy")',
        )
    remote, local = _records_by_tier(demo)
    segments = sum(p.segments for p in demo.tiered)
    kept = options.work_dir is not None or bool(demo.mismatches)
    table.add_row(
        "remote tier",
        f"{segments} segments, {_mib(sum(p.remote_bytes for p in demo.tiered))} in "
        + (
            str(demo.remote_dir)
            if kept
            else "a temporary local directory (removed; keep it with --work-dir)"
        ),
    )
    how = "the broker no longer has them" if demo.deletes else "offload policy"
    table.add_row(
        "served from remote tier",
        f"{remote:,} records ({_mib(int(demo.remote_fetch_bytes))} in "
        f"{demo.remote_fetch_requests:,.0f} remote reads; {how})",
    )
    table.add_row("served by the broker", f"{local:,} records (the untiered tail)")
    if kept:
        table.add_row("config and logs", str(work_dir))
    console.print(table)
    console.print(_partition_table(demo))


def _partition_table(demo: DemoRun) -> Table:
    """Per partition: the broker's log start before and after tiering, the remote log, and
    where each record read back through the proxy came from."""
    table = Table(title="per partition", title_justify="left")
    for header in (
        "partition",
        "broker log start before",
        "after",
        "remote log",
        "from remote tier",
        "from broker",
    ):
        table.add_column(header, justify="right")
    tiered = {p.partition: p for p in demo.tiered}
    for partition in range(demo.options.partitions):
        offsets = demo.records_by_offset.get(partition, [])
        remote_end = tiered[partition].remote_log_end if partition in tiered else None
        from_remote = _served_remotely(demo, partition, offsets, remote_end)
        table.add_row(
            str(partition),
            f"{demo.log_start_before.get(partition, 0):,}",
            f"{demo.log_start_after.get(partition, 0):,}",
            "-" if remote_end is None else f"0-{remote_end:,}",
            f"{from_remote:,}",
            f"{len(offsets) - from_remote:,}",
        )
    return table


def _served_remotely(
    demo: DemoRun, partition: int, offsets: list[int], remote_end: int | None
) -> int:
    """Records of ``partition`` the remote tier served: below the broker's log start where
    the broker deleted them, or (offload policy) up to the remote log end."""
    if demo.deletes:
        start = demo.log_start_after.get(partition, 0)
        return sum(1 for offset in offsets if offset < start)
    if remote_end is None:
        return 0
    return sum(1 for offset in offsets if offset <= remote_end)


def _records_by_tier(demo: DemoRun) -> tuple[int, int]:
    """Records served by the remote tier and by the broker, over all partitions."""
    tiered = {p.partition: p.remote_log_end for p in demo.tiered}
    remote = sum(
        _served_remotely(demo, partition, offsets, tiered.get(partition))
        for partition, offsets in demo.records_by_offset.items()
    )
    return remote, demo.consumed - remote
