"""The modules a ``tierproxy`` command line loads, for the tests that keep them few."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Set as AbstractSet
from pathlib import Path

__all__ = ["NEVER", "imported", "loaded"]

NEVER = frozenset({"pyspark", "py4j", "botocore", "aiobotocore", "boto3", "rich"})
"""Top-level packages that neither --help nor status may load: Spark, an object store's
client, rich (status prints no rich table)."""

_RUN_AND_LIST = """
import atexit, json, pathlib, runpy, sys
listing = pathlib.Path(sys.argv.pop(1))
atexit.register(lambda: listing.write_text(json.dumps(sorted(sys.modules))))
runpy.run_module("proxy.cli", run_name="__main__", alter_sys=True)
"""
"""``python -m proxy.cli`` that writes, at exit, every module the interpreter loaded."""


def imported(tmp_path: Path, *argv: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules ``tierproxy argv`` loaded (``sys.modules`` at exit) and how it ended."""
    listing = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, str(listing), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    names = set(json.loads(listing.read_text(encoding="utf-8")))
    assert "proxy.cli" not in names  # it ran as __main__, as the console script runs it
    return names, result


def loaded(names: AbstractSet[str], wanted: AbstractSet[str]) -> set[str]:
    """Those of ``wanted`` (packages or modules) that ``names`` holds."""
    return {
        name for name in names for want in wanted if name == want or name.startswith(want + ".")
    }
