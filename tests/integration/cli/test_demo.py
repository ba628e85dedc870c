"""``tierproxy demo`` as a user runs it (``make demo``), on a small record count.

It starts its own broker, runs the real pipeline and proxy commands in subprocesses, and
must exit 0 only when every record came back through the proxy, part of them from the
remote tier: on Apache Kafka (the default) because the broker deleted them, on Tansu because
the offload policy serves them; and when the Spark data source counted what was produced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def run_demo(*arguments: str, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``tierproxy demo ARGUMENTS`` as a subprocess; it must exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", *arguments],
        capture_output=True,
        text=True,
        timeout=480,
        env=environment,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_demo_reads_every_record_across_the_tier_boundary(broker: str, tmp_path: Path) -> None:
    environment = {**os.environ, "COLUMNS": "200"}
    result = run_demo(
        "--records",
        "6000",
        "--broker",
        broker,
        "--work-dir",
        str(tmp_path),
        environment=environment,
    )
    assert "every record came back exactly, in order" in result.stdout
    assert '6,000 records counted by spark.read.format("tierproxy")' in result.stdout
    served_remote = next(
        line for line in result.stdout.splitlines() if "served from remote tier" in line
    )
    remote_records = int(served_remote.split("│")[2].split()[0].replace(",", ""))
    assert 0 < remote_records < 6000
    assert (tmp_path / "remote-tier").is_dir()
    moved = next(line for line in result.stdout.splitlines() if "log start" in line)
    if broker == "kafka":
        assert "offsets are gone from the broker" in moved
    else:
        assert "unchanged" in moved


def test_a_demo_without_a_work_dir_names_no_path_it_removes(tmp_path: Path) -> None:
    """Its temporary directory is removed at the end, so it prints no log path inside it
    (a failing step keeps the directory and says where it is)."""
    environment = {**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp_path)}
    result = run_demo("--records", "2000", "--broker", "tansu", environment=environment)
    assert "logs in" not in result.stdout
    assert str(tmp_path) not in result.stdout
    assert not any(tmp_path.glob("tierproxy-demo-*"))
