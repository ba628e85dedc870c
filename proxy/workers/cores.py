"""How many cores this process may use: the default number of workers."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Final

__all__ = ["available_cores"]

_CGROUP_CPU_MAX: Final = Path("/sys/fs/cgroup/cpu.max")


def available_cores(cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a cpuset), capped by
    its cgroup v2 CPU quota rounded up (a container's CPU limit, which affinity does not
    show: a pod limited to 2 CPUs on a 64-core node gets 2), and at least 1."""
    cores = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(cpu_max)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_quota(cpu_max: Path) -> float | None:
    """CPUs allowed by ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD"); None when unlimited or
    unreadable."""
    try:
        quota, period = cpu_max.read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
