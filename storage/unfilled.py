"""A ``bytearray`` of a given length whose bytes are left as ``malloc`` gave them.

``bytearray(n)`` zero-fills its ``n`` bytes, and a GET's body is then overwritten by the
socket at once: the fill is pure cost, a ``memset`` of every byte received (the Spark data
source's Python workers receive each remote byte into a new body). CPython's own
``PyByteArray_FromStringAndSize(NULL, n)`` allocates without filling; it is called through
``ctypes.pythonapi`` (which holds the GIL, as a C extension would).

Only for a buffer that is written whole before any byte of it is read: what it holds before
is whatever the allocator's memory held (this process's own freed memory, or the kernel's
zeroed pages).
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable
from typing import Final

__all__ = ["unfilled_bytearray"]


def _allocator() -> Callable[[int], bytearray]:
    """CPython's unfilled allocation, or plain ``bytearray`` on another interpreter."""
    if platform.python_implementation() != "CPython":
        return bytearray
    from_string_and_size = ctypes.pythonapi.PyByteArray_FromStringAndSize
    from_string_and_size.restype = ctypes.py_object
    from_string_and_size.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)

    def allocate(length: int) -> bytearray:
        if length < 0:
            raise ValueError(f"a buffer of {length} bytes")
        body: bytearray = from_string_and_size(None, length)
        return body

    return allocate


_ALLOCATE: Final = _allocator()


def unfilled_bytearray(length: int) -> bytearray:
    """A ``bytearray`` of ``length`` bytes with unspecified contents, for the caller to
    overwrite whole.

    :raises ValueError: if ``length`` is negative.
    :raises MemoryError: if it cannot be allocated.
    """
    return _ALLOCATE(length)
