"""Read-only views of a file's pages, mapped and read in without holding the GIL.

The local directory's chunks are views of its segment files (:mod:`storage.rsm.local`
says why). A view is of use only once its pages are in memory and mapped, or the event
loop would wait for the disk when it sends them; so they are populated in the pool thread
that asks for them. CPython 3.11's ``mmap`` holds the GIL through ``mmap()`` and
``madvise()``: populating a cold 4 MiB chunk that way would stop the event loop for as long
as the disk takes. On Linux the file is therefore mapped through libc with ctypes, which
releases the GIL for each call. Elsewhere the ``mmap`` module maps it and the kernel is only
asked to read ahead.

One mapping per file, not per chunk
    A file is mapped whole, once, advised ``MADV_HUGEPAGE``, and each chunk is a view of
    that mapping whose pages ``MADV_POPULATE_READ`` maps (Linux 5.14; earlier kernels are
    only asked to read them ahead, ``MADV_WILLNEED``). The kernel then reads the file into
    the page cache in large folios (2 MiB on x86-64, on a file system that has them, such
    as ext4 or XFS), which a chunk maps and unmaps in a few batches instead of one
    page-table entry per 4 KiB page. That takes the file's read-ahead state, which lives
    in its open file: a mapping per chunk, each of a freshly opened file, gets 4 KiB pages
    after the first chunks. The remote tier's ``.log`` files are written around the page
    cache (``O_DIRECT``), so these mappings are what reads them in (what a chunk costs
    either way: ``docs/decisions/0009-remote-read-path.md``). The advice is
    ignored where transparent huge pages are off, and pages cached before keep their
    folios.

Lifetimes
    A chunk's view keeps its file's mapping; its last reference gives its pages back
    (``MADV_DONTNEED``: they stay in the page cache, no longer mapped), so the pages mapped
    are those of chunks in use, as before, and not the rest of a file read once. The
    file's mapping goes with its last chunk (:class:`MappedFiles` only remembers it while
    it is in use). A mapping stays valid after its file is deleted or replaced: it holds
    the inode; a later view of the path maps the new file.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from errno import EINVAL
from pathlib import Path
from typing import Final

__all__ = ["MappedFile", "MappedFiles"]

_LIBC: Final = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
if _LIBC is not None:
    _LIBC.mmap.restype = ctypes.c_void_p
    _LIBC.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    ]
    _LIBC.munmap.restype = ctypes.c_int
    _LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _LIBC.madvise.restype = ctypes.c_int
    _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_MAP_FAILED: Final = ctypes.c_void_p(-1).value
_MADV_HUGEPAGE: Final = 14
_MADV_POPULATE_READ: Final = 22
"""Linux's ``madvise`` advice values that CPython 3.11's ``mmap`` module lacks."""


class _Populate:
    """Whether ``MADV_POPULATE_READ`` works here (until a kernel answers ``EINVAL``)."""

    by_advice = True


class MappedFile:
    """A read-only mapping of a whole file, as it was when opened; views of its pages."""

    __slots__ = ("__weakref__", "_libc", "_mapped", "identity", "size")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Map the file at ``path`` (nothing is read yet). Blocks: call it from a pool thread.

        :raises OSError: when it cannot be opened or mapped (``FileNotFoundError`` if absent).
        """
        with open(path, "rb") as file:
            status = os.fstat(file.fileno())
            self.identity = (status.st_dev, status.st_ino)
            """Which file this is: a path may name another one later."""
            self.size = status.st_size
            self._libc = _LIBC
            self._mapped: int | mmap.mmap | None = None
            if self.size == 0:
                return  # nothing to map (a mapping has at least one byte)
            if self._libc is None:
                self._mapped = mmap.mmap(file.fileno(), self.size, prot=mmap.PROT_READ)
            else:
                self._mapped = _map_with_libc(self._libc, file.fileno(), self.size)
                unmap = weakref.finalize(self, self._libc.munmap, self._mapped, self.size)
                unmap.atexit = False  # views still used while the interpreter exits stay valid

    def view(self, offset: int, length: int) -> memoryview:
        """Bytes ``[offset, offset + length)`` as a read-only view of the file's pages, in
        memory when this returns (on Linux 5.14 and later). Blocks on the disk: call it from
        a pool thread. The view's last reference releases its pages, wherever it goes.

        :raises ValueError: for a range outside the file or under one byte (caller's bug).
        :raises OSError: when the pages cannot be read in.
        """
        if offset < 0 or length < 1 or offset + length > self.size:
            raise ValueError(f"invalid view of {length} bytes at {offset} of {self.size}")
        # Advice is given for whole pages; the view starts at ``offset`` inside the first.
        lead = offset % mmap.ALLOCATIONGRANULARITY
        start, size = offset - lead, length + lead
        if isinstance(self._mapped, mmap.mmap):
            self._mapped.madvise(mmap.MADV_WILLNEED, start, size)
            return memoryview(self._mapped)[offset : offset + length]
        assert self._libc is not None and self._mapped is not None
        address = self._mapped + start
        _populate(self._libc, address, size)
        pages = (ctypes.c_char * size).from_address(address)
        # The finalizer holds this mapping until the view's pages are given back.
        release = weakref.finalize(pages, _release, self._libc, address, size, self)
        release.atexit = False
        return memoryview(pages).cast("B").toreadonly()[lead:]


class MappedFiles:
    """The mappings of files in use, one per file: a path's views share its mapping (and
    its read-ahead state) while any view of it is alive, unless the file was replaced.

    Safe from several threads: two that map a new file at once both map it, and the later
    mapping is the one shared from then on (both are valid).
    """

    def __init__(self) -> None:
        self._in_use: weakref.WeakValueDictionary[Path, MappedFile] = weakref.WeakValueDictionary()

    def open(self, path: Path) -> MappedFile:
        """The mapping of the file now at ``path``. Blocks: call it from a pool thread.

        :raises OSError: when it cannot be opened or mapped (``FileNotFoundError`` if absent).
        """
        status = os.stat(path)
        mapped = self._in_use.get(path)
        if mapped is None or mapped.identity != (status.st_dev, status.st_ino):
            mapped = self._in_use[path] = MappedFile(path)
        return mapped


def _map_with_libc(libc: ctypes.CDLL, fd: int, size: int) -> int:
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mmap: {os.strerror(errno)}")
    libc.madvise(address, size, _MADV_HUGEPAGE)  # refused: the pages come as they are
    return int(address)


def _populate(libc: ctypes.CDLL, address: int, size: int) -> None:
    """Read in and map the pages of ``[address, address + size)``."""
    if _Populate.by_advice:
        if libc.madvise(address, size, _MADV_POPULATE_READ) == 0:
            return
        errno = ctypes.get_errno()
        if errno != EINVAL:
            raise OSError(errno, f"madvise: {os.strerror(errno)}")
        _Populate.by_advice = False  # before Linux 5.14
    libc.madvise(address, size, mmap.MADV_WILLNEED)


def _release(libc: ctypes.CDLL, address: int, size: int, _mapped: MappedFile) -> None:
    """Unmap a view's pages from its file's mapping (they stay in the page cache); a view
    of them made since (a chunk read again) maps them back when it is read."""
    libc.madvise(address, size, mmap.MADV_DONTNEED)
