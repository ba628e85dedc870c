"""CPU seconds to restore the remote log metadata cache from its snapshots, in process.

Question: how much of a proxy's start from the metadata snapshot is the restore itself
(reading, checking and decoding the flat files, filling the cache, building each
partition's lineage), without a broker, a proxy or the metadata topic around it?

Run::

    .venv/bin/python -m bench.snapshot_restore build DIR --segments 100000 --partitions 2000
    .venv/bin/python -m bench.snapshot_restore load DIR --repetitions 3

``build`` fills a cache with ``--segments`` synthetic segments of one topic spread evenly
over ``--partitions`` partitions (:func:`bench.metadata_cache.segments`: contiguous,
finished, 1,000 offsets each, a leader change every 10,000 segments of a partition) and
writes its snapshots with the product's own writer (:class:`SnapshotStore`) into ``DIR``,
for a metadata topic of 50 partitions. ``load`` restores them into an empty cache
``--repetitions`` times, each in a fresh cache, and prints the CPU seconds
(``time.process_time``) and wall seconds of each :meth:`SnapshotStore.load`. The files
have the snapshot format, so the same directory can be loaded by another version of the
product (run ``load`` with that version first on ``PYTHONPATH``) to compare.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from pathlib import Path

from bench.metadata_cache import segments
from storage.model import TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.snapshot import SnapshotStore, StateBinding

METADATA_PARTITIONS = 50
BINDING = StateBinding(
    cluster_id="bench",
    metadata_topic="__remote_log_metadata",
    metadata_topic_id=uuid.UUID(int=1),
    remote_storage="bench",
)
ENDS = dict.fromkeys(range(METADATA_PARTITIONS), 1)


def build(directory: Path, segment_count: int, partitions: int) -> None:
    cache = RemoteLogMetadataCache()
    topic_id = uuid.uuid4()
    for partition in range(partitions):
        tp = TopicIdPartition(topic_id=topic_id, topic="bench", partition=partition)
        cache.restore_partition(tp, segments(tp, segment_count // partitions), None)
    store = SnapshotStore(directory, METADATA_PARTITIONS)
    store.load(RemoteLogMetadataCache(), binding=BINDING, ends=ENDS)  # binds the directory
    positions = dict.fromkeys(range(METADATA_PARTITIONS), 0)
    store.write(store.plan(cache, positions, cache.partitions()))
    print(f"wrote snapshots of {len(cache):,} segments over {partitions:,} partitions")


def load(directory: Path, repetitions: int) -> None:
    store = SnapshotStore(directory, METADATA_PARTITIONS)
    cpu: list[float] = []
    for repetition in range(repetitions):
        cache = RemoteLogMetadataCache()
        gc.collect()
        wall_started, cpu_started = time.perf_counter(), time.process_time()
        restored = store.load(cache, binding=BINDING, ends=ENDS)
        cpu.append(time.process_time() - cpu_started)
        wall = time.perf_counter() - wall_started
        print(
            f"run {repetition}: {len(cache):,} segments of {len(restored.applied_through):,} "
            f"partitions in {cpu[-1]:.2f} s CPU ({wall:.2f} s wall), "
            f"{cpu[-1] / max(len(cache), 1) * 1e6:.1f} us CPU per segment"
        )
        del cache
    print(f"median: {statistics.median(cpu):.2f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    making = commands.add_parser("build", help="write synthetic snapshots into DIR")
    making.add_argument("directory", type=Path)
    making.add_argument("--segments", type=int, default=100_000)
    making.add_argument("--partitions", type=int, default=2_000)
    loading = commands.add_parser("load", help="time restoring the snapshots in DIR")
    loading.add_argument("directory", type=Path)
    loading.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.command == "build":
        build(args.directory, args.segments, args.partitions)
    else:
        load(args.directory, args.repetitions)


if __name__ == "__main__":
    main()
