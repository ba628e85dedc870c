"""How long a proxy takes to be ready with a large remote log metadata topic, against Apache
Kafka, and what each remote segment costs it in memory.

Run::

    .venv/bin/python -m bench.scale_metadata                          # 100k and 1M segments
    .venv/bin/python -m bench.scale_metadata --sizes 100000:2000 --repetitions 3
    KAFKA_BOOTSTRAP=host:9092 .venv/bin/python -m bench.scale_metadata

Set-up, per size ``SEGMENTS:PARTITIONS`` of ``--sizes``: a metadata topic of the product's
default shape (created by the product's own metadata manager: 50 partitions, ``retention.ms``
-1), into which ``SEGMENTS`` synthetic segments of one user topic with ``PARTITIONS``
partitions are written as the pipeline writes them, a RemoteLogSegmentMetadataRecord
(COPY_SEGMENT_STARTED) then a RemoteLogSegmentMetadataUpdateRecord (COPY_SEGMENT_FINISHED)
per segment, each to the metadata partition the product hashes the user partition to, by
one batching producer (2 x ``SEGMENTS`` records). Segments are contiguous, 1,000 offsets
each, with a leader change every 10,000 segments of a partition
(:func:`bench.metadata_cache.segments`). The remote tier is a local directory (nothing is
read from it).

Cases, ``--repetitions`` times each, alternating (topic, snapshot; snapshot, topic; ...):

- *topic*: ``tierproxy serve`` (one worker) with an empty snapshot directory, so it reads the
  whole metadata topic;
- *snapshot*: ``tierproxy serve`` with the snapshot directory the last *topic* run left: the
  product writes its snapshots every ``remote.log.metadata.snapshot.interval.ms`` and on a
  clean stop (SIGTERM), which is how they are made here (each run is stopped by SIGTERM and
  waited for, so its final snapshot is complete).

Measured per run: seconds from launching the process to ``/readyz`` answering 200 (polled
every 50 ms; the remote tier's ``remote_metadata`` check passes once the metadata view
caught up with the topic's end), the CPU seconds the proxy used until then (which a busy
machine does not stretch), and the proxy's RSS (VmRSS) 2 s after it is ready. Bytes per
segment: the median RSS of a case minus the median RSS of a proxy started the same way on an
empty metadata topic (``--repetitions`` runs, measured first), over ``SEGMENTS``. Each run
records the 1-minute load average when it started: the machine may be shared. Reported:
medians per size and case.

Goals: ready <= 3 s at 100,000 segments and <= 10 s at 1,000,000 from the snapshot; <= 100 B
of RSS per segment. Results: ``bench/results/scale_metadata.json`` and ``.png``
(``$TIERPROXY_BENCH_RESULTS`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.common import (
    MIB,
    bar_chart,
    cpu_seconds,
    git_state,
    median,
    produce_retrying,
    rss_bytes,
    save_json,
)
from bench.metadata_cache import segments
from bench.tiering import remote_tier, servers_from_env, tier_settings
from protocol.metadata_records import encode_metadata_record
from protocol.murmur2 import metadata_partition_for
from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer, proxy_process
from storage.model import RemoteLogSegmentState, TopicIdPartition
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.records import segment_record, segment_update_record
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager

TOPIC = "topic"
SNAPSHOT = "snapshot"
METADATA_PARTITIONS = 50
"""The product's default (``remote.log.metadata.topic.partitions``, KIP-405's 50)."""
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 600.0
SETTLE_S = 2.0
GOALS = {100_000: 3.0, 1_000_000: 10.0}
"""Seconds to ready from the snapshot, by segment count."""
GOAL_BYTES_PER_SEGMENT = 100
RESTORED = re.compile(r"loaded (\d+) segments of \d+ partitions from")
"""The proxy's ``metadata.snapshots.loaded`` line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Size:
    segments: int
    partitions: int

    @property
    def label(self) -> str:
        return f"{self.segments:,} segments / {self.partitions:,} partitions"


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    case: str
    repetition: int
    ready_seconds: float
    cpu_seconds: float
    """CPU the proxy spent from its launch to ready: the figure the machine's load does not
    stretch."""
    rss_mib: float
    restored_segments: int
    """Segments the proxy loaded from snapshots, as its log says (0: none)."""
    load_average_1m: float


def parse_size(text: str) -> Size:
    segments_text, _, partitions_text = text.partition(":")
    return Size(segments=int(segments_text), partitions=int(partitions_text or "2000"))


# -- the metadata topic ------------------------------------------------------------------------


async def create_metadata_topic(broker: BrokerInfo, name: str) -> None:
    """The metadata topic, created as the product creates it (its own manager)."""
    config = RemoteLogMetadataConfig(
        topic_name=name, topic_partitions=METADATA_PARTITIONS, snapshot_dir=""
    )
    async with TopicBasedRemoteLogMetadataManager(config, bootstrap_servers=broker.bootstrap):
        pass


def write_segments(bootstrap: str, metadata_topic: str, size: Size, processes: int) -> float:
    """Produce ``size.segments`` copies (STARTED then FINISHED) of one user topic spread over
    ``size.partitions`` partitions, in ``processes`` processes (each with its own producer
    and its own share of the user partitions, so each partition's records stay in order);
    the seconds it took."""
    topic_id = uuid.uuid4()
    shares = [range(i, size.partitions, processes) for i in range(processes)]
    started = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=processes, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        written = pool.map(
            _write_share,
            [bootstrap] * processes,
            [metadata_topic] * processes,
            [topic_id] * processes,
            shares,
            [size.segments // size.partitions] * processes,
        )
        total = sum(written)
    if total != 2 * (size.segments // size.partitions) * size.partitions:
        raise RuntimeError(f"{total} metadata records written, not all of them")
    return time.perf_counter() - started


def _write_share(
    bootstrap: str, metadata_topic: str, topic_id: uuid.UUID, partitions: range, count: int
) -> int:
    """Produce ``count`` copies of each user partition of ``partitions``; records written."""
    failures: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(error)

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": MIB,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
            "acks": "all",
            "on_delivery": delivered,
        }
    )
    written = 0
    for partition in partitions:
        tp = TopicIdPartition(topic_id=topic_id, topic="bench-scale", partition=partition)
        target = metadata_partition_for(str(tp), METADATA_PARTITIONS)
        for finished in segments(tp, count):
            copy = segment_record(
                replace(finished, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
            )
            done = segment_update_record(
                finished, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, finished.event_timestamp
            )
            for record in (copy, done):
                value = encode_metadata_record(record)
                produce_retrying(producer, metadata_topic, key=None, value=value, partition=target)
                written += 1
        producer.poll(0)
    if producer.flush(600) or failures:
        raise RuntimeError(f"metadata records not delivered: {failures[:3]}")
    return written


# -- one proxy run ----------------------------------------------------------------------------


def proxy(broker: BrokerInfo, work: Path, settings: dict[str, Any]) -> TierproxyServer:
    """A (not started) proxy whose config and log are in a directory of its own under
    ``work``, so its log holds its run alone."""
    log_dir = work / "logs" / uuid.uuid4().hex[:8]
    log_dir.mkdir(parents=True)
    return proxy_process(broker, log_dir, settings)


def measure(server: TierproxyServer, case: str, repetition: int) -> Run:
    """Launch ``server``, time it to ``/readyz`` 200, read its RSS, and stop it by SIGTERM,
    waiting for it to exit (it writes its last snapshot on the way out)."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    server.process.start()
    try:
        server.process.wait_ready(
            lambda: server.health("/readyz")[0] == 200, timeout_s=READY_TIMEOUT_S
        )
        ready = time.perf_counter() - started
        pid = server.process.pid
        assert pid is not None
        cpu = cpu_seconds(pid)
        time.sleep(SETTLE_S)
        rss = rss_bytes(pid) / MIB
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while server.process.running and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        server.stop()
    restored = RESTORED.search(server.process.log_path.read_text(errors="replace"))
    run = Run(
        case=case,
        repetition=repetition,
        ready_seconds=ready,
        cpu_seconds=cpu,
        rss_mib=rss,
        restored_segments=int(restored[1]) if restored else 0,
        load_average_1m=load,
    )
    print(
        f"  {case:8} #{repetition}: ready in {ready:6.2f} s ({cpu:5.2f} CPU-s), "
        f"RSS {rss:6.1f} MiB, {run.restored_segments:,} segments from snapshots (load {load:.1f})",
        flush=True,
    )
    return run


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-scale-metadata-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def runs_for(
    broker: BrokerInfo, settings: dict[str, Any], work: Path, repetitions: int
) -> list[Run]:
    """``repetitions`` of each case, alternating; each topic run leaves the snapshot the
    following snapshot runs start from."""
    snapshots = work / "snapshots"
    runs: list[Run] = []
    for repetition in range(repetitions):
        order = (TOPIC, SNAPSHOT) if repetition % 2 == 0 else (SNAPSHOT, TOPIC)
        for case in order:
            if case == TOPIC:
                fresh = work / f"snapshots-{repetition}"
                runs.append(measure(_with_dir(broker, work, settings, fresh), case, repetition))
                shutil.rmtree(snapshots, ignore_errors=True)
                fresh.rename(snapshots)
            else:
                runs.append(measure(_with_dir(broker, work, settings, snapshots), case, repetition))
    return runs


def _with_dir(
    broker: BrokerInfo, work: Path, settings: dict[str, Any], directory: Path
) -> TierproxyServer:
    return proxy(broker, work, {**settings, "remote.log.metadata.snapshot.dir": str(directory)})


def summarise(
    size: Size, runs: Sequence[Run], empty_rss_mib: float, snapshot_mib: float
) -> dict[str, Any]:
    summary: dict[str, Any] = {"segments": size.segments, "partitions": size.partitions}
    for case in (TOPIC, SNAPSHOT):
        mine = [run for run in runs if run.case == case]
        rss = median([run.rss_mib for run in mine])
        summary[f"{case}_ready_seconds"] = median([run.ready_seconds for run in mine])
        summary[f"{case}_ready_cpu_seconds"] = median([run.cpu_seconds for run in mine])
        summary[f"{case}_rss_mib"] = rss
        summary[f"{case}_bytes_per_segment"] = (rss - empty_rss_mib) * MIB / size.segments
        summary[f"{case}_load_average_1m"] = median([run.load_average_1m for run in mine])
        summary[f"{case}_restored_segments"] = min(run.restored_segments for run in mine)
    summary["snapshot_dir_mib"] = snapshot_mib
    if size.segments in GOALS:
        summary["goal_snapshot_ready_seconds"] = GOALS[size.segments]
    summary["goal_bytes_per_segment"] = GOAL_BYTES_PER_SEGMENT
    return summary


def directory_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / MIB


# -- run ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every size's runs; the results file is rewritten after each size, so a run cut
    short keeps what it measured."""
    summary: dict[str, Any] = {}
    all_runs: dict[str, list[dict[str, Any]]] = {}
    produced: dict[str, float] = {}
    result: dict[str, Any] = {
        **git_state(),
        "benchmark": "scale_metadata",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repetitions": args.repetitions,
        "metadata_topic_partitions": METADATA_PARTITIONS,
        "cpus": os.cpu_count() or 0,
        "summary": summary,
        "write_seconds": produced,
        "runs": all_runs,
    }
    with (
        servers_from_env(with_s3=False) as servers,
        remote_tier("local", None, "bench-scale-metadata") as target,
    ):
        broker = servers.broker
        result["broker"] = broker.kind
        empty_topic = f"__rlm-bench-scale-empty-{uuid.uuid4().hex[:8]}"
        await create_metadata_topic(broker, empty_topic)
        with scratch() as work:
            print("empty metadata topic:", flush=True)
            empty = runs_for(broker, tier_settings_for(target, empty_topic), work, args.repetitions)
        empty_rss = median([run.rss_mib for run in empty])
        result["empty_topic_rss_mib"] = empty_rss
        result["empty_topic_ready_seconds"] = median([run.ready_seconds for run in empty])
        result["empty_topic_ready_cpu_seconds"] = median([run.cpu_seconds for run in empty])
        all_runs["empty"] = [asdict(run) for run in empty]
        for size in args.sizes:
            metadata_topic = f"__rlm-bench-scale-{uuid.uuid4().hex[:8]}"
            await create_metadata_topic(broker, metadata_topic)
            seconds = await asyncio.to_thread(
                write_segments, broker.bootstrap, metadata_topic, size, args.write_processes
            )
            produced[size.label] = seconds
            print(f"{size.label}: written in {seconds:.1f} s", flush=True)
            with scratch() as work:
                runs = runs_for(
                    broker, tier_settings_for(target, metadata_topic), work, args.repetitions
                )
                snapshot_mib = directory_mib(work / "snapshots")
            summary[size.label] = summarise(size, runs, empty_rss, snapshot_mib)
            all_runs[size.label] = [asdict(run) for run in runs]
            print(f"{size.label}: {summary[size.label]}", flush=True)
            save_json("scale_metadata", result)
    return result


def tier_settings_for(target: Any, metadata_topic: str) -> dict[str, Any]:
    return {
        **tier_settings(target, metadata_topic),
        "remote.log.metadata.topic.partitions": METADATA_PARTITIONS,
        "remote.log.metadata.initialization.timeout.ms": int(READY_TIMEOUT_S * 1000),
        "log.level": "INFO",
    }


def plot(result: dict[str, Any]) -> Path:
    summary = result["summary"]
    return bar_chart(
        "scale_metadata",
        [
            (
                "start to /readyz 200",
                "seconds",
                {
                    label: {
                        "from the topic": figures["topic_ready_seconds"],
                        "from the snapshot": figures["snapshot_ready_seconds"],
                    }
                    for label, figures in summary.items()
                },
            ),
            (
                "RSS growth per segment",
                "bytes",
                {
                    label: {
                        "from the topic": figures["topic_bytes_per_segment"],
                        "from the snapshot": figures["snapshot_bytes_per_segment"],
                    }
                    for label, figures in summary.items()
                },
            ),
        ],
        title="tierproxy: ready with a large metadata topic",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=parse_size,
        nargs="+",
        default=[parse_size("100000:2000"), parse_size("1000000:2000")],
        help="SEGMENTS:PARTITIONS of the user topic, one metadata topic each",
    )
    parser.add_argument("--repetitions", type=int, default=3, help="runs of each case")
    parser.add_argument(
        "--write-processes", type=int, default=2, help="processes writing the metadata topic"
    )
    args = parser.parse_args()
    result = asyncio.run(run(args))
    path = save_json("scale_metadata", result)
    print(f"results: {path} and {plot(result)}")


if __name__ == "__main__":
    main()
