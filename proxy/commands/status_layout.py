"""What ``tierproxy status`` prints: every value whole, at any width, and greppable in a pipe.

Rules of this file:

- No value is ever cut. Offsets, counts and bytes are printed as exact integers (as
  Kafka's own tools print them); an absent one is ``-``.
- Not a terminal (a pipe, a file, a container's log): one header line, then one line per
  partition with every column, whatever ``$COLUMNS`` says — ``grep orders`` gives a
  partition's whole row, ``awk '{print $5}'`` a column. Columns are padded to their widest
  value; no value holds a space.
- A terminal as wide as that table gets the same table; a narrower one gets one block per
  partition, a ``label  value`` line per field (blocks apart by a blank line), with long
  values wrapped at the width between their parts, never inside one.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from storage.tiering.status import PartitionStatus

__all__ = ["status_lines"]

_GAP: Final = "  "
"""Between table columns, and between a label and its value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Field:
    header: str
    """The table's column header (one word, as Kafka's tools name theirs)."""
    label: str
    """The stacked layout's label."""
    cell: Callable[[PartitionStatus], str]
    """The value as one word: the table's cell and the start of the stacked value."""
    note: Callable[[PartitionStatus], str] = lambda _row: ""
    """What the stacked layout adds after the value, for a person (``""``: nothing)."""
    numeric: bool = True


def _offset(value: int | None) -> str:
    return "-" if value is None or value < 0 else str(value)


def _ranges(row: PartitionStatus) -> str:
    return ",".join(f"{first}-{last}" for first, last in row.missing) or "-"


def _saved(row: PartitionStatus) -> str:
    """What compression saved, when the bytes in storage are known and fewer."""
    stored = row.stored_bytes
    if stored is None or row.remote_bytes <= 0 or stored >= row.remote_bytes:
        return ""
    return f"(-{100 * (row.remote_bytes - stored) / row.remote_bytes:.0f} %)"


def _missing_count(row: PartitionStatus) -> str:
    return f"({row.missing_offsets} offsets)" if row.missing else ""


_FIELDS: Final = (
    _Field(header="TOPIC", label="topic", cell=lambda r: r.topic, numeric=False),
    _Field(header="PARTITION", label="partition", cell=lambda r: str(r.partition)),
    _Field(
        header="TIERED",
        label="tiered",
        cell=lambda r: "yes" if r.tiered else "no",
        numeric=False,
    ),
    _Field(
        header="LOCAL-START", label="local log start", cell=lambda r: _offset(r.local_log_start)
    ),
    _Field(header="LOCAL-END", label="local log end", cell=lambda r: _offset(r.local_log_end)),
    _Field(
        header="REMOTE-START", label="remote log start", cell=lambda r: _offset(r.remote_log_start)
    ),
    _Field(header="REMOTE-END", label="remote log end", cell=lambda r: _offset(r.remote_log_end)),
    _Field(header="SEGMENTS", label="remote segments", cell=lambda r: str(r.segments)),
    _Field(header="REMOTE-BYTES", label="remote bytes", cell=lambda r: str(r.remote_bytes)),
    _Field(
        header="STORED-BYTES",
        label="stored bytes",
        cell=lambda r: _offset(r.stored_bytes),
        note=_saved,
    ),
    _Field(header="LAG-OFFSETS", label="lag offsets", cell=lambda r: str(r.lag_offsets)),
    _Field(
        header="LAG-BYTES",
        label="lag bytes",
        cell=lambda r: str(r.lag_bytes),
        note=lambda _row: "(estimated)",
    ),
    _Field(
        header="MISSING",
        label="missing offsets",
        cell=_ranges,
        note=_missing_count,
        numeric=False,
    ),
)
_LABEL_WIDTH: Final = max(len(f.label) for f in _FIELDS)


def status_lines(rows: Sequence[PartitionStatus], *, width: int | None) -> list[str]:
    """The lines ``tierproxy status`` prints for ``rows``.

    :param width: the terminal's columns; ``None`` when the output is not a terminal, which
        gets the table however wide it is.
    """
    table = _table(rows)
    if width is None:
        return table
    if not rows:
        return ["no tiered partitions"]
    if max(len(line) for line in table) <= width:
        return table
    return _stacked(rows, width)


def _table(rows: Sequence[PartitionStatus]) -> list[str]:
    cells = [[f.header for f in _FIELDS], *([f.cell(row) for f in _FIELDS] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_FIELDS))]
    return [
        _GAP.join(
            cell.rjust(w) if f.numeric else cell.ljust(w)
            for f, cell, w in zip(_FIELDS, line, widths, strict=True)
        ).rstrip()
        for line in cells
    ]


def _stacked(rows: Sequence[PartitionStatus], width: int) -> list[str]:
    lines: list[str] = []
    indent = " " * (_LABEL_WIDTH + len(_GAP))
    for row in rows:
        if lines:
            lines.append("")
        for f in _FIELDS:
            value = " ".join(part for part in (f.cell(row).replace(",", ", "), f.note(row)) if part)
            lines += textwrap.wrap(
                value,
                width=max(width, len(indent) + 1),
                initial_indent=f.label.ljust(_LABEL_WIDTH) + _GAP,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
    return lines
