"""What one Spark task reads: plain values, pickled from the driver to an executor."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from storage.model import RemoteLogSegmentMetadata
from storage.spark_source.decode import AbortedRange

__all__ = ["LocalSlice", "RemoteSlice", "Slice", "Task"]


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
    read_cuts: tuple[int, ...] = ()
    """Batch boundaries inside the range (from the offset index) where one GET of the
    range ends and the next begins: see :meth:`reads`."""

    def reads(self) -> list[tuple[int, int]]:
        """The byte ranges the executor GETs and decodes one after the other: together the
        slice's range, each of whole batches.

        A first read of up to 4 MiB, so that the task's first rows reach Spark without
        waiting for a large GET, then up to 64 MiB at a time, not the whole slice: the
        worker keeps freed memory for bodies up to 96 MiB
        (:mod:`storage.spark_source.worker`), and a task holds two (the one decoded, the
        next one received). Larger GETs cost the object store less per byte (figures:
        ``docs/decisions/0011-spark-workers-tasks-and-reads.md``)."""
        bounds = [self.start_position, *self.read_cuts, self.end_position]
        return list(itertools.pairwise(bounds))


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSlice:
    """Offsets ``[from_offset, until_offset)`` read from the broker's own log."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    read_committed: bool


Slice = RemoteSlice | LocalSlice

Task = tuple[RemoteSlice, ...] | tuple[LocalSlice]
"""What one Spark task reads: consecutive remote slices of one partition, in offset order, or
one slice of the broker's tail."""
