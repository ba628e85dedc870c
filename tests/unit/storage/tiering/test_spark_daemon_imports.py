"""The pipeline's Spark daemon may import its task modules before it forks workers only
because none of those imports starts a thread (a forked child keeps none of them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_COUNT_THREADS = """
import os, threading
import storage.tiering.spark_daemon
print(threading.active_count(), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_importing_the_daemon_starts_no_thread() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_THREADS], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["1", "1"]  # Python's threads, then the OS's
