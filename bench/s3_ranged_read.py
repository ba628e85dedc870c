"""Ranged-read throughput of the S3 remote storage manager against SeaweedFS, with the local
directory backend as the baseline measured in the same run.

Question: how fast can the proxy's remote reader pull ``.log`` ranges out of object storage,
for the range sizes a Fetch asks for (1 MiB is Kafka's ``max.partition.fetch.bytes`` default,
8 MiB a large fetch), compared with reading the same ranges from a local directory?

Run::

    .venv/bin/python -m bench.s3_ranged_read            # embedded SeaweedFS, 128 MiB object
    .venv/bin/python -m bench.s3_ranged_read --object-mib 256 --pairs 7 --concurrency 1 4
    S3_ENDPOINT=http://host:8333 .venv/bin/python -m bench.s3_ranged_read   # any S3 endpoint

One segment of random bytes is stored in both backends (multipart upload to S3). For every
range size and number of reads in flight, rounds alternate local, S3, local, S3, ...
(``--pairs`` pairs); each round reads ``--round-mib`` worth of ranges at random offsets through
``fetch_log_segment``. Reported per cell: the median MiB/s of each backend, the median of the
per-pair ratios S3/local, and CPU seconds per GiB read, of this process (client) and of the
SeaweedFS process (server). Data is warm: just written, so the local file and SeaweedFS's volume
files sit in the page cache. Everything shares the machine's cores, client and server included.
Results go to ``bench/results/s3_ranged_read.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import RESULTS
from protocol.metadata_records import RemoteLogSegmentState
from proxy.embedded.info import S3Info
from proxy.embedded.s3 import create_bucket, delete_bucket, s3_info_from_env
from proxy.embedded.seaweedfs import SeaweedFS
from storage.model import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.s3 import S3RemoteStorage

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    backend: str
    range_mib: int
    concurrency: int
    pair: int
    mib_per_s: float
    client_cpu_s_per_gib: float
    server_cpu_s_per_gib: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    range_mib: int
    concurrency: int
    local_mib_per_s: float
    s3_mib_per_s: float
    ratio_s3_to_local: float
    local_client_cpu_s_per_gib: float
    s3_client_cpu_s_per_gib: float
    s3_server_cpu_s_per_gib: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    object_size: int
    range_sizes_mib: tuple[int, ...]
    concurrencies: tuple[int, ...]
    pairs: int
    round_bytes: int
    seed: int


@contextlib.contextmanager
def s3_server() -> Iterator[tuple[S3Info, int | None]]:
    """``S3_ENDPOINT`` if given (its pid unknown), else an embedded SeaweedFS and its pid."""
    external = s3_info_from_env(os.environ)
    if external is not None:
        yield external, None
        return
    with SeaweedFS() as server:
        info = server.start()
        yield info, server.pid


def segment_metadata() -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(topic_id=uuid.uuid4(), topic="bench", partition=0)
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId.generate(tip),
        start_offset=0,
        end_offset=0,
        max_timestamp=0,
        leader_epoch=0,
        event_timestamp=0,
        segment_leader_epochs=((0, 0),),
        segment_size_in_bytes=0,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )


def client_cpu_seconds() -> float:
    """CPU seconds of this process: aiobotocore, aiohttp, the event loop, the file threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of the S3 server process from /proc (0 for an external endpoint)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def read_round(
    storage: RemoteStorageManager,
    metadata: RemoteLogSegmentMetadata,
    starts: list[int],
    range_size: int,
    concurrency: int,
) -> int:
    """Read a range at each of ``starts`` with ``concurrency`` reads in flight; bytes read."""
    queue = iter(starts)
    read = 0

    async def worker() -> None:
        nonlocal read
        for start in queue:
            data = await storage.fetch_log_segment(metadata, start, start + range_size)
            if len(data) != range_size:
                raise AssertionError(f"short read: {len(data)} of {range_size} bytes")
            read += len(data)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return read


async def measure(
    backends: dict[str, RemoteStorageManager],
    metadata: RemoteLogSegmentMetadata,
    plan: Plan,
    server_pid: int | None,
) -> list[Round]:
    rng = random.Random(plan.seed)
    rounds = []
    for range_mib in plan.range_sizes_mib:
        range_size = range_mib * MIB
        for concurrency in plan.concurrencies:
            count = max(plan.round_bytes // range_size, concurrency)
            for pair in range(plan.pairs):
                starts = [rng.randrange(plan.object_size - range_size + 1) for _ in range(count)]
                for name, storage in backends.items():
                    client_before = client_cpu_seconds()
                    server_before = server_cpu_seconds(server_pid)
                    wall_before = time.perf_counter()
                    read = await read_round(storage, metadata, starts, range_size, concurrency)
                    wall = time.perf_counter() - wall_before
                    gib = read / GIB
                    result = Round(
                        backend=name,
                        range_mib=range_mib,
                        concurrency=concurrency,
                        pair=pair,
                        mib_per_s=read / MIB / wall,
                        client_cpu_s_per_gib=(client_cpu_seconds() - client_before) / gib,
                        server_cpu_s_per_gib=(server_cpu_seconds(server_pid) - server_before) / gib,
                    )
                    rounds.append(result)
                    print(
                        f"{name:5} {range_mib} MiB x{concurrency} pair {pair}: "
                        f"{result.mib_per_s:8.1f} MiB/s, client "
                        f"{result.client_cpu_s_per_gib:5.2f} / server "
                        f"{result.server_cpu_s_per_gib:5.2f} CPU s/GiB",
                        file=sys.stderr,
                    )
    return rounds


async def run(plan: Plan, info: S3Info, server_pid: int | None, bucket: str) -> list[Round]:
    metadata = segment_metadata()
    data = LogSegmentData(
        log=os.urandom(plan.object_size),
        offset_index=b"",
        time_index=b"",
        transaction_index=b"",
        producer_snapshot=b"",
        leader_epoch_checkpoint=b"",
    )
    config = RemoteStorageConfig(
        backend="s3",
        s3_bucket=bucket,
        s3_endpoint=info.endpoint_url,
        s3_region=info.region,
        s3_access_key_id=info.access_key,
        s3_secret_access_key=info.secret_key,
        s3_path_style_access=True,
        s3_max_connections=max(plan.concurrencies) * 2,
    )
    with tempfile.TemporaryDirectory(prefix="bench-local-rsm-") as local_dir:
        backends: dict[str, RemoteStorageManager] = {
            "local": LocalRemoteStorage(local_dir),
            "s3": S3RemoteStorage(config),
        }
        try:
            started = time.perf_counter()
            await backends["s3"].copy_log_segment(metadata, data)
            upload_s = time.perf_counter() - started
            print(
                f"uploaded {plan.object_size // MIB} MiB to S3 in {upload_s:.2f} s "
                f"({plan.object_size / MIB / upload_s:.0f} MiB/s)",
                file=sys.stderr,
            )
            await backends["local"].copy_log_segment(metadata, data)
            return await measure(backends, metadata, plan, server_pid)
        finally:
            for storage in backends.values():
                await storage.close()


def summarise(rounds: list[Round]) -> list[Cell]:
    cells = []
    for range_mib, concurrency in sorted({(r.range_mib, r.concurrency) for r in rounds}):
        mine = [r for r in rounds if (r.range_mib, r.concurrency) == (range_mib, concurrency)]
        local = {r.pair: r for r in mine if r.backend == "local"}
        s3 = {r.pair: r for r in mine if r.backend == "s3"}
        cells.append(
            Cell(
                range_mib=range_mib,
                concurrency=concurrency,
                local_mib_per_s=statistics.median(r.mib_per_s for r in local.values()),
                s3_mib_per_s=statistics.median(r.mib_per_s for r in s3.values()),
                ratio_s3_to_local=statistics.median(
                    s3[pair].mib_per_s / local[pair].mib_per_s for pair in local
                ),
                local_client_cpu_s_per_gib=statistics.median(
                    r.client_cpu_s_per_gib for r in local.values()
                ),
                s3_client_cpu_s_per_gib=statistics.median(
                    r.client_cpu_s_per_gib for r in s3.values()
                ),
                s3_server_cpu_s_per_gib=statistics.median(
                    r.server_cpu_s_per_gib for r in s3.values()
                ),
            )
        )
    return cells


def plot(cells: list[Cell], path: Path, object_mib: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    concurrencies = sorted({c.concurrency for c in cells})
    figure, axes = plt.subplots(
        1, len(concurrencies), figsize=(5 * len(concurrencies), 4), squeeze=False
    )
    for axis, concurrency in zip(axes[0], concurrencies, strict=True):
        mine = [c for c in cells if c.concurrency == concurrency]
        positions = list(range(len(mine)))
        local = [c.local_mib_per_s for c in mine]
        s3 = [c.s3_mib_per_s for c in mine]
        axis.bar([p - 0.2 for p in positions], local, 0.4, label="local directory")
        axis.bar([p + 0.2 for p in positions], s3, 0.4, label="S3 (SeaweedFS)")
        for position, cell in zip(positions, mine, strict=True):
            axis.annotate(
                f"{cell.s3_mib_per_s:.0f} ({cell.ratio_s3_to_local:.2f}x)",
                (position + 0.2, cell.s3_mib_per_s),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        axis.set_xticks(positions, [f"{c.range_mib} MiB" for c in mine])
        axis.set_xlabel("range size")
        axis.set_yscale("log")
        axis.set_ylabel("MiB/s (median, log scale)")
        axis.set_title(f"{concurrency} read(s) in flight, {object_mib} MiB object, warm")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--object-mib", type=int, default=128, help="object size (64-256)")
    parser.add_argument("--range-mib", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--pairs", type=int, default=5, help="local/S3 round pairs per cell")
    parser.add_argument("--round-mib", type=int, default=128, help="bytes read per round")
    parser.add_argument("--seed", type=int, default=405)
    args = parser.parse_args()
    plan = Plan(
        object_size=args.object_mib * MIB,
        range_sizes_mib=tuple(args.range_mib),
        concurrencies=tuple(args.concurrency),
        pairs=args.pairs,
        round_bytes=args.round_mib * MIB,
        seed=args.seed,
    )
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    with s3_server() as (info, server_pid):
        create_bucket(info, bucket)
        try:
            rounds = asyncio.run(run(plan, info, server_pid, bucket))
        finally:
            delete_bucket(info, bucket)
    cells = summarise(rounds)
    RESULTS.mkdir(exist_ok=True)
    result = {
        "benchmark": "s3_ranged_read",
        "s3": info.kind,
        "object_mib": args.object_mib,
        "round_mib": args.round_mib,
        "pairs": args.pairs,
        "data": "warm (page cache)",
        "cpu_count": os.cpu_count(),
        "cells": [asdict(c) for c in cells],
        "rounds": [asdict(r) for r in rounds],
    }
    (RESULTS / "s3_ranged_read.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(cells, RESULTS / "s3_ranged_read.png", args.object_mib)
    print(
        f"{'range':>6} {'in flight':>9} {'local MiB/s':>12} {'S3 MiB/s':>9} {'S3/local':>9} "
        f"{'S3 client CPU s/GiB':>20} {'server CPU s/GiB':>17}"
    )
    for c in cells:
        print(
            f"{c.range_mib:>4} M {c.concurrency:>9} {c.local_mib_per_s:>12.1f} "
            f"{c.s3_mib_per_s:>9.1f} {c.ratio_s3_to_local:>9.3f} "
            f"{c.s3_client_cpu_s_per_gib:>20.2f} {c.s3_server_cpu_s_per_gib:>17.2f}"
        )


if __name__ == "__main__":
    main()
