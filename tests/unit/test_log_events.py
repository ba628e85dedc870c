"""Every log line of tierproxy's own code is a structured event with a dotted name.

Read from the sources: a plain ``log.warning("...")`` in ``proxy/`` or ``storage/`` would be
a line whose ``event`` is no name (``log.message``), and a sentence passed as an event's
name would be a name nobody can alert on.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("proxy", "storage")
LEVEL_METHODS: Final = {"debug", "info", "warning", "error", "exception", "critical", "log"}
LOGGER_NAME: Final = re.compile(r"^_?(log|logger)$")
DOTTED: Final = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")
HELPER: Final = Path("storage/log_event.py")
"""The one place that calls a logger directly."""


def sources() -> list[tuple[Path, ast.Module]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative != HELPER:
                found.append((relative, ast.parse(path.read_text(encoding="utf-8"))))
    return found


def is_logger(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return bool(LOGGER_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(LOGGER_NAME.match(node.attr))
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "logging.getLogger"


def test_no_plain_logger_call_in_the_product() -> None:
    plain = [
        f"{path}:{node.lineno}: {ast.unparse(node)[:80]}"
        for path, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LEVEL_METHODS
        and is_logger(node.func.value)
    ]
    assert plain == []


def test_every_event_name_is_dotted() -> None:
    names = [
        (path, node.lineno, node.args[2].value)
        for path, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "event"
        and len(node.args) >= 3
        and isinstance(node.args[2], ast.Constant)
    ]
    assert len(names) > 100
    assert [name for name in names if not DOTTED.match(str(name[2]))] == []
