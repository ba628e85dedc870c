"""The console that commands print their tables and progress to.

On a terminal, rich fits tables to its width. Sent to a pipe, a log file or a container's
log, rich would assume 80 columns and cut headers to ``loc…``; there, tables get the width
of ``$COLUMNS`` or, without it, enough for every column of the widest table we print.
"""

from __future__ import annotations

import os
import sys
from typing import Final, TextIO

from rich.console import Console

__all__ = ["report_console"]

_WIDTH_WITHOUT_TERMINAL: Final = 240


def report_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that never cuts tables when it is not a terminal."""
    stream: TextIO = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else _WIDTH_WITHOUT_TERMINAL
    return Console(stderr=stderr, width=width)
