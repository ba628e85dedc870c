"""An encoded message as the buffers it is made of, so that large values go out uncopied.

A Fetch response served from the remote tier is mostly records: views of the chunk cache's
bytes. Encoding it into one ``bytes`` would copy them once, and ``BytesIO.getvalue`` again.
Instead kio's own writer writes into a :class:`BufferSink`, which joins the small fields
into pieces and keeps every value of at least :data:`BY_REFERENCE_BYTES` as the object it
was given; the :class:`Buffers` it returns go to the transport's ``writelines``, and the
frame's size prefix is the sum of their lengths. The bytes are kio's, in kio's order: only
where they live differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["BY_REFERENCE_BYTES", "BufferSink", "Buffers"]

BY_REFERENCE_BYTES: Final = 4096
"""Values this large or larger are kept by reference. Copying a few KiB costs less than one
more buffer in the socket's ``writev``; the records of a Fetch are almost always larger."""

Piece = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Buffers:
    """An encoded message in pieces; ``len`` is its size, ``bytes`` joins it (tests, logs)."""

    parts: tuple[Piece, ...]
    size: int

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


class BufferSink:
    """A file-like ``write`` target that keeps large values by reference (see the module)."""

    __slots__ = ("_parts", "_size", "_small")

    def __init__(self, head: bytes = b"") -> None:
        """:param head: the bytes the message starts with (its header)."""
        self._parts: list[Piece] = []
        self._small = bytearray(head)
        self._size = len(head)

    def write(self, data: Piece) -> int:
        size = len(data)
        if size >= BY_REFERENCE_BYTES:
            if self._small:
                self._parts.append(self._small)
                self._small = bytearray()
            self._parts.append(data)
        else:
            self._small += data
        self._size += size
        return size

    def buffers(self) -> Buffers:
        """What was written, in order."""
        parts = [*self._parts, self._small] if self._small else self._parts
        return Buffers(parts=tuple(parts), size=self._size)
