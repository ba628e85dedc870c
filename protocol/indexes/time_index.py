"""Kafka's time index (``.timeindex``): sparse map from timestamps to offsets in a segment.

The file is a sequence of 12-byte entries, ``timestamp`` (int64) and ``relative offset``
(int32), big-endian (``TimeIndex.java``). An entry ``(T, O)`` says that the largest timestamp
among the batches up to and including the one ending at offset ``O`` is ``T``: any record with
a timestamp above ``T`` comes after ``O``. Timestamps strictly increase because Kafka appends
only when the segment's maximum timestamp grows. :meth:`TimeIndex.lookup` returns the entry
with the largest timestamp at or below the target, or ``(-1, base offset)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.indexes import CorruptIndexError

__all__ = ["ENTRY_SIZE", "NO_TIMESTAMP", "TimeIndex", "TimeIndexBuilder", "TimestampOffset"]

ENTRY_SIZE = 12
NO_TIMESTAMP = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: what a lookup below every entry returns."""
_ENTRY = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TimestampOffset:
    """A timestamp and the offset after which records with larger timestamps lie."""

    timestamp: int
    offset: int


class TimeIndexBuilder:
    """Accumulates time index entries with ``TimeIndex.maybeAppend``'s rules."""

    __slots__ = ("_buf", "_last", "base_offset")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._buf = bytearray()
        self._last = TimestampOffset(timestamp=NO_TIMESTAMP, offset=base_offset)

    def __len__(self) -> int:
        return len(self._buf) // ENTRY_SIZE

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base offset)`` while empty (Kafka's ``lastEntry``)."""
        return self._last

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` exceeds the last entry's.

        An equal timestamp is ignored, as Kafka ignores re-appending the last entry when a
        segment is closed.

        :raises ValueError: if the offset or timestamp goes backwards, or the offset does not
            fit a relative int32.
        """
        if len(self._buf):
            if offset < self._last.offset:
                raise ValueError(
                    f"time index offsets must not decrease: {offset} after {self._last.offset}"
                )
            if timestamp < self._last.timestamp:
                raise ValueError(
                    f"time index timestamps must not decrease: {timestamp} after "
                    f"{self._last.timestamp}"
                )
        if timestamp <= self._last.timestamp:
            return
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} is not within int32 of base {self.base_offset}")
        self._buf += _ENTRY.pack(timestamp, relative)
        self._last = TimestampOffset(timestamp=timestamp, offset=offset)

    def to_bytes(self) -> bytes:
        """The index file as Kafka leaves it after ``trimToValidSize``."""
        return bytes(self._buf)


class TimeIndex:
    """A read-only view of a time index file.

    Construction checks what Kafka's ``sanityCheck`` checks (size, last timestamp not below the
    first, last offset not below the base), so a view over a cached file is O(1) to build.
    """

    __slots__ = ("_count", "_data", "base_offset")

    def __init__(self, data: bytes | memoryview, *, base_offset: int) -> None:
        """Wrap ``data``.

        :raises CorruptIndexError: if the file fails Kafka's sanity checks.
        """
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"time index size {len(data)} is not a multiple of {ENTRY_SIZE}"
            )
        self._data = data
        self._count = len(data) // ENTRY_SIZE
        self.base_offset = base_offset
        if self._count:
            first, last = self.entry(0), self.entry(self._count - 1)
            if last.timestamp < first.timestamp:
                raise CorruptIndexError("time index's last timestamp is below its first")
            if last.offset < base_offset:
                raise CorruptIndexError("time index's last offset is below its base offset")

    def __len__(self) -> int:
        return self._count

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry (0-based).

        :raises IndexError: if there is no such entry.
        """
        if not 0 <= n < self._count:
            raise IndexError(f"time index has {self._count} entries, not {n + 1}")
        timestamp, relative = _ENTRY.unpack_from(self._data, n * ENTRY_SIZE)
        return TimestampOffset(timestamp=timestamp, offset=self.base_offset + relative)

    def entries(self) -> list[TimestampOffset]:
        """All entries in file order."""
        return [self.entry(n) for n in range(self._count)]

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base offset)`` if the index is empty."""
        if not self._count:
            return TimestampOffset(timestamp=NO_TIMESTAMP, offset=self.base_offset)
        return self.entry(self._count - 1)

    def _timestamp(self, n: int) -> int:
        timestamp: int = _ENTRY.unpack_from(self._data, n * ENTRY_SIZE)[0]
        return timestamp

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp ``<= target_timestamp``, or ``(-1, base)``.

        Kafka's ``TimeIndex.lookup``: the first record with a timestamp at or above the target
        lies at or after the returned offset's batch.
        """
        lo, hi = 0, self._count - 1
        if hi < 0 or self._timestamp(0) > target_timestamp:
            return TimestampOffset(timestamp=NO_TIMESTAMP, offset=self.base_offset)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._timestamp(mid) <= target_timestamp:
                lo = mid
            else:
                hi = mid - 1
        return self.entry(lo)
