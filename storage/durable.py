"""Writing a file so that a crash leaves the old file, the new one, or none: never a torn one.

Four places keep files on local disk: the local remote storage manager, the metadata
snapshots, and the disk tiers of the index and chunk caches. They share this one writer.

The data is fsynced before the rename, for all four, caches included. Without it a crash
(power loss, a kernel panic) after the rename reached the disk but before the data did leaves
a file of the right name and size holding zeros; a restarted proxy's cache would then serve
those zeros as index entries or record batches, which is worse than a miss. The fsync costs a
disk flush per file written, always on a worker thread and, for the chunk cache, after the
read that loaded the chunk was already answered. Kafka's ``RemoteIndexCache`` skips it and
pays instead with a sanity check of every index file it reloads; our caches have no such
check, so they need the fsync.

Whether the rename itself survives a crash is the caller's choice (``sync_directory``): the
storage manager and the snapshots need it; a cache that loses an entry only downloads it again.

Large files nobody reads soon (the local remote tier's segments) may bypass the page cache
(``direct``): a buffered write copies every byte into page-cache pages the kernel allocates
for the new file, and on a virtual machine with free-page reporting each fresh page costs a
fault in the host too. With ``O_DIRECT`` through an aligned bounce buffer the disk reads the
buffer itself, and the fsync has no dirty pages to write
(``docs/decisions/0010-pipeline-copies-and-memory.md``).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import uuid
from pathlib import Path

__all__ = ["TMP_SUFFIX", "fsync_directory", "write_atomically"]

TMP_SUFFIX = ".tmp"
"""Suffix of the hidden temporary files; a leftover after a crash can be removed on start-up."""


_DIRECT_CHUNK_BYTES = 4 * 1024 * 1024
"""Bounce buffer per writing thread; a multiple of every block size ``O_DIRECT`` may need."""
_DIRECT_ALIGNMENT = 4096
"""File offsets, lengths and the buffer address are aligned to this (the largest logical
block size of common disks), so that one layout suits every device."""
_bounce = threading.local()


def write_atomically(
    path: Path,
    data: bytes | bytearray | memoryview,
    *,
    sync_directory: bool = False,
    direct: bool = False,
) -> None:
    """Write ``data`` to ``path`` so that readers see either nothing or all of it.

    The temporary file is hidden (``.name.<random>.tmp``), so directory listings and globs
    for the final names never see it.

    :param sync_directory: also make the rename durable (fsync the parent directory).
    :param direct: bypass the page cache where the file system allows it (``O_DIRECT``;
        buffered otherwise).
    :raises OSError: if the file cannot be written; no temporary file is left behind.
    """
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")
    try:
        large = direct and memoryview(data).nbytes >= _DIRECT_CHUNK_BYTES
        if not (large and _try_direct(temporary, data)):
            with open(temporary, "xb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if sync_directory:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make renames and unlinks in ``directory`` durable (POSIX needs the directory synced).

    :raises OSError: if the directory cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _try_direct(path: Path, data: bytes | bytearray | memoryview) -> bool:
    """Write and fsync ``data`` to the new file ``path`` with ``O_DIRECT``.

    The disk reads the caller's buffer itself when the kernel accepts its address (a mapped
    file from a page boundary, as the local tier's segments mostly are); otherwise, and for
    the unaligned end, the bytes go through this thread's aligned bounce buffer.

    :returns: False, with no file left, when the file system refuses ``O_DIRECT``.
    """
    view = memoryview(data).cast("B")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_DIRECT", 0))
    except OSError as err:
        if err.errno == errno.EINVAL:
            return False
        raise
    try:
        bounce = _bounce_buffer()
        for start in range(_write_in_place(fd, view), len(view), _DIRECT_CHUNK_BYTES):
            chunk = view[start : start + _DIRECT_CHUNK_BYTES]
            bounce[: len(chunk)] = chunk
            padded = -(-len(chunk) // _DIRECT_ALIGNMENT) * _DIRECT_ALIGNMENT
            _write_all(fd, memoryview(bounce)[:padded])
        os.ftruncate(fd, len(view))  # the last chunk was padded to the alignment
        os.fsync(fd)
    except OSError as err:
        os.close(fd)
        os.unlink(path)
        if err.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    return True


def _write_in_place(fd: int, view: memoryview) -> int:
    """Write the aligned start of ``view`` straight from its memory; the bytes written (none
    when the kernel refuses the address, the file offset back at the start)."""
    aligned = len(view) // _DIRECT_ALIGNMENT * _DIRECT_ALIGNMENT
    try:
        _write_all(fd, view[:aligned])
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
        os.lseek(fd, 0, os.SEEK_SET)
        return 0
    return aligned


def _bounce_buffer() -> mmap.mmap:
    """This thread's page-aligned buffer, kept for the thread's life: its pages are reused."""
    buffer: mmap.mmap | None = getattr(_bounce, "buffer", None)
    if buffer is None:
        buffer = mmap.mmap(-1, _DIRECT_CHUNK_BYTES)
        _bounce.buffer = buffer
    return buffer


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]
