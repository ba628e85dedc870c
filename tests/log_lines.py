"""Reading tierproxy's log lines back in the tests, in either ``log.format``."""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["logfmt_fields", "parse_log"]

_PAIR: Final = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)(?:\s|$)')


def logfmt_fields(line: str) -> dict[str, str]:
    """``key=value`` pairs, values bare or double-quoted with backslash escapes."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(line):
        match = _PAIR.match(line, position)
        assert match is not None, f"not logfmt at {position}: {line!r}"
        key, value = match.groups()
        if value.startswith('"'):
            value = re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value[1:-1])
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
