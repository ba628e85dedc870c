"""What a tiering cycle did, for logs, the summary table and ``tierproxy status``.

Copy lag follows Kafka's RemoteLogManager metrics: ``RemoteCopyLagBytes`` is the data below
the last stable offset not yet in the remote tier, ``RemoteCopyLagSegments`` the closed
segments among it that were not copied (failures; the still-open tail is not a segment yet).
Byte figures above the remote log end are estimates from the partition's average batch size,
since the broker does not say how large a range is without reading it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.table import Table

from storage.log_event import event

__all__ = ["CycleReport", "TopicStats", "format_bytes", "log_report", "summary_table"]


@dataclass(slots=True, kw_only=True)
class TopicStats:
    """One topic's figures for one cycle (accumulated while the cycle runs)."""

    partitions: int = 0
    segments_copied: int = 0
    bytes_copied: int = 0
    copy_failures: int = 0
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
    errors: tuple[str, ...] = ()

    @property
    def bytes_copied(self) -> int:
        return sum(t.bytes_copied for t in self.topics.values())

    @property
    def segments_copied(self) -> int:
        return sum(t.segments_copied for t in self.topics.values())

    @property
    def copy_failures(self) -> int:
        return sum(t.copy_failures for t in self.topics.values())

    @property
    def idle(self) -> bool:
        """Whether the cycle did nothing worth a line per topic: nothing copied, failed,
        expired, cleaned up, moved or found missing, no note and no error."""
        return not self.errors and not any(
            t.segments_copied
            or t.copy_failures
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


def summary_table(report: CycleReport) -> Table:
    """The per-topic table printed at the end of a cycle."""
    rate = report.bytes_copied / report.copy_seconds / 1e6 if report.copy_seconds > 0 else 0.0
    table = Table(
        title=(
            f"tiering cycle: {report.segments_copied} segments, "
            f"{format_bytes(report.bytes_copied)} in {report.seconds:.1f} s "
            f"({rate:.1f} MB/s while copying)"
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
            str(stats.copy_failures),
            str(stats.segments_expired),
            str(stats.leftovers_deleted),
            str(stats.log_starts_advanced),
            f"~{format_bytes(stats.lag_bytes)}",
            str(stats.lag_segments),
        )
    return table


def log_report(report: CycleReport, logger: logging.Logger) -> None:
    """An idle cycle (:attr:`CycleReport.idle`) in one line, ``tiering.cycle.idle``, with the
    total copy lag; any other in one ``tiering.cycle.topic`` line per topic with Kafka's
    copy-lag metric names, its notes and errors, then the cycle's totals."""
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
            failed=stats.copy_failures,
            expired_segments=stats.segments_expired,
            expired_bytes=stats.bytes_expired,
            log_starts_moved=stats.log_starts_advanced,
            missing_offsets=stats.missing_offsets,
        )
        for note in stats.notes:
            event(logger, logging.WARNING, "tiering.cycle.topic_note", msg=note, topic=name)
    for error in report.errors:
        event(logger, logging.ERROR, "tiering.cycle.error", msg=error)
    event(
        logger,
        logging.INFO,
        "tiering.cycle.done",
        msg=f"tiering cycle done in {report.seconds:.1f} s: {report.segments_copied} segments, "
        f"{report.bytes_copied} bytes copied, {report.copy_failures} failed",
        seconds=round(report.seconds, 1),
        segments=report.segments_copied,
        bytes=report.bytes_copied,
        failed=report.copy_failures,
        RemoteCopyLagBytes=lag_bytes,
        RemoteCopyLagSegments=lag_segments,
    )
