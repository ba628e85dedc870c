"""What one Spark task reads: plain values, pickled from the driver to an executor."""

from __future__ import annotations

from dataclasses import dataclass

from storage.model import RemoteLogSegmentMetadata
from storage.spark_source.decode import AbortedRange

__all__ = ["LocalSlice", "RemoteSlice", "Slice"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSlice:
    """Bytes ``[start_position, end_position)`` of a remote segment's ``.log``, whose
    records in ``[from_offset, until_offset)`` are rows (the positions come from the offset
    index, so the range is whole batches and holds every record of the offset range)."""

    topic: str
    partition: int
    segment: RemoteLogSegmentMetadata
    start_position: int
    end_position: int
    from_offset: int
    until_offset: int
    aborted: tuple[AbortedRange, ...] | None
    """Aborted transactions that may touch the range (READ_COMMITTED); ``None`` reads
    uncommitted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSlice:
    """Offsets ``[from_offset, until_offset)`` read from the broker's own log."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    read_committed: bool


Slice = RemoteSlice | LocalSlice
