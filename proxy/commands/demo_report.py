"""What ``tierproxy demo`` prints: one line per step while it runs, two tables at the end.

The summary says where every record read back came from (the remote tier or the broker),
computed from the offsets the consumer saw and the broker's log starts the steps recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from proxy.commands.demo_run import DemoRun

__all__ = ["Reporter", "mib", "print_summary"]

_BROKER_ORIGIN = {"tansu": "embedded", "kafka": "embedded", "external": "KAFKA_BOOTSTRAP"}


class Reporter:
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


def mib(size: int) -> str:
    return f"{size / (1024 * 1024):.2f} MiB"


def _rate(count: int, size: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{count / seconds:,.0f} records/s, {size / seconds / (1024 * 1024):.1f} MiB/s"


def print_summary(console: Console, demo: DemoRun, work_dir: Path) -> None:
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
        f"{options.records:,} records, {mib(demo.produced_bytes)} in "
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
        f"{segments} segments, {mib(sum(p.remote_bytes for p in demo.tiered))} in "
        + (
            str(demo.remote_dir)
            if kept
            else "a temporary local directory (removed; keep it with --work-dir)"
        ),
    )
    how = "the broker no longer has them" if demo.deletes else "offload policy"
    table.add_row(
        "served from remote tier",
        f"{remote:,} records ({mib(int(demo.remote_fetch_bytes))} in "
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
