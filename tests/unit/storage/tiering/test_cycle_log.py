"""What a tiering cycle logs: an idle cycle in one line, a busy one per topic; the summary
table on a terminal only."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from storage.tiering.job import _show
from storage.tiering.report import CycleReport, Failure, Stage, TopicStats, log_report


def report(**busy: int) -> CycleReport:
    quiet = TopicStats(partitions=3, lag_bytes=100, lag_segments=0)
    other = TopicStats(partitions=1, lag_bytes=20)
    for name, value in busy.items():
        setattr(other, name, value)
    return CycleReport(started_ms=0, seconds=1.5, copy_seconds=0.0, topics={"a": quiet, "b": other})


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.tierproxy_event for r in caplog.records]  # type: ignore[attr-defined]


def test_an_idle_cycle_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    idle = report()
    assert idle.idle

    with caplog.at_level(logging.INFO):
        log_report(idle, logging.getLogger("storage.tiering.job"))

    assert events(caplog) == ["tiering.cycle.idle"]
    assert caplog.messages == ["tiering cycle done in 1.5 s: nothing to copy or expire in 2 topics"]
    fields = caplog.records[0].tierproxy_fields  # type: ignore[attr-defined]
    assert fields["RemoteCopyLagBytes"] == 120 and fields["topics"] == 2


@pytest.mark.parametrize(
    "busy",
    [
        {"segments_copied": 1},
        {"segments_expired": 1},
        {"leftovers_deleted": 1},
        {"log_starts_advanced": 1},
        {"missing_offsets": 5},
    ],
)
def test_a_cycle_that_did_something_logs_each_topic(
    busy: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    done = report(**busy)
    assert not done.idle

    with caplog.at_level(logging.INFO):
        log_report(done, logging.getLogger("storage.tiering.job"))

    assert events(caplog) == ["tiering.cycle.topic", "tiering.cycle.topic", "tiering.cycle.done"]


def test_errors_and_notes_are_not_idle() -> None:
    noted = report()
    noted.topics["a"].notes.append("compacted: not tiered")
    assert not noted.idle
    failed = CycleReport(
        started_ms=0,
        seconds=1.0,
        copy_seconds=0.0,
        topics={},
        failures=(Failure(stage=Stage.COPY, reason="x"),),
    )
    assert not failed.idle


@pytest.mark.parametrize(
    ("terminal", "busy", "table"),
    [
        (True, True, True),
        (True, False, False),
        (False, True, False),
        (False, False, False),
    ],
)
def test_the_summary_table_is_for_a_terminal_and_a_busy_cycle(
    terminal: bool, busy: bool, table: bool, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)

    with caplog.at_level(logging.INFO):
        _show(report(segments_copied=1) if busy else report(), console)

    assert ("tiering cycle:" in out.getvalue()) == table
