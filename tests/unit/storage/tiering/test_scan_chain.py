"""Fetch windows, planned segments and the chain fold against the builder run in sequence.

The pipeline builds the segments of one partition in parallel, each from a prior state the
driver folded out of what the fetch tasks saw. These properties check that this gives the
same files the builder gives when it builds the segments one after the other.
"""

from __future__ import annotations

import bisect
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.indexes.producer_snapshot import ProducerSnapshotEntry
from protocol.records import Record, build_record_batch
from storage.segment.builder import BuiltSegment, SegmentBuilder
from storage.tiering.chain import ChainError, ChainState, ProducerEvent, fold_chain
from storage.tiering.planner import BatchSpan, PlannedSegment, cut_segments, plan_windows
from storage.tiering.scan import WindowScanError, WindowScanner, spans_from_array
from tests.unit.storage.tiering.synthetic import BASE_TIMESTAMP, LogBatch, Step, build_log, logs

NOW = BASE_TIMESTAMP + 10**10


class FakeLog:
    """A broker's answers to Fetch: from the batch holding the offset, cut at a byte limit."""

    def __init__(self, batches: list[LogBatch]) -> None:
        self.batches = batches
        self.data = b"".join(b.data for b in batches)
        self.positions = []
        position = 0
        for batch in batches:
            self.positions.append(position)
            position += len(batch.data)

    def fetch(self, offset: int, max_bytes: int) -> bytes:
        lasts = [b.last_offset for b in self.batches]
        index = bisect.bisect_left(lasts, offset)
        if index == len(self.batches):
            return b""
        start = self.positions[index]
        first_size = len(self.batches[index].data)
        return self.data[start : start + max(max_bytes, first_size)]


def scan_windows(
    log: FakeLog, windows: list[tuple[int, int]], *, max_bytes: int, span_bytes: int
) -> tuple[list[bytes], list[BatchSpan], list[ProducerEvent]]:
    spills: list[bytes] = []
    spans: list[BatchSpan] = []
    events: list[ProducerEvent] = []
    for number, (start, end) in enumerate(windows):
        scanner = WindowScanner(
            start=start,
            end=end,
            owns_straddling_batch=number == 0,
            span_max_bytes=span_bytes,
            span_max_ms=10**9,
        )
        spill = bytearray()
        while True:
            step = scanner.feed(log.fetch(scanner.next_offset, max_bytes))
            spill += step.owned
            if step.done or scanner.next_offset > log.batches[-1].last_offset:
                break
        packed, window_events = scanner.finish()
        spills.append(bytes(spill))
        spans += spans_from_array(number, packed)
        events += window_events
    return spills, spans, events


def build_in_sequence(
    spills: list[bytes], spans: list[BatchSpan], segments: list[PlannedSegment]
) -> list[BuiltSegment]:
    built = []
    lineage: tuple[EpochEntry, ...] = ()
    producers: tuple[ProducerSnapshotEntry, ...] = ()
    for segment in segments:
        builder = SegmentBuilder(
            base_offset=segment.start_offset, prior_epochs=lineage, prior_producers=producers
        )
        for span in spans[segment.first_span : segment.end_span]:
            builder.append(spills[span.window][span.position : span.position + span.size])
        result = builder.finish()
        built.append(result)
        lineage, producers = result.lineage, result.producers
    return built


@given(
    batches=logs,
    cuts=st.integers(1, 6),
    max_bytes=st.integers(1, 20_000),
    span_bytes=st.sampled_from([1, 2000, 10**9]),
    segment_bytes=st.integers(200, 30_000),
    segment_ms=st.integers(1, 400_000),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_parallel_plan_equals_sequential_build(
    batches: list[LogBatch],
    cuts: int,
    max_bytes: int,
    span_bytes: int,
    segment_bytes: int,
    segment_ms: int,
) -> None:
    log = FakeLog(batches)
    end = batches[-1].last_offset + 1
    windows = plan_windows(start=0, end=end, estimated_bytes=cuts, max_task_bytes=1)
    spills, spans, events = scan_windows(log, windows, max_bytes=max_bytes, span_bytes=span_bytes)
    # Every byte of the log is read exactly once, in order.
    assert b"".join(spills) == log.data
    assert [s.base_offset for s in spans] == sorted(s.base_offset for s in spans)
    segments = cut_segments(
        spans, copy_start=0, segment_bytes=segment_bytes, segment_ms=segment_ms, now_ms=NOW
    )
    chains, final = fold_chain(ChainState(), spans, segments, events)
    built = build_in_sequence(spills, spans, segments)
    previous = ChainState()
    for segment, chain, result in zip(segments, chains, built, strict=True):
        assert chain.prior == previous
        assert chain.segment_leader_epochs == result.segment_leader_epochs
        assert (segment.start_offset, segment.end_offset) == (
            result.start_offset,
            result.end_offset,
        )
        assert segment.size == result.size_in_bytes
        assert segment.max_timestamp == result.max_timestamp
        previous = ChainState(lineage=result.lineage, producers=result.producers)
    assert final == previous


@given(batches=logs, cuts=st.integers(1, 6), segment_bytes=st.integers(200, 30_000))
@settings(max_examples=80, deadline=None)
def test_single_batch_spans_cut_the_same_whatever_the_windows(
    batches: list[LogBatch], cuts: int, segment_bytes: int
) -> None:
    log = FakeLog(batches)
    end = batches[-1].last_offset + 1
    plans = []
    for count in (1, cuts):
        windows = plan_windows(start=0, end=end, estimated_bytes=count, max_task_bytes=1)
        _, spans, _ = scan_windows(log, windows, max_bytes=4096, span_bytes=1)
        segments = cut_segments(
            spans, copy_start=0, segment_bytes=segment_bytes, segment_ms=10**6, now_ms=NOW
        )
        plans.append([(s.start_offset, s.end_offset, s.size) for s in segments])
    assert plans[0] == plans[1]


def test_a_straddling_batch_belongs_to_the_window_before() -> None:
    log = FakeLog(build_log([Step(kind="plain", records=5), Step(kind="plain", records=5)]))
    later = WindowScanner(
        start=2, end=10, owns_straddling_batch=False, span_max_bytes=1, span_max_ms=1
    )
    step = later.feed(log.fetch(2, 10**6))
    assert step.done and later.size == len(log.batches[1].data)
    first = WindowScanner(
        start=2, end=5, owns_straddling_batch=True, span_max_bytes=1, span_max_ms=1
    )
    step = first.feed(log.fetch(2, 10**6))
    assert step.done and bytes(step.owned) == log.batches[0].data


def test_an_offset_gap_is_refused() -> None:
    batches = [
        build_record_batch(base_offset=0, records=[Record(value=b"a", timestamp=1)]),
        build_record_batch(base_offset=5, records=[Record(value=b"b", timestamp=1)]),
    ]
    scanner = WindowScanner(
        start=0, end=10, owns_straddling_batch=True, span_max_bytes=1, span_max_ms=1
    )
    with pytest.raises(WindowScanError, match="gap"):
        scanner.feed(b"".join(batches))


def test_non_transactional_write_inside_a_transaction_stops_the_chain() -> None:
    log = FakeLog(build_log([Step(kind="producer", pid=21), Step(kind="producer", pid=21)]))
    _, spans, events = scan_windows(log, [(0, 2)], max_bytes=10**6, span_bytes=1)
    plain = dataclasses.replace(events[1].header, attributes=0)
    broken = [events[0], ProducerEvent(header=plain, marker=None)]
    segments = cut_segments(spans, copy_start=0, segment_bytes=1, segment_ms=1, now_ms=NOW)
    with pytest.raises(ChainError):
        fold_chain(ChainState(), spans, segments, broken)
