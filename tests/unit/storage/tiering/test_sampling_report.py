"""Sample figures from raw Fetch bytes, and the cycle report's rendering."""

from __future__ import annotations

import logging

import pytest
from rich.console import Console

from protocol.records import Record, build_record_batch
from storage.tiering.report import (
    CycleReport,
    Failure,
    Stage,
    TopicStats,
    format_bytes,
    log_report,
    summary_table,
)
from storage.tiering.sampling import _boundary_epoch, sample_figures


def batch(base: int, count: int, ts: int, epoch: int = 0) -> bytes:
    return build_record_batch(
        base_offset=base,
        records=[Record(value=b"v" * 50, timestamp=ts)] * count,
        partition_leader_epoch=epoch,
    )


def test_figures_start_at_the_asked_offset() -> None:
    first, second = batch(0, 10, 100), batch(10, 5, 200)
    data = first + second
    ts, ratio = sample_figures(data) or (0, 0.0)
    assert ts == 100 and ratio == pytest.approx(len(data) / 15)
    ts, ratio = sample_figures(data, from_offset=10) or (0, 0.0)
    assert ts == 200 and ratio == pytest.approx(len(second) / 5)
    # Only a cut-off batch after the skipped one: its header still answers.
    ts, ratio = sample_figures(first + second[:70], from_offset=10) or (0, 0.0)
    assert ts == 200 and ratio == pytest.approx(len(second) / 5)
    assert sample_figures(first, from_offset=10) is None
    assert sample_figures(b"") is None


def test_boundary_epoch_is_that_of_the_batch_holding_the_offset() -> None:
    data = batch(0, 10, 1, epoch=4) + batch(10, 1, 1, epoch=5)
    assert _boundary_epoch(data, 9) == 4
    assert _boundary_epoch(data, 10) is None
    assert _boundary_epoch(b"", 0) is None


def test_report_renders_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    stats = TopicStats(partitions=2, segments_copied=3, bytes_copied=5 * 1024 * 1024)
    stats.notes.append("compacted")
    report = CycleReport(
        started_ms=0,
        seconds=2.0,
        copy_seconds=1.0,
        topics={"t": stats},
        failures=(Failure(stage=Stage.COPY, reason="boom"),),
    )
    console = Console(record=True, width=200)
    console.print(summary_table(report))
    text = console.export_text()
    assert "3 segments" in text and "5.2 MB/s" in text and "5 MiB" in text
    with caplog.at_level(logging.INFO):
        log_report(report, logging.getLogger("t"))
    topic = next(r for r in caplog.records if r.getMessage() == "tiering.cycle.topic")
    assert topic.tierproxy_fields["RemoteCopyLagBytes"] == 0  # type: ignore[attr-defined]
    assert "compacted" in caplog.text
    assert "boom" in caplog.text
    assert [format_bytes(v) for v in (0, 1023, 1024, 1536 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1 KiB",
        "1.5 TiB",
    ]
