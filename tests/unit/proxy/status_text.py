"""Reading ``tierproxy status``'s text back, for tests that compare it with ``--json``.

Written from the layouts' rules (proxy.commands.status_layout), not from its code: a table
is a header line of one-word headers and a line of one-word cells per partition; a stacked
block is a ``label  value`` line per field, long values continued on indented lines, blocks
apart by a blank line, a value possibly followed by a note in parentheses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["HEADERS", "expected_cells", "read_stacked", "read_table"]

HEADERS: Final[Mapping[str, str]] = {
    "TOPIC": "topic",
    "PARTITION": "partition",
    "TIERED": "tiered",
    "LOCAL-START": "local log start",
    "LOCAL-END": "local log end",
    "REMOTE-START": "remote log start",
    "REMOTE-END": "remote log end",
    "SEGMENTS": "remote segments",
    "REMOTE-BYTES": "remote bytes",
    "STORED-BYTES": "stored bytes",
    "LAG-OFFSETS": "lag offsets",
    "LAG-BYTES": "lag bytes",
    "MISSING": "missing offsets",
}
"""Each table header and the stacked layout's label of the same field."""

_NOTE = re.compile(r" \([^()]*\)$")


def expected_cells(row: Mapping[str, Any]) -> dict[str, str]:
    """The cells a ``--json`` row must be shown with, by table header."""

    def number(value: int | None) -> str:
        return "-" if value is None or value < 0 else str(value)

    return {
        "TOPIC": row["topic"],
        "PARTITION": str(row["partition"]),
        "TIERED": "yes" if row["tiered"] else "no",
        "LOCAL-START": number(row["local_log_start"]),
        "LOCAL-END": number(row["local_log_end"]),
        "REMOTE-START": number(row["remote_log_start"]),
        "REMOTE-END": number(row["remote_log_end"]),
        "SEGMENTS": str(row["segments"]),
        "REMOTE-BYTES": str(row["remote_bytes"]),
        "STORED-BYTES": number(row["stored_bytes"]),
        "LAG-OFFSETS": str(row["lag_offsets"]),
        "LAG-BYTES": str(row["lag_bytes"]),
        "MISSING": ",".join(f"{first}-{last}" for first, last in row["missing"]) or "-",
    }


def read_table(lines: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a table, each by header; every line must have every column."""
    headers = lines[0].split()
    assert headers == list(HEADERS), lines[0]
    rows = [line.split() for line in lines[1:]]
    assert all(len(row) == len(headers) for row in rows), lines
    return [dict(zip(headers, row, strict=True)) for row in rows]


def read_stacked(lines: Sequence[str]) -> list[dict[str, str]]:
    """The blocks of the stacked layout, each by table header, notes left out."""
    labels = {label: header for header, label in HEADERS.items()}
    blocks: list[dict[str, str]] = []
    block: dict[str, str] = {}
    last = ""
    for line in [*lines, ""]:
        if not line:
            if block:
                blocks.append(block)
            block = {}
        elif line.startswith(" "):
            block[last] += " " + line.strip()
        else:
            label, value = re.split(r"\s{2,}", line, maxsplit=1)
            last = labels[label]
            block[last] = value
    for found in blocks:
        assert list(found) == list(HEADERS), found
        for header, value in found.items():
            found[header] = _NOTE.sub("", value).replace(", ", ",")
    return blocks
