"""The steps of ``tierproxy demo`` (whose arguments are :mod:`proxy.commands.demo`): run the
project end to end on embedded servers and say what happened.

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
``python -m storage.spark_count``), with one generated config file that the summary
names.

With ``--broker tansu`` (a broker that never deletes anything) the tiered range stays on the
broker and the proxy's offload policy serves it from the remote tier instead.

This module holds the steps; the run's state is :mod:`proxy.commands.demo_run`, the records
written and checked :mod:`proxy.commands.demo_records`, and what is printed
:mod:`proxy.commands.demo_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import uvloop

from proxy.commands.demo_records import consume_and_verify, produce
from proxy.commands.demo_report import Reporter, mib, print_summary
from proxy.commands.demo_run import DemoOptions, DemoRun, TieredPartition
from proxy.embedded import (
    ServerStartError,
    broker_from_env,
    create_topic,
)
from proxy.embedded.kafka_jars import KafkaJarsError
from proxy.embedded.tierproxy import TierproxyServer
from proxy.settings import load_settings
from storage.config import ConfigError
from storage.console import report_console
from storage.kafka_client import KafkaClient, KafkaClientError
from storage.kafka_client.consumer import AssignedConsumer

__all__ = ["run"]

_PIPELINE_TIMEOUT_S = 600.0
_PROXY_START_TIMEOUT_S = 60.0
_SEGMENTS_PER_PARTITION = 6
"""Segment size is chosen so that every partition has about this many to tier."""
_MIN_SEGMENT_BYTES = 16 * 1024
_REMOTE_FETCH_BYTES_METRIC = "tierproxy_remote_fetch_bytes_total"
_REMOTE_FETCH_REQUESTS_METRIC = "tierproxy_remote_fetch_requests_total"


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
    reporter = Reporter(console)
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
    print_summary(console, demo, work_dir)
    return 1 if demo.mismatches else 0


async def _kafka_steps(demo: DemoRun, reporter: Reporter) -> None:
    assert demo.broker is not None  # the caller started it
    bootstrap, options = demo.broker.bootstrap, demo.options
    with reporter.step("create the topic") as note:
        await create_topic(bootstrap, options.topic, partitions=options.partitions)
        note(f"{options.topic} with {options.partitions} partitions")
    with reporter.step("produce") as note:
        await produce(demo, bootstrap)
        note(f"{options.records:,} records, {mib(demo.produced_bytes)}")
    demo.log_start_before = await _log_starts(bootstrap, options)


async def _log_starts_after(demo: DemoRun, reporter: Reporter) -> None:
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
    try:
        load_settings(path)  # as tier, status and serve will: every problem at once
    except ConfigError as err:
        raise PipelineError(f"the demo wrote an invalid {path}: {err}") from err
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


def _tier_steps(demo: DemoRun, reporter: Reporter, work_dir: Path) -> None:
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
        note(f"{segments} segments, {mib(remote_bytes)} in the remote tier")


async def _proxy_steps(demo: DemoRun, reporter: Reporter, work_dir: Path) -> None:
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
            await consume_and_verify(demo, demo.proxy_bootstrap)
            demo.remote_fetch_bytes = proxy.metric(_REMOTE_FETCH_BYTES_METRIC)
            demo.remote_fetch_requests = proxy.metric(_REMOTE_FETCH_REQUESTS_METRIC)
            note(f"{demo.consumed:,} records read back, {len(demo.mismatches)} problems")
    finally:
        with reporter.step("stop the proxy"):
            proxy.stop()


def _spark_count_step(demo: DemoRun, reporter: Reporter, work_dir: Path) -> None:
    """Count the topic with the Spark data source (remote tier + the broker's tail), in a
    subprocess like the pipeline (the demo process never loads Spark), and compare."""
    assert demo.config_path is not None
    title = 'count the topic with Spark: spark.read.format("tierproxy")'
    with reporter.step(title) as note:
        log_path = work_dir / "spark-count.log"
        command = [sys.executable, "-m", "storage.spark_count"]
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
