"""glibc's ``malloc`` told to keep freed large buffers, for processes that reuse them.

The tiering pipeline's and the Spark data source's Python workers allocate buffers of
megabytes per Fetch, per S3 part and per GET body. glibc maps each such buffer afresh and
unmaps it when freed, or trims the heap it came from, so every use faults in and zeroes new
pages (a quarter of an upload's perf samples; minor faults 116k → 20k per GiB read by the
data source once kept). Each caller picks its thresholds for the buffers it reuses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Final

__all__ = ["M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "keep_freed_buffers"]

M_TRIM_THRESHOLD: Final = -1
"""glibc's ``mallopt`` option: free memory kept at the heap's top before it is returned."""
M_MMAP_THRESHOLD: Final = -3
"""glibc's ``mallopt`` option: allocations above it are mapped on their own."""


def keep_freed_buffers(*, trim_threshold_bytes: int, mmap_threshold_bytes: int) -> None:
    """Serve buffers below ``mmap_threshold_bytes`` from a heap that keeps up to
    ``trim_threshold_bytes`` free. Nothing under another C library, whose ``mallopt``
    numbers differ (or which has none)."""
    if platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes)
    libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold_bytes)
