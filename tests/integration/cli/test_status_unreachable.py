"""``tierproxy status`` when the cluster is not there: one line on stderr and exit 1.

Unlike ``serve`` and ``tier``, status is run by a person or a script waiting for an answer:
it must neither print a traceback nor sit out the metadata manager's 120 s of retries. A
closed port (a broker that is down) fails at once; a port that accepts connections but never
answers (a hung broker, a firewall that drops) fails after ``--timeout-ms``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import free_port
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.tierproxy import write_config

pytestmark = [pytest.mark.integration]


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A port whose connections the kernel accepts and nobody ever answers."""
    with socket.create_server((LOOPBACK, 0)) as listener:
        yield f"{LOOPBACK}:{listener.getsockname()[1]}"


def status(bootstrap: str, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp_path / "status.toml", {"bootstrap.servers": bootstrap})
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "status", "--config", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard well below the metadata manager's 120 s
        check=False,
    )


def test_a_down_cluster_is_one_line_and_exit_1(tmp_path: Path) -> None:
    bootstrap = f"{LOOPBACK}:{free_port()}"
    result = status(bootstrap, tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(
        f"tierproxy status: no bootstrap server answered: cannot connect to {bootstrap}"
    ), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_cluster_that_never_answers_is_given_up_after_the_timeout(
    silent_listener: str, tmp_path: Path
) -> None:
    result = status(silent_listener, tmp_path, "--timeout-ms", "1500")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"tierproxy status: no broker at {silent_listener} answered within 1500 ms\n"
    )
