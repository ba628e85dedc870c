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
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["TMP_SUFFIX", "fsync_directory", "write_atomically"]

TMP_SUFFIX = ".tmp"
"""Suffix of the hidden temporary files; a leftover after a crash can be removed on start-up."""


def write_atomically(
    path: Path, data: bytes | bytearray | memoryview, *, sync_directory: bool = False
) -> None:
    """Write ``data`` to ``path`` so that readers see either nothing or all of it.

    The temporary file is hidden (``.name.<random>.tmp``), so directory listings and globs
    for the final names never see it.

    :param sync_directory: also make the rename durable (fsync the parent directory).
    :raises OSError: if the file cannot be written; no temporary file is left behind.
    """
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")
    try:
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
