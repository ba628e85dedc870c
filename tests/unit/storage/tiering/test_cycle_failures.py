"""What a cycle says about its failures: each one counted, wherever it happened, and named
with its stage and reason in the last line, the summary and one line of its own; and which
copies get COPY_SEGMENT_FINISHED (only an uploaded, unbroken run per partition), said
exactly."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.tiering.chain import ChainState
from storage.tiering.copy_stage import CopyJob, CopyResult, failed_copy
from storage.tiering.copying import _log_finished, _sort_out
from storage.tiering.cycle import Notes
from storage.tiering.report import (
    CycleReport,
    Failure,
    Stage,
    TopicStats,
    describe_runs,
    failures_table,
    log_report,
    summary_table,
)

ORDERS = TopicIdPartition(topic_id=uuid.uuid4(), topic="orders", partition=0)
ORDERS_1 = TopicIdPartition(topic_id=ORDERS.topic_id, topic="orders", partition=1)
LOG = logging.getLogger("storage.tiering.job")


def segment(tp: TopicIdPartition, start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId.generate(tp),
        start_offset=start,
        end_offset=end,
        max_timestamp=0,
        leader_epoch=0,
        event_timestamp=0,
        segment_leader_epochs=((0, start),),
        segment_size_in_bytes=end - start + 1,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )


def job(metadata: RemoteLogSegmentMetadata) -> CopyJob:
    return CopyJob(metadata=metadata, pieces=(), prior=ChainState())


def copied(job: CopyJob) -> CopyResult:
    return CopyResult(segment_id=job.metadata.segment_id.id, size=0, seconds=0.0)


def cycle(*failures: Failure, **topics: TopicStats) -> CycleReport:
    return CycleReport(
        started_ms=0, seconds=1.5, copy_seconds=0.5, topics=topics, failures=failures
    )


PLANNING = Failure.of_partition(Stage.PLANNING, ORDERS, "checkpoint not found under /tier")


def test_a_failure_names_what_failed_at_which_stage_and_why() -> None:
    metadata = segment(ORDERS, 0, 99)
    copy = Failure.of_segment(Stage.COPY, metadata, "disk full")
    assert str(copy) == (
        f"orders-0 segment 0..99 ({metadata.segment_id.id}): copy failed: disk full"
    )
    assert str(PLANNING) == "orders-0: planning failed: checkpoint not found under /tier"
    refused = Failure(stage=Stage.SURVEY, reason="User:x lacks READ", topic="orders")
    assert str(refused) == "orders: survey failed: User:x lacks READ"
    job_failure = Failure(stage=Stage.COPY, reason="the copy job failed: lost executor")
    assert str(job_failure) == "the cycle: copy failed: the copy job failed: lost executor"


def test_every_failure_counts_not_only_copies() -> None:
    """The bug: planning failures were logged but the cycle said ``0 failed``."""
    report = cycle(PLANNING, orders=TopicStats(partitions=1))
    assert not report.idle
    assert report.failures_of("orders") == (PLANNING,)
    assert report.copy_failures("orders") == 0  # Kafka's RemoteCopyErrorsPerSec: segments
    assert report.errors == (str(PLANNING),)


def test_the_last_line_counts_and_names_the_failures(caplog: pytest.LogCaptureFixture) -> None:
    failures = [PLANNING] + [
        Failure.of_segment(Stage.COPY, segment(ORDERS_1, i * 10, i * 10 + 9), f"boom {i}")
        for i in range(4)
    ]
    report = cycle(*failures, orders=TopicStats(partitions=2))

    with caplog.at_level(logging.INFO):
        log_report(report, LOG)

    errors = [r for r in caplog.records if r.tierproxy_event == "tiering.cycle.error"]  # type: ignore[attr-defined]
    assert [r.getMessage() for r in errors] == [str(f) for f in failures]
    assert errors[0].tierproxy_fields == {  # type: ignore[attr-defined]
        "stage": "planning",
        "topic": "orders",
        "partition": 0,
    }
    topic = next(r for r in caplog.records if r.tierproxy_event == "tiering.cycle.topic")  # type: ignore[attr-defined]
    assert topic.tierproxy_fields["failed"] == 5  # type: ignore[attr-defined]
    done = caplog.records[-1]
    assert done.tierproxy_event == "tiering.cycle.done"  # type: ignore[attr-defined]
    assert done.levelno == logging.WARNING
    assert done.tierproxy_fields["failed"] == 5  # type: ignore[attr-defined]
    assert done.getMessage() == (
        "tiering cycle done in 1.5 s: 0 segments, 0 bytes copied, 5 failed: "
        + "; ".join(str(f) for f in failures[:3])
        + "; and 2 more (each in a tiering.cycle.error line)"
    )


def test_a_cycle_without_failures_ends_with_an_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        log_report(cycle(orders=TopicStats(segments_copied=2, bytes_copied=10)), LOG)
    assert caplog.records[-1].levelno == logging.INFO
    assert (
        caplog.messages[-1] == "tiering cycle done in 1.5 s: 2 segments, 10 bytes copied, 0 failed"
    )


def test_the_summary_counts_each_topics_failures_and_lists_them() -> None:
    refused = Failure(stage=Stage.SURVEY, reason="User:x lacks READ", topic="clicks")
    report = cycle(PLANNING, refused, orders=TopicStats(partitions=1), clicks=TopicStats())
    console = Console(record=True, width=200)
    console.print(summary_table(report))
    table = failures_table(report)
    assert table is not None
    console.print(table)
    text = console.export_text()

    assert "2 failed" in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 4}
    assert rows["orders"].split("│")[5].strip() == "1"  # the failed column
    assert rows["clicks"].split("│")[5].strip() == "1"
    assert "│ orders-0 │ planning │ checkpoint not found under /tier" in text
    assert "│ clicks   │ survey   │ User:x lacks READ" in text
    assert failures_table(cycle(orders=TopicStats())) is None


def test_a_refusal_is_reported_once_per_cycle() -> None:
    notes = Notes()
    refused = Failure(stage=Stage.SURVEY, reason="User:x lacks READ", topic="clicks")
    notes.deny(refused)
    notes.deny(Failure(stage=Stage.SURVEY, reason="User:x lacks READ", topic="clicks"))
    assert notes.take_denied() == [refused]
    assert notes.take_denied() == []


def test_runs_are_described_per_partition_and_capped() -> None:
    first = [segment(ORDERS, 0, 99), segment(ORDERS, 100, 149)]
    assert describe_runs([*first, segment(ORDERS_1, 5, 9)]) == (
        "orders-0 offsets 0..149 (2 segments), orders-1 offsets 5..9 (1 segment)"
    )
    many = [
        segment(TopicIdPartition(topic_id=ORDERS.topic_id, topic="orders", partition=p), 0, 9)
        for p in range(7)
    ]
    described = describe_runs(many)
    assert described.endswith("orders-4 offsets 0..9 (1 segment) and 2 more partitions")


# -- which copies are finished ------------------------------------------------------------


def test_only_each_partitions_uploaded_run_is_finished() -> None:
    a = [job(segment(ORDERS, i * 10, i * 10 + 9)) for i in range(4)]
    b = [job(segment(ORDERS_1, i * 10, i * 10 + 9)) for i in range(3)]
    outcomes = [
        copied(a[0]),
        failed_copy(a[1], "RemoteStorageError: cannot store"),  # announced, not uploaded
        # a[2] and a[3]: never announced (the task stopped the partition)
        failed_copy(b[0], "COPY_SEGMENT_STARTED not published: timeout", announced=False),
    ]
    stats = {"orders": TopicStats()}
    failures: list[Failure] = []

    out = _sort_out([*a, *b], outcomes, stats, failures)

    assert out.finished == (a[0].metadata,)
    assert out.left_started == (a[1].metadata,)
    assert out.unannounced == 5
    assert out.broken == {ORDERS, ORDERS_1}
    assert [(f.stage, f.segment is not None) for f in failures] == [
        (Stage.COPY, True),
        (Stage.PUBLISH, True),
    ]
    assert stats["orders"].segments_copied == 1 and stats["orders"].lag_segments == 6


outcome_kinds = st.sampled_from(["uploaded", "upload failed", "not published", "none"])


@given(st.lists(st.lists(outcome_kinds, max_size=6), min_size=1, max_size=4))
def test_finished_is_never_a_segment_that_was_not_uploaded(kinds: list[list[str]]) -> None:
    """Whatever the tasks return, COPY_SEGMENT_FINISHED goes only to uploaded segments, and
    per partition only to a run from its first segment without a gap; every segment is
    finished, left STARTED or not announced, exactly once; every error is one failure."""
    jobs: list[CopyJob] = []
    outcomes: list[CopyResult] = []
    uploaded: set[uuid.UUID] = set()
    prefix: dict[TopicIdPartition, list[uuid.UUID]] = {}
    for partition, partition_kinds in enumerate(kinds):
        tp = TopicIdPartition(topic_id=ORDERS.topic_id, topic="orders", partition=partition)
        broken = False
        prefix[tp] = []
        for i, kind in enumerate(partition_kinds):
            j = job(segment(tp, i * 10, i * 10 + 9))
            jobs.append(j)
            if kind == "uploaded":
                outcomes.append(copied(j))
                uploaded.add(j.metadata.segment_id.id)
            elif kind == "upload failed":
                outcomes.append(failed_copy(j, "cannot store"))
            elif kind == "not published":
                outcomes.append(failed_copy(j, "not published", announced=False))
            broken = broken or kind != "uploaded"
            if not broken:
                prefix[tp].append(j.metadata.segment_id.id)
    failures: list[Failure] = []

    out = _sort_out(jobs, outcomes, {"orders": TopicStats()}, failures)

    finished = [m.segment_id.id for m in out.finished]
    assert set(finished) <= uploaded
    assert finished == [s for ids in prefix.values() for s in ids]
    assert len(out.finished) + len(out.left_started) + out.unannounced == len(jobs)
    assert len(failures) == sum(o.error is not None for o in outcomes)


def test_the_copy_says_which_segments_were_finished_and_what_becomes_of_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = [job(segment(ORDERS, i * 10, i * 10 + 9)) for i in range(3)]
    outcomes = [copied(a[0]), failed_copy(a[1], "disk full")]
    some = _sort_out(a, outcomes, {"orders": TopicStats()}, [])
    none = _sort_out(a[1:], [failed_copy(a[1], "disk full")], {"orders": TopicStats()}, [])

    with caplog.at_level(logging.INFO):
        _log_finished(some, 3, 0.25)
        _log_finished(none, 2, 0.0)

    events = [r.tierproxy_event for r in caplog.records]  # type: ignore[attr-defined]
    assert events == ["tiering.copy.finished_published", "tiering.copy.none_finished"]
    assert caplog.messages[0] == (
        "published COPY_SEGMENT_FINISHED for 1 of 3 segments in 0.25 s (orders-0 offsets "
        "0..9 (1 segment)); 1 announced and not uploaded stay COPY_SEGMENT_STARTED and are "
        "deleted as leftovers by the next cycle (by another process once "
        "tiering.copy.timeout.ms and a minute have passed); 1 not announced (after a failure "
        "in their partition) are copied by a later cycle"
    )
    assert caplog.records[1].levelno == logging.WARNING
    assert caplog.messages[1].startswith(
        "no COPY_SEGMENT_FINISHED published: none of the 2 segments was uploaded; 1 announced"
    )
    assert caplog.records[1].tierproxy_fields == {  # type: ignore[attr-defined]
        "segments": 2,
        "finished": 0,
        "left_started": 1,
        "not_announced": 1,
    }
