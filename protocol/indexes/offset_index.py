"""Kafka's offset index (``.index``): sparse map from offsets to byte positions in a segment.

The file is a sequence of 8-byte entries, ``relative offset`` (int32, offset minus the segment's
base offset) and ``position`` (int32, byte position of a batch in the ``.log``), big-endian,
with strictly increasing offsets (``OffsetIndex.java``). Kafka writes one entry for the *last*
offset of a batch about every ``index.interval.bytes``, pointing at the batch's first byte;
:meth:`OffsetIndex.lookup` returns the entry with the largest offset at or below the target
(or ``(base offset, 0)``), from where a forward scan finds the batch holding the target.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.indexes import CorruptIndexError

__all__ = ["ENTRY_SIZE", "OffsetIndex", "OffsetIndexBuilder", "OffsetPosition"]

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetPosition:
    """An offset and the byte position in the ``.log`` from which to scan for it."""

    offset: int
    position: int


class OffsetIndexBuilder:
    """Accumulates offset index entries and renders Kafka's file bytes."""

    __slots__ = ("_buf", "_last_offset", "base_offset")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._buf = bytearray()
        self._last_offset: int | None = None

    def __len__(self) -> int:
        return len(self._buf) // ENTRY_SIZE

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must increase strictly, as ``OffsetIndex.append`` requires.

        :raises ValueError: if the offset does not increase or does not fit a relative int32,
            or the position is not a non-negative int32.
        """
        if self._last_offset is not None and offset <= self._last_offset:
            raise ValueError(
                f"offset index entries must increase: {offset} after {self._last_offset}"
            )
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} is not within int32 of base {self.base_offset}")
        if not 0 <= position <= _INT32_MAX:
            raise ValueError(f"position {position} is not a non-negative int32")
        self._buf += _ENTRY.pack(relative, position)
        self._last_offset = offset

    def to_bytes(self) -> bytes:
        """The index file as Kafka leaves it after ``trimToValidSize`` (no preallocation)."""
        return bytes(self._buf)


class OffsetIndex:
    """A read-only view of an offset index file, for lookups without copying it.

    Construction checks only what Kafka's ``sanityCheck`` checks (size and the last entry),
    so that building a view over a cached multi-megabyte index stays O(1).
    """

    __slots__ = ("_count", "_data", "base_offset")

    def __init__(self, data: bytes | memoryview, *, base_offset: int) -> None:
        """Wrap ``data``.

        :raises CorruptIndexError: if the size is not a multiple of 8 or the last entry lies
            below the first (a truncated or foreign file).
        """
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"offset index size {len(data)} is not a multiple of {ENTRY_SIZE}"
            )
        self._data = data
        self._count = len(data) // ENTRY_SIZE
        self.base_offset = base_offset
        if self._count and self._relative(self._count - 1) < self._relative(0):
            raise CorruptIndexError("offset index's last entry is below its first")

    def __len__(self) -> int:
        return self._count

    def _relative(self, n: int) -> int:
        relative: int = _ENTRY.unpack_from(self._data, n * ENTRY_SIZE)[0]
        return relative

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry (0-based).

        :raises IndexError: if there is no such entry.
        """
        if not 0 <= n < self._count:
            raise IndexError(f"offset index has {self._count} entries, not {n + 1}")
        relative, position = _ENTRY.unpack_from(self._data, n * ENTRY_SIZE)
        return OffsetPosition(offset=self.base_offset + relative, position=position)

    def entries(self) -> list[OffsetPosition]:
        """All entries in file order."""
        return [self.entry(n) for n in range(self._count)]

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset ``<= target_offset``, or ``(base offset, 0)``.

        Kafka's ``OffsetIndex.lookup``: scanning the ``.log`` forward from the returned
        position reaches the batch that holds ``target_offset``, if the segment has it.
        """
        target = target_offset - self.base_offset
        lo, hi = 0, self._count - 1
        if hi < 0 or self._relative(0) > target:
            return OffsetPosition(offset=self.base_offset, position=0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._relative(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return self.entry(lo)
