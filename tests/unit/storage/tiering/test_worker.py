"""The worker runtime: freed large buffers are reused, not faulted in again, and what tasks
share (the metadata producer and its producer id) is built once per worker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

_ALLOCATE = """
import resource, sys
from storage.tiering.worker import _keep_freed_buffers
if sys.argv[1] == "tuned":
    _keep_freed_buffers()
buffer = bytearray(16 << 20)
del buffer
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    buffer = bytearray(16 << 20)
    del buffer
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    """Minor page faults of three 16 MiB allocations after a first one, in a fresh process
    (malloc settings are per process)."""
    done = subprocess.run(
        [sys.executable, "-c", _ALLOCATE, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_16_mib_buffer_is_reused_without_page_faults() -> None:
    # Without the settings each allocation here maps 4096 pages afresh ("default": about
    # 4,070 faults); not asserted, since transparent huge pages set to "always" lower it.
    assert _faults("tuned") < 100


_SHARE = """
from storage.tiering.worker import worker_runtime
runtime = worker_runtime()
built = []
def build(name):
    built.append(name)
    return object()
first = runtime.shared(("producer", "a"), lambda: build("a"))
assert runtime.shared(("producer", "a"), lambda: build("a")) is first
assert worker_runtime().shared(("producer", "b"), lambda: build("b")) is not first
print(",".join(built))
"""


def test_what_tasks_share_is_built_once_per_worker_and_key() -> None:
    """Each task of a worker gets the same metadata producer (one InitProducerId per worker,
    not per task); another metadata topic or broker gets its own. In a fresh process: the
    runtime freezes the collector's view of the process."""
    done = subprocess.run(
        [sys.executable, "-c", _SHARE], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "a,b"
