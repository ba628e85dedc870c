"""Read-only views of a file's pages, mapped and read in without holding the GIL.

The local directory's chunks are mappings of its segment files (:mod:`storage.rsm.local`
says why). A mapping is of use only once its pages are in memory and mapped, or the event
loop would wait for the disk when it sends them; so they are populated in the pool thread
that maps them. CPython 3.11's ``mmap`` holds the GIL through ``mmap()`` and ``madvise()``:
populating a cold 4 MiB chunk that way stopped the event loop for as long as the disk took
(a 380 MiB file: 200-300 ms without a single switch to another thread). On Linux the
mapping is therefore made through libc with ctypes, which releases the GIL for the call,
with ``MAP_POPULATE``; the view's last reference unmaps it (also through libc, without the
GIL). Elsewhere the ``mmap`` module maps it and the kernel is only asked to read ahead.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from typing import Final

__all__ = ["map_read_only"]

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

_MAP_FAILED: Final = ctypes.c_void_p(-1).value


def map_read_only(fd: int, offset: int, length: int) -> memoryview:
    """Bytes ``[offset, offset + length)`` of the open file ``fd`` as a read-only view of its
    pages, in memory when this returns (on Linux); unmapped when the last view of it goes.
    ``fd`` may be closed afterwards. Blocks on the disk: call it from a pool thread.

    :raises ValueError: for a negative offset or a length below one byte (caller's bug).
    :raises OSError: when the file cannot be mapped.
    """
    if offset < 0 or length < 1:
        raise ValueError(f"invalid mapping of {length} bytes at {offset}")
    # A mapping starts on a page boundary; the view starts at ``offset`` inside it.
    lead = offset % mmap.ALLOCATIONGRANULARITY
    if _LIBC is None:
        return _map_with_module(fd, offset - lead, length + lead)[lead:]
    return _map_with_libc(_LIBC, fd, offset - lead, length + lead)[lead:]


def _map_with_libc(libc: ctypes.CDLL, fd: int, offset: int, length: int) -> memoryview:
    flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
    address = libc.mmap(None, length, mmap.PROT_READ, flags, fd, offset)
    if address is None or address == _MAP_FAILED:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mmap: {os.strerror(errno)}")
    pages = (ctypes.c_char * length).from_address(address)
    unmap = weakref.finalize(pages, libc.munmap, address, length)
    unmap.atexit = False  # a view still used while the interpreter exits must stay valid
    return memoryview(pages).cast("B").toreadonly()


def _map_with_module(fd: int, offset: int, length: int) -> memoryview:
    mapped = mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=offset)
    mapped.madvise(mmap.MADV_WILLNEED)
    return memoryview(mapped)
