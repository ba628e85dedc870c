"""``tierproxy --help``, each command's ``--help`` and ``status`` load only what they use.

Each runs as ``python -m proxy.cli ...`` would, in a fresh interpreter that lists at exit the
modules it loaded (``sys.modules``). What they must never load: Spark, an
object store's client and rich (none of them prints a rich table any more); ``--help`` not the
wire protocol either, nor any command it was not asked about. The same check on a ``status``
that reads a real cluster is in tests/integration/cli/test_status_output.py. Start-up time is
measured, not asserted (docs/decisions/0007-a-command-line-that-imports-what-it-runs.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

NEVER = {"pyspark", "py4j", "botocore", "aiobotocore", "boto3", "rich"}
"""Top-level packages that no --help nor status may load."""
HELP_NEVER = {
    "kio",
    "aiohttp",
    "uvloop",
    "prometheus_client",
    "proxy.app",
    "proxy.embedded",
    "proxy.commands.demo_steps",
    "storage.tiering.job",
}
"""What a command's --help does not need: the wire protocol, the serving path, the demo's
servers, the pipeline."""


_RUN_AND_LIST = """
import atexit, json, runpy, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write(json.dumps(sorted(sys.modules))))
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


def _loaded(names: set[str], wanted: set[str]) -> set[str]:
    """Those of ``wanted`` (packages or modules) that ``names`` holds."""
    return {
        name for name in names for want in wanted if name == want or name.startswith(want + ".")
    }


def test_help_loads_no_command(tmp_path: Path) -> None:
    names, result = imported(tmp_path, "--help")
    assert result.returncode == 0
    assert "status" in result.stdout
    assert not _loaded(names, NEVER | HELP_NEVER)
    assert not _loaded(names, {"proxy.commands", "proxy.settings", "storage"})


@pytest.mark.parametrize("command", ["demo", "serve", "tier", "status"])
def test_a_commands_help_loads_neither_spark_nor_its_servers(command: str, tmp_path: Path) -> None:
    names, result = imported(tmp_path, command, "--help")
    assert result.returncode == 0
    assert "--config" in result.stdout or command == "demo"
    assert not _loaded(names, NEVER | HELP_NEVER)
    others = {f"proxy.commands.{other}" for other in ("demo", "serve", "tier", "status")}
    assert _loaded(names, others) == {f"proxy.commands.{command}"}

