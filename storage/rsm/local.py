"""Remote storage in a local directory: the embedded default, like Kafka's LocalTieredStorage.

Files sit under ``root`` at the same relative paths as the S3 keys (:mod:`storage.rsm.layout`),
so a directory can be synced to a bucket as is. Each file is written to a hidden temporary
file in the same directory, fsynced, and renamed into place, so a reader never sees a partly
written file and a crash leaves the previous state (or a stray ``.tmp`` file, never a torn one).
A segment's ``.log`` bypasses the page cache (``O_DIRECT`` where the file system allows it,
:func:`storage.durable.write_atomically`): the tiering pipeline writes each segment once and
nothing reads it soon, and a buffered write pays a fresh page-cache page per 4 KiB.

File I/O runs in the default thread pool (``asyncio.to_thread``): it blocks, and an event loop
serving Kafka clients must not stall on a disk. One thread hop per call, not per file.

The chunk cache reads ``.log`` ranges with :meth:`LocalRemoteStorage.map_log_segment`: a
read-only view of the file's mapping (one per file in use, shared by its chunks), its pages
read in and mapped in the thread without holding the GIL (:mod:`storage.rsm.mapped_pages`,
which says why one mapping per file), so the records go from the page cache to the
client's socket with no copy in between (a fresh buffer per read would cost the copy and
the zeroing of its pages). A mapping stays valid after its file is deleted (Linux keeps the
inode while mapped); files are replaced by rename and never truncated in place, so a mapped
page never vanishes under a reader. Views are released in the pool thread too
(:meth:`LocalRemoteStorage.unmap`): an unmap on the event loop would wait for the process's
memory map lock behind the pool's reads.

The one copy left is into the client's socket (``writev`` from the mapping): the pages are
written, not spliced, as ``sendfile`` and ``vmsplice`` cost more CPU on loopback, not less
(figures: ``docs/decisions/0009-remote-read-path.md``).

Local errors (a full disk, permissions) are reported as non-retriable: unlike a network blip,
they do not go away by waiting a few hundred milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from storage.durable import fsync_directory, write_atomically
from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    check_range,
)
from storage.rsm.layout import RemoteLayout
from storage.rsm.mapped_pages import MappedFiles

__all__ = ["LocalRemoteStorage"]

_T = TypeVar("_T")


class LocalRemoteStorage:
    """A :class:`~storage.rsm.base.RemoteStorageManager` over a directory tree, and the
    :class:`~storage.rsm.objects.ObjectStore` beneath
    :class:`~storage.rsm.segments.SegmentStorage` (keys are relative paths)."""

    def __init__(self, root: str | os.PathLike[str], *, prefix: str = "") -> None:
        self._root = Path(root)
        self._layout = RemoteLayout(prefix=prefix)
        self._closed = False
        self._unmapped: list[memoryview] = []
        self._mapped = MappedFiles()

    @property
    def root(self) -> Path:
        """The directory the layout's keys are relative to."""
        return self._root

    @property
    def location(self) -> str:
        """Where the objects live, for logs."""
        return f"directory {self._root}"

    @property
    def hint(self) -> str:
        return (
            f"check remote.log.storage.local.dir: {self._root} must exist or be creatable, be "
            "a directory, be writable by this process, and its file system must have free space"
        )

    async def check(self) -> None:
        """The directory exists (or can be made) and this process can write a file in it:
        one is created and removed, which a read-only mount, an immutable directory or
        missing permissions refuse (root included, whom mode bits do not stop).

        :raises RemoteStorageError: when it cannot be used.
        """
        try:
            await asyncio.to_thread(self._write_and_remove_a_file)
        except OSError as err:
            raise RemoteStorageError(
                f"cannot write in {self._root}: {err}", retriable=False
            ) from err

    def _write_and_remove_a_file(self) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self._root, prefix=".tierproxy-check-"):
            pass

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        self._check_open()
        files = [(self._layout.log_key(metadata), data.log)]
        files += [(self._layout.index_key(metadata, t), data.file_for(t)) for t in IndexType]
        try:
            await asyncio.to_thread(self._write_files, files)
        except OSError as err:
            raise RemoteStorageError(
                f"cannot store segment {metadata.segment_id.id} under {self._root}: {err}",
                retriable=False,
            ) from err

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        self._check_open()
        check_range(start, end)
        if end == start:
            return b""
        key = self._layout.log_key(metadata)
        return await self._read(key, start, end)

    async def map_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview:
        """Bytes ``[start, end)`` of the segment's ``.log`` as a read-only view of the file
        (``end`` capped at its size), for readers that keep them: no copy is made, and the
        mapping lasts as long as a view of it.

        :raises ValueError: for a negative ``start`` or ``end < start`` (caller's bug).
        :raises RemoteRangeError: when ``start`` lies beyond the file's size.
        :raises RemoteResourceNotFoundError: when the segment's ``.log`` does not exist.
        :raises RemoteStorageError: for other storage failures.
        """
        return await self.map_object_range(self._layout.log_key(metadata), start, end)

    def unmap(self, view: memoryview) -> None:
        """``view``, an answer of :meth:`map_log_segment`, is no longer kept by the caller:
        it is dropped by the pool thread of the next mapping, which unmaps it unless a view
        of it is still in use (then the last one to go unmaps it, wherever)."""
        self._unmapped.append(view)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return await self.get_object(self._layout.index_key(metadata, index_type))

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """The size of the segment's ``.log`` file, from a ``stat``
        (:class:`~storage.rsm.base.SegmentProbe`).

        :raises RemoteResourceNotFoundError: when it does not exist.
        :raises RemoteStorageError: for other storage failures.
        """
        self._check_open()
        key = self._layout.log_key(metadata)
        return await self._in_thread(key, lambda: (self._root / key).stat().st_size)

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        if not await self.delete_prefix(self._layout.segment_prefix(metadata)):
            raise RemoteResourceNotFoundError(
                f"segment {self._layout.segment_prefix(metadata)}* not found under {self._root}"
            )

    # -- objects (storage.rsm.objects.ObjectStore) ------------------------------------------

    async def put_object(self, key: str, body: bytes | memoryview) -> None:
        self._check_open()
        try:
            await asyncio.to_thread(self._write_files, [(key, body)])
        except OSError as err:
            raise RemoteStorageError(
                f"cannot store {key} under {self._root}: {err}", retriable=False
            ) from err

    async def get_object(self, key: str) -> bytes:
        self._check_open()
        return await self._read(key, 0, None)

    async def get_object_range(self, key: str, start: int, end: int) -> bytes:
        self._check_open()
        check_range(start, end)
        if end == start:
            return b""
        return await self._read(key, start, end)

    async def map_object_range(self, key: str, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` of the file ``key`` as a read-only view of its pages (see
        :meth:`map_log_segment`)."""
        self._check_open()
        check_range(start, end)
        if end == start:
            return memoryview(b"")
        unmapped, self._unmapped = self._unmapped, []

        def map_range() -> memoryview:
            unmapped.clear()  # the last references, mostly: unmapped here, not on the loop
            return self._map_range(key, start, end)

        return await self._in_thread(key, map_range)

    async def object_size(self, key: str) -> int:
        self._check_open()
        return await self._in_thread(key, lambda: (self._root / key).stat().st_size)

    async def delete_prefix(self, prefix: str) -> int:
        """Delete the files whose relative path starts with ``prefix`` (in its directory)."""
        self._check_open()
        try:
            return await asyncio.to_thread(self._delete_prefix, prefix)
        except OSError as err:
            raise RemoteStorageError(
                f"cannot delete {prefix}* under {self._root}: {err}", retriable=False
            ) from err

    async def close(self) -> None:
        self._closed = True
        self._unmapped = []

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("local remote storage is closed", retriable=False)

    async def _read(self, key: str, start: int, end: int | None) -> bytes:
        return await self._in_thread(key, lambda: self._read_range(key, start, end))

    async def _in_thread(self, key: str, call: Callable[[], _T]) -> _T:
        """``call()`` on ``key`` in the default thread pool, its errors as storage errors."""
        try:
            return await asyncio.to_thread(call)
        except FileNotFoundError as err:
            raise RemoteResourceNotFoundError(
                f"{key} not found under {self._root}", key=str(self._root / key)
            ) from err
        except OSError as err:
            raise RemoteStorageError(
                f"cannot read {key} under {self._root}: {err}", retriable=False
            ) from err

    def _read_range(self, key: str, start: int, end: int | None) -> bytes:
        with open(self._root / key, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if start > size:
                raise RemoteRangeError(key=key, start=start, size=size)
            stop = size if end is None else min(end, size)
            file.seek(start)
            return file.read(stop - start)

    def _map_range(self, key: str, start: int, end: int) -> memoryview:
        mapped = self._mapped.open(self._root / key)
        if start > mapped.size:
            raise RemoteRangeError(key=key, start=start, size=mapped.size)
        stop = min(end, mapped.size)
        if stop == start:
            return memoryview(b"")
        return mapped.view(start, stop - start)

    def _write_files(self, files: Sequence[tuple[str, bytes | memoryview]]) -> None:
        directories: set[Path] = set()
        for key, content in files:
            path = self._root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, content, direct=True)
            directories.add(path.parent)
        for directory in directories:
            fsync_directory(directory)

    def _delete_prefix(self, prefix: str) -> int:
        directory, _, name = (self._root / prefix).as_posix().rpartition("/")
        try:
            entries = os.listdir(directory)
        except FileNotFoundError:
            return 0
        deleted = 0
        for entry in entries:
            if entry.startswith(name):
                try:
                    os.unlink(os.path.join(directory, entry))
                except FileNotFoundError:
                    continue
                deleted += 1
        if deleted:
            fsync_directory(Path(directory))
        return deleted
