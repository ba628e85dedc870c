"""What a tiering cycle did, for logs, the summary table and ``tierproxy status``.

Copy lag follows Kafka's RemoteLogManager metrics: ``RemoteCopyLagBytes`` is the data below
the last stable offset not yet in the remote tier, ``RemoteCopyLagSegments`` the closed
segments among it that were not copied (failures; the still-open tail is not a segment yet).
Byte figures above the remote log end are estimates from the partition's average batch size,
since the broker does not say how large a range is without reading it.

Every failure of a cycle is a :class:`Failure`: what failed (a segment, a partition, a topic
or the cycle as a whole), at which :class:`Stage`, and why. The cycle's last line and the
summary count them all and name them, whichever step they happened in, so a cycle that
failed says so in the line an operator reads first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from rich.table import Table

from storage.log_event import event
from storage.model import RemoteLogSegmentMetadata, TopicIdPartition

__all__ = [
    "CycleReport",
    "Failure",
    "Stage",
    "TopicStats",
    "describe_runs",
    "failures_table",
    "format_bytes",
    "log_report",
    "summary_table",
]

FAILURES_IN_LAST_LINE: Final = 3
"""Failures named in the cycle's last line; the others are counted there and have a
``tiering.cycle.error`` line each (a cycle may fail for every partition at once)."""
PARTITIONS_NAMED: Final = 5
"""Partitions whose copied offsets a line names (:func:`describe_runs`); the others are
counted."""


class Stage(StrEnum):
    """The step of a cycle where something failed, as the logs name it."""

    SURVEY = "survey"
    """Reading a topic's configs or a partition's offsets from the cluster."""
    READ = "read"
    """Fetching the data to copy from the partition's leader."""
    PLANNING = "planning"
    """Cutting segments, or reading the state after the partition's last remote segment."""
    PUBLISH = "publish"
    """Publishing COPY_SEGMENT_STARTED before a segment is uploaded."""
    COPY = "copy"
    """Building and uploading a segment (or the copy job as a whole)."""
    RETENTION = "retention"
    """Moving the broker's log start, or deleting expired remote segments."""
    CLEANUP = "clean-up"
    """Deleting leftovers of failed copies, and the remote data of deleted or disabled
    topics."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """One thing a cycle could not do: what, at which stage, and why.

    What is a segment (``segment`` set), a partition (``partition`` set), a topic, or the
    cycle as a whole (``topic`` is ``None``).
    """

    stage: Stage
    reason: str
    topic: str | None = None
    partition: int | None = None
    segment: str | None = None
    """``START..END (SEGMENT-ID)``."""

    @classmethod
    def of_partition(cls, stage: Stage, tp: TopicIdPartition, reason: str) -> Failure:
        return cls(stage=stage, reason=reason, topic=tp.topic, partition=tp.partition)

    @classmethod
    def of_segment(cls, stage: Stage, metadata: RemoteLogSegmentMetadata, reason: str) -> Failure:
        tp = metadata.topic_id_partition
        segment = f"{metadata.start_offset}..{metadata.end_offset} ({metadata.segment_id.id})"
        return cls(
            stage=stage, reason=reason, topic=tp.topic, partition=tp.partition, segment=segment
        )

    @property
    def subject(self) -> str:
        """What failed, as a reader names it: ``orders-0 segment 0..99 (ID)``, ``orders-0``,
        ``orders`` or ``the cycle``."""
        if self.topic is None:
            return "the cycle"
        where = self.topic if self.partition is None else f"{self.topic}-{self.partition}"
        return where if self.segment is None else f"{where} segment {self.segment}"

    def __str__(self) -> str:
        return f"{self.subject}: {self.stage} failed: {self.reason}"


@dataclass(slots=True, kw_only=True)
class TopicStats:
    """One topic's figures for one cycle (accumulated while the cycle runs)."""

    partitions: int = 0
    segments_copied: int = 0
    bytes_copied: int = 0
    segments_expired: int = 0
    bytes_expired: int = 0
    leftovers_deleted: int = 0
    log_starts_advanced: int = 0
    lag_bytes: int = 0
    lag_segments: int = 0
    missing_offsets: int = 0
    """Offsets the broker deleted before they were tiered, found this cycle (gaps)."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleReport:
    """The outcome of one cycle."""

    started_ms: int
    seconds: float
    copy_seconds: float
    """Time spent fetching, building and uploading (the Spark stages)."""
    topics: Mapping[str, TopicStats]
    failures: tuple[Failure, ...] = ()
    """Everything that failed, at every stage, in the order it happened."""

    @property
    def errors(self) -> tuple[str, ...]:
        """Each failure as one sentence."""
        return tuple(str(f) for f in self.failures)

    @property
    def bytes_copied(self) -> int:
        return sum(t.bytes_copied for t in self.topics.values())

    @property
    def segments_copied(self) -> int:
        return sum(t.segments_copied for t in self.topics.values())

    def failures_of(self, topic: str) -> tuple[Failure, ...]:
        """The failures of ``topic`` (of its segments, its partitions or itself)."""
        return tuple(f for f in self.failures if f.topic == topic)

    def copy_failures(self, topic: str) -> int:
        """Segments of ``topic`` that were not copied: their COPY_SEGMENT_STARTED was not
        published, or they were not built and uploaded (Kafka's ``RemoteCopyErrorsPerSec``)."""
        return sum(
            f.segment is not None and f.stage in (Stage.PUBLISH, Stage.COPY)
            for f in self.failures_of(topic)
        )

    @property
    def idle(self) -> bool:
        """Whether the cycle did nothing worth a line per topic: nothing copied, failed,
        expired, cleaned up, moved or found missing, and no note."""
        return not self.failures and not any(
            t.segments_copied
            or t.segments_expired
            or t.leftovers_deleted
            or t.log_starts_advanced
            or t.missing_offsets
            or t.notes
            for t in self.topics.values()
        )


def format_bytes(count: float) -> str:
    """``count`` bytes in binary units, three significant digits."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def describe_runs(segments: Sequence[RemoteLogSegmentMetadata]) -> str:
    """The offsets ``segments`` cover, per partition in the order first met:
    ``orders-0 offsets 0..199 (2 segments), orders-1 offsets 0..99 (1 segment)``; the first
    :data:`PARTITIONS_NAMED` partitions are named, the others counted. Each partition's
    segments are expected in offset order, one unbroken run (what a copy finishes)."""
    runs: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
    for segment in segments:
        runs.setdefault(segment.topic_id_partition, []).append(segment)
    named = [
        f"{tp} offsets {run[0].start_offset}..{run[-1].end_offset} "
        f"({len(run)} segment{'' if len(run) == 1 else 's'})"
        for tp, run in list(runs.items())[:PARTITIONS_NAMED]
    ]
    rest = len(runs) - PARTITIONS_NAMED
    more = f" and {rest} more partition{'' if rest == 1 else 's'}" if rest > 0 else ""
    return ", ".join(named) + more


def summary_table(report: CycleReport) -> Table:
    """The per-topic table printed at the end of a cycle; its ``failed`` column counts each
    topic's failures at every stage (:func:`failures_table` says what they were)."""
    rate = report.bytes_copied / report.copy_seconds / 1e6 if report.copy_seconds > 0 else 0.0
    failed = f", {len(report.failures)} failed" if report.failures else ""
    table = Table(
        title=(
            f"tiering cycle: {report.segments_copied} segments, "
            f"{format_bytes(report.bytes_copied)} in {report.seconds:.1f} s "
            f"({rate:.1f} MB/s while copying){failed}"
        )
    )
    for column in (
        "topic",
        "partitions",
        "copied",
        "bytes",
        "failed",
        "expired",
        "leftovers",
        "log starts moved",
        "lag bytes",
        "lag segments",
    ):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for name in sorted(report.topics):
        stats = report.topics[name]
        table.add_row(
            name,
            str(stats.partitions),
            str(stats.segments_copied),
            format_bytes(stats.bytes_copied),
            str(len(report.failures_of(name))),
            str(stats.segments_expired),
            str(stats.leftovers_deleted),
            str(stats.log_starts_advanced),
            f"~{format_bytes(stats.lag_bytes)}",
            str(stats.lag_segments),
        )
    return table


def failures_table(report: CycleReport) -> Table | None:
    """What failed in the cycle, at which stage and why, one row each (``None``: nothing)."""
    if not report.failures:
        return None
    table = Table(title=f"failed in this cycle: {len(report.failures)}")
    for column in ("what", "stage", "why"):
        table.add_column(column)
    for failure in report.failures:
        table.add_row(failure.subject, str(failure.stage), failure.reason)
    return table


def log_report(report: CycleReport, logger: logging.Logger) -> None:
    """An idle cycle (:attr:`CycleReport.idle`) in one line, ``tiering.cycle.idle``, with the
    total copy lag; any other in one ``tiering.cycle.topic`` line per topic with Kafka's
    copy-lag metric names and its notes, one ``tiering.cycle.error`` line per failure, then
    the cycle's totals (``tiering.cycle.done``, a warning that names the first failures if
    any failed)."""
    lag_bytes = sum(t.lag_bytes for t in report.topics.values())
    lag_segments = sum(t.lag_segments for t in report.topics.values())
    if report.idle:
        event(
            logger,
            logging.INFO,
            "tiering.cycle.idle",
            msg=f"tiering cycle done in {report.seconds:.1f} s: nothing to copy or expire in "
            f"{len(report.topics)} topics",
            seconds=round(report.seconds, 1),
            topics=len(report.topics),
            RemoteCopyLagBytes=lag_bytes,
            RemoteCopyLagSegments=lag_segments,
        )
        return
    for name in sorted(report.topics):
        stats = report.topics[name]
        event(
            logger,
            logging.INFO,
            "tiering.cycle.topic",
            topic=name,
            RemoteCopyLagBytes=stats.lag_bytes,
            RemoteCopyLagSegments=stats.lag_segments,
            copied_segments=stats.segments_copied,
            copied_bytes=stats.bytes_copied,
            failed=len(report.failures_of(name)),
            expired_segments=stats.segments_expired,
            expired_bytes=stats.bytes_expired,
            leftovers_deleted=stats.leftovers_deleted,
            log_starts_moved=stats.log_starts_advanced,
            missing_offsets=stats.missing_offsets,
        )
        for note in stats.notes:
            event(logger, logging.WARNING, "tiering.cycle.topic_note", msg=note, topic=name)
    for failure in report.failures:
        where = {"topic": failure.topic, "partition": failure.partition, "segment": failure.segment}
        event(
            logger,
            logging.ERROR,
            "tiering.cycle.error",
            msg=str(failure),
            stage=str(failure.stage),
            **{key: value for key, value in where.items() if value is not None},
        )
    failed = len(report.failures)
    event(
        logger,
        logging.WARNING if failed else logging.INFO,
        "tiering.cycle.done",
        msg=f"tiering cycle done in {report.seconds:.1f} s: {report.segments_copied} segments, "
        f"{report.bytes_copied} bytes copied, {failed} failed{_named(report.failures)}",
        seconds=round(report.seconds, 1),
        segments=report.segments_copied,
        bytes=report.bytes_copied,
        failed=failed,
        RemoteCopyLagBytes=lag_bytes,
        RemoteCopyLagSegments=lag_segments,
    )


def _named(failures: tuple[Failure, ...]) -> str:
    """``: FAILURE; FAILURE; FAILURE; and N more`` for the cycle's last line (empty for none)."""
    if not failures:
        return ""
    named = "; ".join(str(f) for f in failures[:FAILURES_IN_LAST_LINE])
    rest = len(failures) - FAILURES_IN_LAST_LINE
    more = f"; and {rest} more (each in a tiering.cycle.error line)" if rest > 0 else ""
    return f": {named}{more}"
