"""``tierproxy --help``, each command's ``--help`` and ``status`` load only what they use.

Each runs as ``python -m proxy.cli ...`` would, in a fresh interpreter that lists at exit the
modules it loaded (``sys.modules``). What they must never load: Spark, an
object store's client and rich (none of them prints a rich table any more); ``--help`` not the
wire protocol either, nor any command it was not asked about. The same check on a ``status``
that reads a real cluster is in tests/integration/cli/test_status_output.py. Start-up time is
measured, not asserted (docs/decisions/0007-a-command-line-that-imports-what-it-runs.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.proxy.cli_modules import NEVER, imported, loaded

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


def test_help_loads_no_command(tmp_path: Path) -> None:
    names, result = imported(tmp_path, "--help")
    assert result.returncode == 0
    assert "status" in result.stdout
    assert not loaded(names, NEVER | HELP_NEVER)
    assert not loaded(names, {"proxy.commands", "proxy.settings", "storage"})


@pytest.mark.parametrize("command", ["demo", "serve", "tier", "status"])
def test_a_commands_help_loads_neither_spark_nor_its_servers(command: str, tmp_path: Path) -> None:
    names, result = imported(tmp_path, command, "--help")
    assert result.returncode == 0
    assert "--config" in result.stdout or command == "demo"
    assert not loaded(names, NEVER | HELP_NEVER)
    others = {f"proxy.commands.{other}" for other in ("demo", "serve", "tier", "status")}
    assert loaded(names, others) == {f"proxy.commands.{command}"}


def test_status_without_a_cluster_loads_neither_spark_nor_an_object_store(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tierproxy.toml"
    config.write_text(
        'bootstrap.servers = "127.0.0.1:9"\n'  # discard: nothing listens, refused at once
        'remote.log.storage.backend = "local"\n'
        f'remote.log.storage.local.dir = "{tmp_path / "remote"}"\n',
        encoding="utf-8",
    )
    names, result = imported(tmp_path, "status", "--config", str(config), "--timeout-ms", "5000")
    assert result.returncode == 1
    assert "tierproxy status: " in result.stderr
    assert not loaded(names, NEVER | {"aiohttp"})
