"""Reading tierproxy's log lines back in the tests, in either ``log.format``."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from proxy.embedded.process import ManagedProcess

__all__ = ["logfmt_fields", "parse_log", "process_log"]

_PAIR: Final = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)(?:\s|$)')
_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_NAMED: Final = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def _unescaped(match: re.Match[str]) -> str:
    """A backslash escape of a quoted value (JSON's, and ``\\UXXXXXXXX``)."""
    escape = match[1]
    if escape[0] in "uU" and len(escape) > 1:
        return chr(int(escape[1:], 16))
    return _NAMED.get(escape, escape)


def logfmt_fields(line: str) -> dict[str, str]:
    """``key=value`` pairs, values bare or double-quoted with backslash escapes (those of
    tierproxy's formatter and of JSON, which Spark's log4j profile uses)."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(line):
        match = _PAIR.match(line, position)
        assert match is not None, f"not logfmt at {position}: {line!r}"
        key, value = match.groups()
        if value.startswith('"'):
            value = _ESCAPE.sub(_unescaped, value[1:-1])
        fields[key] = value
        position = match.end()
    return fields


def parse_log(text: str, fmt: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as ``fmt`` (``logfmt`` or ``json``) fields.

    :raises AssertionError: a line is not in that format.
    """
    parsed = []
    for line in text.splitlines():
        if fmt == "json":
            try:
                parsed.append(json.loads(line))
            except ValueError as err:
                raise AssertionError(f"not JSON: {line!r}") from err
        else:
            parsed.append(logfmt_fields(line))
    return parsed


def process_log(process: ManagedProcess, fmt: str) -> list[dict[str, Any]]:
    """Every line of ``process``'s log, parsed as ``fmt``: not a line it is still writing,
    nor the harness's own (those with ``--- `` mark each start of the process).

    :raises AssertionError: a line is not in that format.
    """
    text = process.log_path.read_text(encoding="utf-8", errors="replace")
    written = text[: text.rfind("\n") + 1]
    return parse_log(
        "".join(line for line in written.splitlines(True) if not line.startswith("--- ")), fmt
    )
