"""The one-job copy's task logic: segments cut from what the windows read, each announced
(COPY_SEGMENT_STARTED acknowledged) before any of its objects is written, nothing announced
after a partition's first failure, after the pipeline lost its hold, or past the job's
deadline, and nothing left behind that was uploaded past the deadline."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from protocol.metadata_records import encode_metadata_record
from protocol.murmur2 import metadata_partition_for
from protocol.records import Record, build_record_batch
from storage.kafka_security import KafkaSecurityConfig
from storage.model import LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition
from storage.rlmm.records import segment_record
from storage.tiering.chain import ChainState
from storage.tiering.copy_stage import CopyJob
from storage.tiering.fetch_stage import BrokerSettings, FetchWindow, WindowResult
from storage.tiering.scan import WindowScanner
from storage.tiering.tier_stage import MetadataSink, PartitionTask, PartitionWork, plan_partition
from tests.fakes.clocks import ManualClock

TP = TopicIdPartition(topic_id=uuid.UUID(int=7), topic="orders", partition=3)
SINK = MetadataSink(topic="__remote_log_metadata", partition_count=50, timeout_ms=1_000)
BROKER = BrokerSettings(
    bootstrap_servers="127.0.0.1:1",
    client_id="test",
    request_timeout_ms=1_000,
    fetch_max_bytes=1 << 20,
    security=KafkaSecurityConfig(),
)


def window(number: int, start: int, end: int, spill: Path) -> FetchWindow:
    return FetchWindow(
        run_id="run",
        window=number,
        topic=TP.topic,
        partition=TP.partition,
        leader_id=1,
        start_offset=start,
        end_offset=end,
        owns_straddling_batch=number == 0,
        span_max_bytes=1,
        span_max_ms=10**9,
        bytes_per_second=float("inf"),
        spill_dir=str(spill),
    )


def read(w: FetchWindow, batches: list[bytes], spill: Path) -> WindowResult:
    """What fetching ``w`` returns when the broker holds ``batches``: the spill written."""
    scanner = WindowScanner(
        start=w.start_offset,
        end=w.end_offset,
        owns_straddling_batch=w.owns_straddling_batch,
        span_max_bytes=w.span_max_bytes,
        span_max_ms=w.span_max_ms,
    )
    step = scanner.feed(b"".join(batches))
    path = spill / f"w{w.window}.bin"
    path.write_bytes(bytes(step.owned))
    return WindowResult.scanned(w.window, str(path), scanner, 0.0)


def batches(count: int) -> list[bytes]:
    return [
        build_record_batch(base_offset=i, records=[Record(value=b"v" * 100, timestamp=1_000 + i)])
        for i in range(count)
    ]


def work(windows: tuple[FetchWindow, ...], segment_bytes: int) -> PartitionWork:
    return PartitionWork(
        tp=TP,
        windows=windows,
        copy_start=0,
        segment_bytes=segment_bytes,
        segment_ms=10**12,
        now_ms=2_000,
        leader_epoch=0,
        prior=ChainState(),
    )


class Journal:
    """The order in which records were produced and objects written."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []


class Producer:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    async def send(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        await asyncio.sleep(0)
        self._journal.events.append(("started", (partition, value)))
        return len(self._journal.events)


class Storage:
    """Writes nothing; the upload of the segment starting at ``fail_at`` fails; each upload
    takes ``upload_ms`` of ``clock``."""

    def __init__(
        self,
        journal: Journal,
        fail_at: int,
        clock: ManualClock[int] | None = None,
        upload_ms: int = 0,
    ) -> None:
        self._journal = journal
        self._fail_at = fail_at
        self._clock = clock
        self._upload_ms = upload_ms

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        self._journal.events.append(("upload", metadata.segment_id.id))
        if self._clock is not None:
            self._clock.now += self._upload_ms
        if metadata.start_offset == self._fail_at:
            raise OSError("disk full")

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._journal.events.append(("removed", metadata.segment_id.id))


class Holds:
    """Holds for the first ``checks`` questions, then no more."""

    def __init__(self, journal: Journal, checks: int = 1_000) -> None:
        self._journal = journal
        self._left = checks

    async def __call__(self) -> bool:
        self._journal.events.append(("holds?", self._left > 0))
        self._left -= 1
        return self._left >= 0


def task_of(
    journal: Journal,
    storage: Storage,
    *,
    clock: ManualClock[int] | None = None,
    holds: Holds | None = None,
    **sink: Any,
) -> PartitionTask:
    return PartitionTask(
        BROKER,
        replace(SINK, **sink),
        Producer(journal),
        storage,  # type: ignore[arg-type]
        holds=holds or Holds(journal),
        clock=clock or ManualClock(0),
    )


def test_each_segment_is_announced_before_upload_and_a_failure_stops_the_partition(
    tmp_path: Path,
) -> None:
    log = batches(3)
    w = window(0, 0, 3, tmp_path)
    plan = plan_partition(work((w,), segment_bytes=len(log[0])), [read(w, log, tmp_path)])
    assert [j.metadata.start_offset for j in plan.jobs] == [0, 1, 2]
    journal = Journal()
    task = task_of(journal, Storage(journal, fail_at=1))
    copies = asyncio.run(task.copy_in_order(plan.jobs))
    partition = metadata_partition_for(f"{TP.topic}-{TP.partition}", SINK.partition_count)
    first, second, third = (j.metadata for j in plan.jobs)
    assert [e for e in journal.events if e[0] != "holds?"] == [
        ("started", (partition, encode_metadata_record(segment_record(first)))),
        ("upload", first.segment_id.id),
        ("started", (partition, encode_metadata_record(segment_record(second)))),
        ("upload", second.segment_id.id),
    ]
    assert [c.segment_id for c in copies] == [first.segment_id.id, second.segment_id.id]
    assert copies[0].error is None
    assert copies[1].error is not None and "disk full" in copies[1].error
    assert third.segment_id.id not in {c.segment_id for c in copies}


def test_segments_get_fresh_ids_each_time_they_are_planned(tmp_path: Path) -> None:
    """A retried task announces new segments; the first attempt's stay leftovers."""
    log = batches(2)
    w = window(0, 0, 2, tmp_path)
    planned = work((w,), segment_bytes=len(log[0]))
    ids = [
        {j.metadata.segment_id.id for j in plan_partition(planned, [read(w, log, tmp_path)]).jobs}
        for _ in range(2)
    ]
    assert len(ids[0]) == 2
    assert not ids[0] & ids[1]


def test_a_failed_window_ends_what_is_planned_at_its_start(tmp_path: Path) -> None:
    log = batches(4)
    first, second = window(0, 0, 2, tmp_path), window(1, 2, 4, tmp_path)
    failed = WindowResult.failed(1, "FetchFailedError: the broker returns no batch")
    plan = plan_partition(
        work((first, second), segment_bytes=len(log[0])), [read(first, log[:2], tmp_path), failed]
    )
    assert plan.scan is not None and plan.scan.end == 2
    assert [j.metadata.end_offset for j in plan.jobs] == [0, 1]


def three_segments(tmp_path: Path) -> tuple[CopyJob, ...]:
    log = batches(3)
    w = window(0, 0, 3, tmp_path)
    return plan_partition(work((w,), segment_bytes=len(log[0])), [read(w, log, tmp_path)]).jobs


def test_nothing_is_announced_once_the_pipeline_no_longer_holds_its_transactional_id(
    tmp_path: Path,
) -> None:
    """The holder is asked before each segment: once another pipeline took over (or the
    hold lapsed), the task announces and uploads nothing more."""
    jobs = three_segments(tmp_path)
    journal = Journal()
    task = task_of(journal, Storage(journal, fail_at=-1), holds=Holds(journal, checks=1))
    copies = asyncio.run(task.copy_in_order(jobs))
    assert [e[0] for e in journal.events] == ["holds?", "started", "upload", "holds?"]
    assert copies[0].error is None
    assert copies[1].error is not None and "no longer holds" in copies[1].error
    assert len(copies) == 2


def test_nothing_is_announced_past_the_jobs_deadline(tmp_path: Path) -> None:
    """What is left when the deadline passes is neither announced nor a failure: the driver
    sees no result for it and copies it next cycle."""
    jobs = three_segments(tmp_path)
    journal = Journal()
    clock = ManualClock(10_000)
    task = task_of(
        journal, Storage(journal, fail_at=-1, clock=clock), clock=clock, deadline_ms=10_000
    )
    assert asyncio.run(task.copy_in_order(jobs)) == ()
    assert journal.events == []


def test_a_segment_uploaded_past_the_deadline_is_removed_and_not_finished(
    tmp_path: Path,
) -> None:
    """A paused task that resumes after its deadline may find its copy already cleaned up
    by the pipeline that took over: it removes what it uploaded, and reports a failure so
    that nobody finishes it."""
    jobs = three_segments(tmp_path)
    journal = Journal()
    clock = ManualClock(1_000)
    storage = Storage(journal, fail_at=-1, clock=clock, upload_ms=600)
    task = task_of(journal, storage, clock=clock, deadline_ms=2_000)
    copies = asyncio.run(task.copy_in_order(jobs))
    first, second, _ = (j.metadata.segment_id.id for j in jobs)
    assert [e for e in journal.events if e[0] in ("upload", "removed")] == [
        ("upload", first),
        ("upload", second),
        ("removed", second),
    ]
    assert copies[0].error is None
    assert copies[1].error is not None and "removed" in copies[1].error
    assert len(copies) == 2
