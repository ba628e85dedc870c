"""Bytes as the buffers they are made of, so that large values go out uncopied.

A Fetch response served from the remote tier is mostly records: views of the chunk cache's
bytes. Encoding it into one ``bytes`` would copy them once, and ``BytesIO.getvalue`` again.
Instead kio's own writer writes into a :class:`BufferSink`, which joins the small fields
into pieces and keeps every value of at least :data:`BY_REFERENCE_BYTES` as the object it
was given; the :class:`Buffers` it returns go to the transport's ``writelines``, and the
frame's size prefix is the sum of their lengths. The bytes are kio's, in kio's order: only
where they live differs.

Records that span chunks of the chunk cache are :class:`Buffers` too (the views of each
chunk's part, in order), never joined into one new buffer. Such a value is sliced
(:meth:`Buffers.__getitem__`), its batch headers are read where they lie
(:meth:`Buffers.locate`), and a :class:`BufferSink` that is handed one as a value keeps its
parts: the records reach the socket's ``writev`` from the chunks themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["BY_REFERENCE_BYTES", "BufferSink", "Buffers", "contiguous"]

BY_REFERENCE_BYTES: Final = 4096
"""Values this large or larger are kept by reference. Copying a few KiB costs less than one
more buffer in the socket's ``writev``; the records of a Fetch are almost always larger."""

Piece = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Buffers:
    """Bytes in pieces (an encoded message, records across chunks); ``len`` is their size,
    ``bytes`` joins them (tests, logs, the rare reader that needs one buffer)."""

    parts: tuple[Piece, ...]
    size: int

    @classmethod
    def of(cls, parts: tuple[Piece, ...]) -> memoryview | Buffers:
        """``parts`` as one value: a view when there is only one (or none), else pieces."""
        if len(parts) <= 1:
            return memoryview(parts[0] if parts else b"")
        return cls(parts=parts, size=sum(len(part) for part in parts))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __getitem__(self, key: slice) -> memoryview | Buffers:
        """Bytes ``[start, stop)`` (a slice with step 1), without copying: a view of one
        part if they lie in one, else the parts' views.

        :raises ValueError: for a slice with a step other than 1.
        """
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("Buffers slices must be contiguous")
        parts: list[Piece] = []
        base = 0
        for part in self.parts:
            end = base + len(part)
            if end > start and base < stop:
                parts.append(memoryview(part)[max(start - base, 0) : stop - base])
            base = end
            if base >= stop:
                break
        return Buffers.of(tuple(parts))

    def locate(self, position: int, size: int) -> tuple[Piece, int]:
        """A buffer holding bytes ``[position, position + size)`` (fewer at the end) and
        where they start in it: the part they lie in, or a copy of them if they cross a
        part's end (a batch header that straddles two chunks: 61 bytes, rarely)."""
        base = 0
        for part in self.parts:
            end = base + len(part)
            if position < end:
                if position + size <= end:
                    return part, position - base
                return bytes(self[position : position + size]), 0
            base = end
        return b"", 0


def contiguous(data: Piece | Buffers) -> Piece:
    """``data`` as one buffer: itself, or its parts joined (a copy)."""
    return bytes(data) if isinstance(data, Buffers) else data


class BufferSink:
    """A file-like ``write`` target that keeps large values by reference (see the module)."""

    __slots__ = ("_parts", "_size", "_small")

    def __init__(self, head: bytes = b"") -> None:
        """:param head: the bytes the message starts with (its header)."""
        self._parts: list[Piece] = []
        self._small = bytearray(head)
        self._size = len(head)

    def write(self, data: Piece | Buffers) -> int:
        if isinstance(data, Buffers):
            for part in data.parts:
                self.write(part)
            return data.size
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
