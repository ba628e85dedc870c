"""Memory per segment and lookup latency of the remote log metadata cache at 1,000,000 segments.

Question: does :class:`storage.rlmm.cache.RemoteLogMetadataCache` stay within KIP-405's
estimate of ~100 bytes per remote segment entry, and how long does a Fetch's segment lookup
take, compared with a straightforward Python port of Kafka's cache (a dict of frozen
``RemoteLogSegmentMetadata`` objects plus, per leader epoch, a sorted offset → segment-id map:
``RemoteLogMetadataCache`` + ``RemoteLogLeaderEpochState``)?

Run::

    .venv/bin/python -m bench.metadata_cache                     # 1,000,000 segments
    .venv/bin/python -m bench.metadata_cache --segments 200000 --pairs 3

Layouts, each filled through the cache's event path (COPY_SEGMENT_STARTED then
COPY_SEGMENT_FINISHED per segment, as the consumer applies them): one partition with all the
segments, and 1,000 partitions sharing them. Leaders change every 10,000 segments of a
partition, so a few segments span two epochs. Memory is the growth of the resident set
(``/proc/self/statm``, after ``gc.collect()``) of a freshly spawned interpreter while it fills
one cache, divided by the segment count; the baseline is measured the same way in the same
run. Lookups: ``--lookups`` random
offsets per round through ``segment_for(tp, offset, lineage)`` with the partition's own
lineage; rounds alternate cache, baseline, cache, ... (``--pairs`` pairs) and report the median
over rounds of each round's p50 and p99 (``perf_counter_ns`` per call), and the median of the
per-pair ratios. Also timed: applying events, the lineage upkeep for a late duplicate copy
in the middle of the partition and for deleting the newest segment, and writing and loading
the single partition's snapshot. Results go to
``bench/results/metadata_cache.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.common import RESULTS
from protocol.indexes.leader_epoch_checkpoint import EpochEntry, epoch_for_offset
from protocol.murmur2 import metadata_partition_for
from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.snapshot import SnapshotStore, StateBinding

KIP_405_BYTES_PER_ENTRY = 100
SEGMENT_OFFSETS = 1_000
EPOCH_EVERY = 10_000
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    layout: str
    implementation: str
    segments: int
    bytes_per_entry: float
    load_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    implementation: str
    pair: int
    p50_us: float
    p99_us: float


class KafkaStyleCache:
    """The baseline: Kafka's cache structure in plain Python objects (one partition)."""

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, tuple[list[int], list[uuid.UUID]]] = {}

    def add(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.by_id[metadata.segment_id.id] = metadata
        epochs = metadata.segment_leader_epochs
        for epoch, start in epochs:
            starts, ids = self.epochs.setdefault(epoch, ([], []))
            first = max(start, metadata.start_offset)
            position = bisect.bisect_right(starts, first)
            starts.insert(position, first)
            ids.insert(position, metadata.segment_id.id)

    def segment_for(
        self, offset: int, lineage: tuple[EpochEntry, ...]
    ) -> RemoteLogSegmentMetadata | None:
        epoch = epoch_for_offset(lineage, offset)
        if epoch is None or epoch not in self.epochs:
            return None
        starts, ids = self.epochs[epoch]
        position = bisect.bisect_right(starts, offset) - 1
        if position < 0:
            return None
        metadata = self.by_id[ids[position]]
        following = [o for e, o in metadata.segment_leader_epochs if e > epoch]
        last = following[0] - 1 if following else metadata.end_offset
        return metadata if offset <= last else None


def segments(tp: TopicIdPartition, count: int) -> Iterator[RemoteLogSegmentMetadata]:
    """``count`` contiguous finished segments; the leader changes every ``EPOCH_EVERY``, in
    the middle of a segment."""
    for i in range(count):
        start = i * SEGMENT_OFFSETS
        epoch = i // EPOCH_EVERY
        epochs: tuple[tuple[int, int], ...] = ((epoch, start),)
        if i % EPOCH_EVERY == EPOCH_EVERY - 1:
            epochs = ((epoch, start), (epoch + 1, start + SEGMENT_OFFSETS // 2))
        yield RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId(topic_id_partition=tp, id=uuid.uuid4()),
            start_offset=start,
            end_offset=start + SEGMENT_OFFSETS - 1,
            max_timestamp=1_700_000_000_000 + i * 1000,
            leader_epoch=epochs[-1][0],
            event_timestamp=1_700_000_000_000 + i * 1000 + 1,
            segment_leader_epochs=epochs,
            segment_size_in_bytes=1 << 30,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        )


def apply_events(cache: RemoteLogMetadataCache, metadata: RemoteLogSegmentMetadata) -> None:
    cache.add_segment(replace(metadata, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED))
    cache.update_segment(
        metadata.segment_id,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        leader_epoch=metadata.leader_epoch,
        event_timestamp=metadata.event_timestamp,
    )


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def fill_compact(partitions: int, per_partition: int) -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache()
    topic_id = uuid.uuid4()
    for partition in range(partitions):
        tp = TopicIdPartition(topic_id=topic_id, topic="bench", partition=partition)
        for metadata in segments(tp, per_partition):
            apply_events(cache, metadata)
    return cache


def fill_baseline(partitions: int, per_partition: int) -> KafkaStyleCache:
    assert partitions == 1, "the baseline holds one partition"
    baseline = KafkaStyleCache()
    tp = TopicIdPartition(topic_id=uuid.uuid4(), topic="bench", partition=0)
    for metadata in segments(tp, per_partition):
        baseline.add(metadata)
    return baseline


FILLS: dict[str, Callable[[int, int], object]] = {
    "tierproxy": fill_compact,
    "kafka-style": fill_baseline,
}


def _grow(implementation: str, partitions: int, per_partition: int) -> tuple[int, float]:
    """Fill one cache in this (fresh) process: RSS growth in bytes and seconds taken."""
    before = rss()
    started = time.perf_counter()
    built = FILLS[implementation](partitions, per_partition)
    seconds = time.perf_counter() - started
    grown = rss() - before
    del built
    return grown, seconds


def measure(implementation: str, partitions: int, per_partition: int) -> Memory:
    """Memory of one filled cache, measured in a new interpreter so that nothing freed
    earlier in this run is reused and hides the growth."""
    with ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        grown, seconds = pool.submit(_grow, implementation, partitions, per_partition).result()
    count = partitions * per_partition
    layout = f"{partitions:,} partition{'s' if partitions > 1 else ''} x {per_partition:,}"
    memory = Memory(
        layout=layout,
        implementation=implementation,
        segments=count,
        bytes_per_entry=grown / count,
        load_seconds=seconds,
    )
    print(
        f"{layout:>28} {implementation:>11}: {memory.bytes_per_entry:6.1f} B/entry, "
        f"loaded in {seconds:5.1f} s",
        flush=True,
    )
    return memory


def latencies(lookup: Callable[[int], object], offsets: list[int]) -> tuple[float, float]:
    timings = []
    clock = time.perf_counter_ns
    for offset in offsets:
        started = clock()
        found = lookup(offset)
        timings.append(clock() - started)
        assert found is not None
    timings.sort()
    return timings[len(timings) // 2] / 1000, timings[int(len(timings) * 0.99)] / 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1_000, help="of the spread layout")
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    count = args.segments
    memory = [
        measure("tierproxy", 1, count),
        measure("kafka-style", 1, count),
        measure("tierproxy", args.partitions, count // args.partitions),
    ]
    cache = fill_compact(1, count)
    (tp,) = cache.partitions()
    baseline = fill_baseline(1, count)
    rounds = compare_lookups(cache, baseline, tp, count, args)
    del baseline
    timings = rebuild_and_snapshot(cache, tp, count)
    report(memory, rounds, timings, args)


def compare_lookups(
    cache: RemoteLogMetadataCache,
    baseline: KafkaStyleCache,
    tp: TopicIdPartition,
    count: int,
    args: argparse.Namespace,
) -> list[Latency]:
    """Alternate lookup rounds between the cache and the baseline, on the same offsets."""
    lineage = cache.lineage(tp)
    assert lineage == tuple(
        EpochEntry(epoch=e, start_offset=epoch_start(e)) for e in range(count // EPOCH_EVERY + 1)
    )
    end = cache.remote_log_end_offset(tp)
    assert end is not None
    rng = random.Random(405)
    rounds: list[Latency] = []
    for pair in range(args.pairs):
        offsets = [rng.randrange(end + 1) for _ in range(args.lookups)]
        for implementation, lookup in (
            ("tierproxy", lambda o: cache.segment_for(tp, o, lineage)),
            ("kafka-style", lambda o: baseline.segment_for(o, lineage)),
        ):
            p50, p99 = latencies(lookup, offsets)
            rounds.append(Latency(implementation=implementation, pair=pair, p50_us=p50, p99_us=p99))
            print(
                f"lookups, pair {pair}, {implementation:>11}: p50 {p50:6.2f} us, p99 {p99:6.2f} us"
            )
    return rounds


def epoch_start(epoch: int) -> int:
    """Where ``segments`` starts ``epoch``: half way into the last segment of the previous."""
    return 0 if epoch == 0 else (epoch * EPOCH_EVERY - 1) * SEGMENT_OFFSETS + SEGMENT_OFFSETS // 2


def rebuild_and_snapshot(
    cache: RemoteLogMetadataCache, tp: TopicIdPartition, count: int
) -> dict[str, float]:
    """Time the lineage upkeep for a late duplicate copy and for deleting the newest segment
    (both splice the chain), and a snapshot write and load of the whole partition."""
    started = time.perf_counter()
    apply_events(cache, seg_out_of_order(tp, count))
    cache.lineage(tp)
    timings = {"out_of_order_copy_seconds": time.perf_counter() - started}
    (tip,) = [m for m in cache.segments(tp) if m.end_offset == cache.remote_log_end_offset(tp)]
    started = time.perf_counter()
    cache.update_segment(
        tip.segment_id,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        leader_epoch=0,
        event_timestamp=0,
    )
    cache.lineage(tp)
    timings["tip_deletion_seconds"] = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as directory:
        store = SnapshotStore(Path(directory), 50)
        binding = StateBinding(
            cluster_id="bench",
            metadata_topic="bench",
            metadata_topic_id=uuid.UUID(int=1),
            remote_storage="bench",
        )
        ends = dict.fromkeys(range(50), count)
        store.load(RemoteLogMetadataCache(), binding=binding, ends=ends)  # binds the directory
        started = time.perf_counter()
        store.write(store.plan(cache, {metadata_partition_for(str(tp), 50): count}, [tp]))
        timings["snapshot_write_seconds"] = time.perf_counter() - started
        files = [f for f in Path(directory).rglob("*") if f.is_file()]
        timings["snapshot_mib"] = sum(f.stat().st_size for f in files) / 2**20
        started = time.perf_counter()
        restored = RemoteLogMetadataCache()
        store.load(restored, binding=binding, ends=ends)
        timings["snapshot_load_seconds"] = time.perf_counter() - started
        assert len(restored) == len(cache)
    print(
        f"out-of-order copy {timings['out_of_order_copy_seconds'] * 1000:.2f} ms; deleting "
        f"the newest segment {timings['tip_deletion_seconds'] * 1000:.2f} ms; snapshot "
        f"{timings['snapshot_mib']:.1f} MiB, write {timings['snapshot_write_seconds']:.1f} s, "
        f"load {timings['snapshot_load_seconds']:.1f} s"
    )
    return timings


def seg_out_of_order(tp: TopicIdPartition, count: int) -> RemoteLogSegmentMetadata:
    """A duplicate copy of a middle segment arriving late: the lineage must be re-walked."""
    middle = count // 2 * SEGMENT_OFFSETS
    epoch = count // 2 // EPOCH_EVERY
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId(topic_id_partition=tp, id=uuid.uuid4()),
        start_offset=middle,
        end_offset=middle + SEGMENT_OFFSETS - 1,
        max_timestamp=0,
        leader_epoch=epoch,
        event_timestamp=0,
        segment_leader_epochs=((epoch, middle),),
        segment_size_in_bytes=1 << 30,
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def report(
    memory: list[Memory], rounds: list[Latency], timings: dict[str, float], args: argparse.Namespace
) -> None:
    def median_of(implementation: str, field: str) -> float:
        return float(
            statistics.median(
                getattr(r, field) for r in rounds if r.implementation == implementation
            )
        )

    ratios = [a.p50_us / b.p50_us for a, b in zip(rounds[0::2], rounds[1::2], strict=True)]
    summary = {
        "question": "bytes per remote segment entry and segment lookup latency at 1M segments",
        "segments": args.segments,
        "kip_405_bytes_per_entry": KIP_405_BYTES_PER_ENTRY,
        "memory": [asdict(m) for m in memory],
        "lookup_rounds": [asdict(r) for r in rounds],
        "lookup_median_p50_us": {i: median_of(i, "p50_us") for i in ("tierproxy", "kafka-style")},
        "lookup_median_p99_us": {i: median_of(i, "p99_us") for i in ("tierproxy", "kafka-style")},
        "lookup_p50_ratio_tierproxy_over_kafka_style": statistics.median(ratios),
        "apply_events_per_second": 2 * memory[0].segments / memory[0].load_seconds,
        **timings,
        "python": sys.version.split()[0],
        "lookups_per_round": args.lookups,
        "pairs": args.pairs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "metadata_cache.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("lookup_rounds",)}, indent=2))
    plot(memory, summary)


def plot(memory: list[Memory], summary: dict[str, object]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{m.implementation}\n{m.layout}" for m in memory]
    left.bar(
        labels, [m.bytes_per_entry for m in memory], color=["tab:blue", "tab:gray", "tab:blue"]
    )
    left.axhline(KIP_405_BYTES_PER_ENTRY, color="tab:red", linestyle="--")
    left.text(
        len(memory) - 0.55,
        KIP_405_BYTES_PER_ENTRY * 1.15,
        "KIP-405 estimate: 100 B",
        color="tab:red",
        ha="right",
    )
    left.set_ylabel("bytes per segment entry (RSS growth)")
    left.set_title("Memory per remote segment")
    left.tick_params(axis="x", labelsize=8)
    p50 = summary["lookup_median_p50_us"]
    p99 = summary["lookup_median_p99_us"]
    assert isinstance(p50, dict) and isinstance(p99, dict)
    names = list(p50)
    width = 0.35
    positions = range(len(names))
    right.bar([p - width / 2 for p in positions], [p50[n] for n in names], width, label="p50")
    right.bar([p + width / 2 for p in positions], [p99[n] for n in names], width, label="p99")
    right.set_xticks(list(positions), names)
    right.set_ylabel("microseconds per segment_for")
    right.set_title(f"Lookup latency, 1 partition x {memory[0].segments:,} segments")
    right.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "metadata_cache.png", dpi=120)


if __name__ == "__main__":
    main()
