"""Spill files: where fetch tasks keep a cycle's windows until the copy tasks have built the
segments from them, and the pool that lets the next cycle write into the same files again.

A cycle's windows live in ``<spill root>/<run id>/w<window>.bin``, a directory of its own, so
a file read by a copy task is always the one this cycle's fetch wrote (never a previous
cycle's file of the same name). Once the cycle is over, its files are not deleted but moved
into ``<spill root>/pool`` (:func:`recycle_spill`), up to :data:`POOL_MAX_BYTES`; a fetch
task takes one from there (:func:`open_spill`) and overwrites it in place. Under the
default spill root (in the system's temporary directory) the pool is deleted when the
pipeline closes (:func:`discard_spill_pool`); a configured ``tiering.spill.dir`` keeps it for
the next pipeline (a restart, or a benchmark's pipeline per cycle) until :func:`prune_spill`
finds it unused for six hours.

Why: the kernel allocates a page-cache page for every byte written to a new file and frees
them when the file is deleted; on a virtual machine with free-page reporting (Firecracker)
the host has taken those pages back by the next cycle, so every write would fault in fresh
memory (figures: ``docs/decisions/0010-pipeline-copies-and-memory.md``). The price: the
pool's pages stay in the page cache (the kernel may still evict them) and its files on disk,
and overwritten pages are written back by the kernel's flusher in its own time.

Taking a file from the pool is a rename, so two tasks never get the same file, and the pool
may be shared by every pipeline using the spill root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["POOL_MAX_BYTES", "discard_spill_pool", "open_spill", "prune_spill", "recycle_spill"]

POOL_MAX_BYTES = 1024 * 1024 * 1024
"""Spill kept for reuse between cycles: eight windows of ``tiering.task.max.bytes``; a
larger backlog's surplus is deleted as before."""
POOL_DIR = "pool"
_STALE_SPILL_SECONDS = 6 * 3600


@contextlib.contextmanager
def open_spill(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for writing from its start: a file taken from the pool if there is
    one, else a new one. On leaving, the file is cut where writing stopped (its descriptor's
    offset, which ``write`` and ``os.copy_file_range`` alike advance), so a pooled file keeps
    none of its old bytes past the new ones."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _take_from_pool(path) as spill:
        yield spill
        spill.flush()
        os.ftruncate(spill.fileno(), os.lseek(spill.fileno(), 0, os.SEEK_CUR))


def _take_from_pool(path: Path) -> BinaryIO:
    """A file of the pool renamed to ``path`` and opened in place, or a new one."""
    pool = path.parent.parent / POOL_DIR
    with contextlib.suppress(FileNotFoundError), os.scandir(pool) as entries:
        for entry in entries:
            try:
                os.rename(entry.path, path)
            except FileNotFoundError:
                continue  # another task took it first
            return path.open("r+b")
    return path.open("w+b")


def recycle_spill(run_dir: Path, *, pool_max_bytes: int = POOL_MAX_BYTES) -> None:
    """Move a finished cycle's spill files into the pool while it holds at most
    ``pool_max_bytes``, delete the rest, and remove ``run_dir``."""
    pool = run_dir.parent / POOL_DIR
    try:
        with os.scandir(run_dir) as entries:
            files = sorted(entries, key=lambda e: e.name)
    except FileNotFoundError:
        return
    pool.mkdir(exist_ok=True)
    with os.scandir(pool) as pooled:
        held = sum(e.stat().st_size for e in pooled if e.is_file())
    for entry in files:
        size = entry.stat().st_size if entry.is_file() else 0
        if entry.is_file() and held + size <= pool_max_bytes:
            os.rename(entry.path, pool / f"{uuid.uuid4().hex}.bin")
            held += size
    shutil.rmtree(run_dir, ignore_errors=True)


def discard_spill_pool(root: Path) -> None:
    """Delete the pool and then ``root`` itself if nothing else is in it (another pipeline
    still using the root only starts a new pool)."""
    shutil.rmtree(root / POOL_DIR, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty: another pipeline is using it
        root.rmdir()


def prune_spill(root: Path, *, keep: str) -> None:
    """Remove spill directories of earlier cycles that nobody cleaned (a killed driver), and
    a pool nobody used for as long."""
    try:
        with os.scandir(root) as found:
            entries = list(found)
    except FileNotFoundError:
        return
    cutoff = time.time() - _STALE_SPILL_SECONDS
    for entry in entries:
        if entry.name != keep and entry.is_dir() and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry.path, ignore_errors=True)
