"""glibc's ``malloc`` told to keep freed large buffers, for processes that reuse them.

The tiering pipeline's and the Spark data source's Python workers allocate buffers of
megabytes per Fetch, per S3 part and per GET body. glibc maps each such buffer afresh and
unmaps it when freed, or trims the heap it came from, so every use faults in and zeroes new
pages (what that costs: ``docs/decisions/0010-pipeline-copies-and-memory.md``). Each caller
picks its thresholds for the buffers it reuses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Final

__all__ = ["M_ARENA_MAX", "M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "keep_freed_buffers"]

M_TRIM_THRESHOLD: Final = -1
"""glibc's ``mallopt`` option: free memory kept at the heap's top before it is returned."""
M_MMAP_THRESHOLD: Final = -3
"""glibc's ``mallopt`` option: allocations above it are mapped on their own."""
M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` option: how many arenas threads allocate from at most."""


def keep_freed_buffers(
    *, trim_threshold_bytes: int, mmap_threshold_bytes: int, one_arena: bool = False
) -> None:
    """Serve buffers below ``mmap_threshold_bytes`` from a heap that keeps up to
    ``trim_threshold_bytes`` free. Nothing under another C library, whose ``mallopt``
    numbers differ (or which has none).

    With ``one_arena``, threads started from now on allocate from the main thread's heap
    too, for buffers allocated on another thread (an I/O thread receiving GETs): a thread's
    own arena grows in heaps of at most 64 MiB that glibc unmaps as they empty (the trim
    threshold does not keep them), and a larger buffer is mapped on its own whatever the
    mmap threshold, so every buffer there would fault in afresh.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes)
    libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold_bytes)
    if one_arena:
        libc.mallopt(M_ARENA_MAX, 1)
