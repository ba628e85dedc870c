"""Turn the options into offsets, and offset ranges into the slices Spark tasks read.

Offsets: a bound (earliest, latest, an offset, a timestamp) becomes an offset per partition.
The remote tier answers first, the broker for what it does not hold (``includeLocal``):
earliest is the remote log start, latest the broker's high watermark (its last stable offset
for READ_COMMITTED; both from a Fetch, as some brokers answer ListOffsets LATEST with the last
batch's base offset), and a timestamp is looked up in the remote time indexes before the
broker's (Kafka's ``fetchOffsetByTimestamp`` order).

Slices: one per remote segment, or per ``maxSliceBytes`` of a large one, cut at offset-index
entries (batch boundaries), so a task fetches one ranged GET of exactly the batches its
offsets need; then one for the broker's tail. The ranges come from the offset index alone.
For READ_COMMITTED the remote part ends at the first transaction still open at the remote
tier's end (its marker is only in the broker's log, which the pipeline never deletes up to):
the broker's tail, read at READ_COMMITTED, starts there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from storage.spark_source.catalog import Catalog, PartitionInfo, RemoteSegment
from storage.spark_source.options import Bound, BoundKind, Bounds, SourceOptions
from storage.spark_source.slices import LocalSlice, RemoteSlice, Slice

__all__ = ["OffsetRanges", "plan_slices", "resolve_offsets"]

OffsetRanges = Mapping[tuple[str, int], tuple[int, int]]
"""``[from, until)`` per ``(topic, partition)``."""

_EARLIEST: Final = -2
_LATEST: Final = -1


class _Resolver:
    """Resolves bounds of many partitions, asking the broker once per question."""

    def __init__(
        self, catalog: Catalog, parts: Sequence[PartitionInfo], options: SourceOptions
    ) -> None:
        self._catalog = catalog
        self._parts = parts
        self._options = options
        self._broker: dict[int, dict[tuple[str, int], int]] = {}
        self._ends: dict[tuple[str, int], int] | None = None

    async def _broker_answer(self, part: PartitionInfo, timestamp: int) -> int:
        if timestamp not in self._broker:
            self._broker[timestamp] = await self._catalog.broker_offsets(
                self._parts, timestamp, read_committed=self._options.read_committed
            )
        return self._broker[timestamp][part.topic, part.partition]

    async def earliest(self, part: PartitionInfo) -> int:
        span = self._catalog.remote_span(part)
        broker = await self._broker_answer(part, _EARLIEST)
        return broker if span is None else min(span[0], broker)

    async def latest(self, part: PartitionInfo) -> int:
        if self._options.include_local:
            if self._ends is None:
                starts = {
                    (p.topic, p.partition): await self._broker_answer(p, _EARLIEST)
                    for p in self._parts
                }
                self._ends = await self._catalog.broker_ends(
                    self._parts, starts, read_committed=self._options.read_committed
                )
            end = self._ends.get((part.topic, part.partition))
            # A broker whose Fetch answer leaves the partition out: its ListOffsets LATEST.
            return await self._broker_answer(part, _LATEST) if end is None else end
        span = self._catalog.remote_span(part)
        if span is None:
            return await self.earliest(part)
        end = span[1]
        if self._options.read_committed:
            stable = await self._catalog.remote_stable_end(part)
            end = end if stable is None else min(end, stable)
        return end

    async def for_time(self, part: PartitionInfo, timestamp: int) -> int:
        found = await self._catalog.remote_offset_for_time(part, timestamp)
        if found is None and self._options.include_local:
            answer = await self._broker_answer(part, timestamp)
            found = None if answer < 0 else answer
        return await self.latest(part) if found is None else found

    async def resolve(self, part: PartitionInfo, bound: Bound) -> int:
        if bound.kind is BoundKind.EARLIEST:
            return await self.earliest(part)
        if bound.kind is BoundKind.LATEST:
            return await self.latest(part)
        if bound.kind is BoundKind.TIMESTAMP:
            return await self.for_time(part, bound.value)
        return bound.value


async def resolve_offsets(
    catalog: Catalog,
    parts: Sequence[PartitionInfo],
    bounds: Bounds,
    options: SourceOptions,
) -> dict[tuple[str, int], int]:
    """The offset each partition's bound stands for."""
    resolver = _Resolver(catalog, parts, options)
    return {
        (p.topic, p.partition): await resolver.resolve(p, bounds.of(p.topic, p.partition))
        for p in parts
    }


async def plan_slices(
    catalog: Catalog,
    parts: Sequence[PartitionInfo],
    ranges: OffsetRanges,
    options: SourceOptions,
) -> list[Slice]:
    """The slices that together hold every record of ``ranges`` (empty ranges give none)."""
    slices: list[Slice] = []
    for part in parts:
        start, until = ranges.get((part.topic, part.partition), (0, 0))
        if start < until:
            slices.extend(await _partition_slices(catalog, part, start, until, options))
    return slices


async def _partition_slices(
    catalog: Catalog, part: PartitionInfo, start: int, until: int, options: SourceOptions
) -> list[Slice]:
    span = catalog.remote_span(part)
    reached = start
    segments: list[RemoteSegment] = []
    remote_end = None if span is None else span[1]
    if remote_end is not None and options.read_committed:
        # Transactions open at the remote tier's end ended (or not) in the broker's log only:
        # from the first of them on, the broker answers (its log start never passes it).
        stable = await catalog.remote_stable_end(part)
        remote_end = remote_end if stable is None else min(remote_end, stable)
    if span is not None and remote_end is not None and start < remote_end:
        reached = max(start, span[0])
        async for found in catalog.remote_segments(part, reached, min(until, remote_end)):
            segments.append(found)
            reached = found.until_offset
    aborted = None
    if options.read_committed:
        aborted = await catalog.aborted_after(part, (s.segment for s in segments))
    slices: list[Slice] = []
    for found in segments:
        for first, end in _byte_ranges(found, options.max_slice_bytes):
            slices.append(
                RemoteSlice(
                    topic=part.topic,
                    partition=part.partition,
                    segment=found.segment,
                    start_position=first,
                    end_position=end,
                    from_offset=found.from_offset,
                    until_offset=found.until_offset,
                    aborted=aborted,
                )
            )
    if options.include_local and reached < until:
        slices.append(
            LocalSlice(
                topic=part.topic,
                partition=part.partition,
                from_offset=reached,
                until_offset=until,
                read_committed=options.read_committed,
            )
        )
    return slices


def _byte_ranges(found: RemoteSegment, max_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` pieces of the segment holding ``found``'s offsets, cut at index
    entries (batch starts) into pieces of at most ``max_bytes`` where entries allow.

    An entry ``(o, p)`` says the batch at ``p`` ends at offset ``o``: the first position
    after every record below ``until`` is the entry following the first one with
    ``o >= until - 1``, or the segment's end.
    """
    index = found.index
    start = index.lookup(found.from_offset).position
    end = found.segment.segment_size_in_bytes
    cuts: list[int] = []
    last_needed = found.until_offset - 1
    for n in range(len(index)):
        entry = index.entry(n)
        if entry.position <= start:
            continue
        if n > 0 and index.entry(n - 1).offset >= last_needed:
            end = entry.position
            break
        cuts.append(entry.position)
    pieces = []
    piece_start = start
    previous = start
    for cut in [*cuts, end]:
        if cut - piece_start > max_bytes and previous > piece_start:
            pieces.append((piece_start, previous))
            piece_start = previous
        previous = cut
    pieces.append((piece_start, end))
    return pieces
