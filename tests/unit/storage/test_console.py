"""Tables printed to a pipe keep their full headers (rich alone would assume 80 columns)."""

from __future__ import annotations

import pytest
from rich.table import Table

from storage.console import report_console


def test_a_pipe_gets_a_wide_console(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = report_console()
    table = Table(*(f"column with a long header {i}" for i in range(6)))
    table.add_row(*(str(i) for i in range(6)))
    console.print(table)
    printed = capsys.readouterr().out
    assert all(f"column with a long header {i}" in printed for i in range(6))


def test_columns_sets_the_width_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    assert report_console().width == 150
    assert report_console(stderr=True).width == 150
