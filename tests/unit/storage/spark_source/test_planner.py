"""Slices planned over a real remote tier hold every record of the range exactly once, and
large segments are cut into byte ranges at batch boundaries."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.kafka_client import KafkaClient
from storage.spark_source import planner
from storage.spark_source.catalog import Catalog, PartitionInfo, SourceError
from storage.spark_source.options import parse_options
from storage.spark_source.planner import concurrently, plan_tasks
from storage.spark_source.read import remote_columns, transactions_of
from storage.spark_source.slices import RemoteSlice
from tests.fakes.record_batches import data_batch
from tests.fakes.tiered_log import TP, TieredLog

PART = PartitionInfo(topic=TP.topic, partition=TP.partition, leader=0, tp=TP)


async def _plan_and_read(
    segments: list[list[int]],
    start: int,
    until: int,
    max_slice_bytes: int,
    *,
    first_offset: int = 0,
    **more: str,
) -> tuple[list[int], list[tuple[RemoteSlice, ...]], int]:
    """The offsets read, the remote tasks planned and the end of the log."""
    with tempfile.TemporaryDirectory() as root:
        log = TieredLog.create(Path(root))
        offset = first_offset
        for counts in segments:
            batches = []
            for count in counts:
                batches.append(data_batch(offset, count, value_size=40))
                offset += count
            await log.copy(batches)
        catalog = Catalog(
            client=KafkaClient("127.0.0.1:9"),  # never contacted: remote only, uncommitted
            metadata=log.metadata,
            rsm=log.rsm,
            indexes=log.indexes,
            reader=log.reader,
        )
        options = parse_options(
            {
                "subscribe": TP.topic,
                "includeLocal": "false",
                "maxSliceBytes": str(max_slice_bytes),
                **more,
            }
        )
        tasks = await plan_tasks(catalog, [PART], {(TP.topic, 0): (start, until)}, options)
        slices = [piece for task in tasks for piece in task]
        offsets: list[int] = []
        for piece in slices:
            assert isinstance(piece, RemoteSlice)
            transactions = transactions_of(piece)
            for first, end in piece.reads():
                data = await log.rsm.fetch_log_segment(piece.segment, first, end)
                for columns in remote_columns(
                    piece, data, transactions=transactions, include_headers=False
                ):
                    offsets += columns.offsets.tolist()
        await log.close()
        remote = [tuple(p for p in task if isinstance(p, RemoteSlice)) for task in tasks]
        return offsets, [task for task in remote if task], offset


def _flat(tasks: list[tuple[RemoteSlice, ...]]) -> list[RemoteSlice]:
    return [piece for task in tasks for piece in task]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segments=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=8), min_size=1, max_size=4),
    bounds=st.tuples(st.integers(0, 120), st.integers(0, 120)),
    max_slice_bytes=st.sampled_from([1, 300, 1000, 1 << 20]),
)
def test_slices_hold_every_record_of_the_range_once(
    segments: list[list[int]], bounds: tuple[int, int], max_slice_bytes: int
) -> None:
    start, until = min(bounds), max(bounds)
    offsets, tasks, end = asyncio.run(_plan_and_read(segments, start, until, max_slice_bytes))
    assert offsets == list(range(start, min(until, end)))
    for piece in _flat(tasks):
        assert piece.start_position < piece.end_position <= piece.segment.segment_size_in_bytes
    for task in tasks:
        spans = [piece.end_position - piece.start_position for piece in task]
        assert len(task) == 1 or sum(spans) <= max_slice_bytes


def test_a_slice_is_read_in_several_gets_of_whole_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first GET of about ``FIRST_READ_BYTES``, then GETs of about ``READ_BYTES`` each,
    cut at batch starts, tile every slice."""
    monkeypatch.setattr(planner, "FIRST_READ_BYTES", 100)
    monkeypatch.setattr(planner, "READ_BYTES", 300)
    offsets, tasks, end = asyncio.run(_plan_and_read([[10] * 40, [3] * 20], 0, 10**6, 5000))
    assert offsets == list(range(end))
    for piece in _flat(tasks):
        reads = piece.reads()
        assert len(reads) > 1
        assert reads[0][0] == piece.start_position and reads[-1][1] == piece.end_position
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(reads))


@given(
    first=st.integers(0, 1000),
    gaps=st.lists(st.integers(1, 400), min_size=1, max_size=30),
    first_limit=st.integers(1, 600),
    limit=st.integers(1, 2000),
)
def test_read_cuts_start_small_then_stay_within_the_limit(
    first: int, gaps: list[int], first_limit: int, limit: int
) -> None:
    """Cuts are batch starts inside the slice, in order; the first GET is at most
    ``FIRST_READ_BYTES`` and each later one at most ``READ_BYTES``, unless one batch span
    alone is larger."""
    starts = list(itertools.accumulate(gaps, initial=first))
    entries, end = starts[1:-1], starts[-1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner, "FIRST_READ_BYTES", first_limit)
        patch.setattr(planner, "READ_BYTES", limit)
        cuts = planner._read_cuts(entries, first, end)
    assert set(cuts) <= set(entries)
    bounds = [first, *cuts, end]
    assert all(a < b for a, b in itertools.pairwise(bounds))
    spans = {(a, b): b - a for a, b in itertools.pairwise(starts)}
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        allowed = first_limit if n == 0 else limit
        assert b - a <= allowed or (a, b) in spans


def test_a_large_segment_is_read_as_several_byte_ranges() -> None:
    offsets, tasks, end = asyncio.run(_plan_and_read([[10] * 40], 0, 10**6, 2000))
    slices = _flat(tasks)
    assert offsets == list(range(end))
    assert len(slices) > 3
    assert all(a.end_position == b.start_position for a, b in itertools.pairwise(slices))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segments=st.lists(st.lists(st.integers(1, 12), min_size=4, max_size=8), min_size=1, max_size=3),
    min_partitions=st.integers(1, 40),
)
def test_min_partitions_cuts_finer_and_still_reads_every_record_once(
    segments: list[list[int]], min_partitions: int
) -> None:
    wide, few, end = asyncio.run(_plan_and_read(segments, 0, 10**6, 1 << 20))
    offsets, many, _ = asyncio.run(
        _plan_and_read(segments, 0, 10**6, 1 << 20, minPartitions=str(min_partitions))
    )
    assert offsets == wide == list(range(end))
    batches = sum(len(counts) for counts in segments)  # the finest cut: one batch a slice
    assert len(many) >= min(min_partitions, batches) // 2
    assert len(many) >= len(few)


def test_consecutive_small_segments_are_read_by_one_task() -> None:
    """Every task costs Spark more than its rows: small segments of a partition go together,
    in offset order, up to ``maxSliceBytes``."""
    offsets, tasks, end = asyncio.run(_plan_and_read([[5, 5]] * 6, 0, 10**6, 1 << 20))
    assert offsets == list(range(end))
    assert len(tasks) == 1
    (task,) = tasks
    assert len(task) == 6
    assert all(a.until_offset <= b.from_offset for a, b in itertools.pairwise(task))


def test_offsets_aged_out_of_the_remote_tier_fail_the_query_as_data_loss() -> None:
    with pytest.raises(SourceError, match="failOnDataLoss"):
        asyncio.run(_plan_and_read([[5, 5]], 0, 100, 1 << 20, first_offset=20))


def test_without_fail_on_data_loss_what_is_left_is_read() -> None:
    offsets, _, end = asyncio.run(
        _plan_and_read([[5, 5]], 0, 100, 1 << 20, first_offset=20, failOnDataLoss="false")
    )
    assert offsets == list(range(20, end))


async def test_partitions_planned_at_the_same_time_keep_their_order() -> None:
    async def after(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        return value

    assert await concurrently([after(0.02, 1), after(0.0, 2), after(0.01, 3)]) == [1, 2, 3]


async def test_the_first_failure_is_raised_as_it_is_and_cancels_the_other_partitions() -> None:
    cancelled = asyncio.Event()

    async def fails() -> int:
        raise SourceError("offsets 0 to 9 are no longer stored")

    async def waits() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    with pytest.raises(SourceError, match="no longer stored"):
        await concurrently([waits(), fails()])
    assert cancelled.is_set()
