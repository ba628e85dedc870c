"""Turn the options into offsets, and offset ranges into the slices Spark tasks read.

Offsets: a bound (earliest, latest, an offset, a timestamp) becomes an offset per partition.
The remote tier answers first, the broker for what it does not hold (``includeLocal``):
earliest is the remote log start, latest the broker's high watermark (its last stable offset
for READ_COMMITTED; both from a Fetch, as some brokers answer ListOffsets LATEST with the last
batch's base offset), and a timestamp is looked up in the remote time indexes before the
broker's (Kafka's ``fetchOffsetByTimestamp`` order).

Slices: one per remote segment, or per ``maxSliceBytes`` of a large one, cut at offset-index
entries (batch boundaries), so a task fetches exactly the batches its offsets need; then one
for the broker's tail. Tasks: consecutive remote slices of a partition together, up to
``maxSliceBytes``, since every task costs Spark more than reading a few MiB. The ranges come
from the offset index alone. For READ_COMMITTED the remote part ends at the first
transaction still open at the remote tier's end (its marker is only in the broker's log,
which the pipeline never deletes up to): the broker's tail, read at READ_COMMITTED, starts
there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from storage.log_event import event
from storage.spark_source.catalog import Catalog, PartitionInfo, RemoteSegment, SourceError
from storage.spark_source.decode import AbortedRange
from storage.spark_source.options import Bound, BoundKind, Bounds, SourceOptions
from storage.spark_source.slices import LocalSlice, RemoteSlice, Slice, Task

__all__ = ["READ_BYTES", "OffsetRanges", "concurrently", "plan_tasks", "resolve_offsets"]

T = TypeVar("T")

OffsetRanges = Mapping[tuple[str, int], tuple[int, int]]
"""``[from, until)`` per ``(topic, partition)``."""

log = logging.getLogger(__name__)

READ_BYTES: Final = 64 * 1024 * 1024
"""Bytes of a slice one GET reads at most (where batch boundaries allow): see
:meth:`RemoteSlice.reads`."""
FIRST_READ_BYTES: Final = 4 * 1024 * 1024
"""Bytes of a slice's first GET at most: its task's rows start while the rest is received."""
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
        self._broker: dict[int, asyncio.Future[dict[tuple[str, int], int]]] = {}
        """One question per timestamp, shared by partitions planned at the same time."""
        self._ends: dict[tuple[str, int], int] | None = None

    async def _broker_answer(self, part: PartitionInfo, timestamp: int) -> int:
        asked = self._broker.get(timestamp)
        if asked is None:
            asked = self._broker[timestamp] = asyncio.ensure_future(
                self._catalog.broker_offsets(
                    self._parts, timestamp, read_committed=self._options.read_committed
                )
            )
        return (await asked)[part.topic, part.partition]

    async def broker_earliest(self, part: PartitionInfo) -> int:
        return await self._broker_answer(part, _EARLIEST)

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


@dataclass(frozen=True, slots=True, kw_only=True)
class _PartitionPlan:
    """What one partition's range comes from: remote segments, then the broker's tail."""

    part: PartitionInfo
    segments: list[RemoteSegment]
    aborted: tuple[AbortedRange, ...] | None
    local: tuple[int, int] | None


async def plan_tasks(
    catalog: Catalog,
    parts: Sequence[PartitionInfo],
    ranges: OffsetRanges,
    options: SourceOptions,
) -> list[Task]:
    """The tasks whose slices together hold every record of ``ranges`` (empty ranges give
    none), cut smaller where ``minPartitions`` asks for more tasks.

    :raises SourceError: when offsets of a range are no longer stored and
        ``failOnDataLoss`` is true.
    """
    resolver = _Resolver(catalog, parts, options)
    wanted = [(part, ranges.get((part.topic, part.partition), (0, 0))) for part in parts]
    plans = await concurrently(
        [
            _partition_plan(catalog, resolver, part, start=start, until=until, options=options)
            for part, (start, until) in wanted
            if start < until
        ]
    )
    max_bytes = options.max_slice_bytes
    local_parts = 1
    if options.min_partitions is not None:
        max_bytes, local_parts = _finer(plans, options.min_partitions, max_bytes)
    tasks: list[Task] = []
    for plan in plans:
        tasks.extend(_tasks(_slices(plan, max_bytes, local_parts, options), max_bytes))
    return tasks


def _tasks(slices: Sequence[Slice], max_bytes: int) -> list[Task]:
    """One partition's ``slices`` (in offset order) as tasks: consecutive remote slices
    together while their bytes stay within ``max_bytes``; each slice of the broker's tail
    alone, so that a partition's small last segment does not make a task of its own and
    Spark runs fewer tasks of more equal size.
    """
    tasks: list[Task] = []
    group: list[RemoteSlice] = []
    size = 0
    for piece in slices:
        span = piece.end_position - piece.start_position if isinstance(piece, RemoteSlice) else 0
        if group and (isinstance(piece, LocalSlice) or size + span > max_bytes):
            tasks.append(tuple(group))
            group, size = [], 0
        if isinstance(piece, LocalSlice):
            tasks.append((piece,))
        else:
            group.append(piece)
            size += span
    if group:
        tasks.append(tuple(group))
    return tasks


async def concurrently(steps: Sequence[Awaitable[T]]) -> list[T]:
    """The results of ``steps``, run at the same time, in their order.

    Each partition's plan waits on GETs of its own indexes, which one after the other would
    add up in every query's planning. The first failure
    cancels the other steps and is raised as it is (a :class:`SourceError` stays one).
    """
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _partition_plan(
    catalog: Catalog,
    resolver: _Resolver,
    part: PartitionInfo,
    *,
    start: int,
    until: int,
    options: SourceOptions,
) -> _PartitionPlan:
    span = catalog.remote_span(part)
    if span is None or start < span[0]:
        available = (
            await resolver.earliest(part) if options.include_local or span is None else span[0]
        )
        if start < available:
            _data_loss(
                options,
                f"{part.topic}-{part.partition}: offsets {start} to {available - 1} "
                "are no longer stored",
            )
            start = available
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
        if not options.include_local and reached < min(until, remote_end):
            _data_loss(
                options,
                f"{part.topic}-{part.partition}: the remote tier has no segment at "
                f"offset {reached}",
            )
    aborted = None
    if options.read_committed:
        aborted = await catalog.aborted_after(part, (s.segment for s in segments))
    local = None
    if options.include_local and reached < until:
        broker_start = await resolver.broker_earliest(part)
        if reached < broker_start:
            _data_loss(
                options,
                f"{part.topic}-{part.partition}: offsets {reached} to {broker_start - 1} "
                "are neither in the remote tier nor on the broker",
            )
            reached = broker_start
        local = (reached, until) if reached < until else None
    return _PartitionPlan(part=part, segments=segments, aborted=aborted, local=local)


def _data_loss(options: SourceOptions, message: str) -> None:
    """Spark's ``reportDataLoss``: fail, or warn and read on."""
    if options.fail_on_data_loss:
        raise SourceError(
            f"{message}; some data may have been lost (aged out, or the topic deleted). "
            "Set the option failOnDataLoss to false to read what is left instead."
        )
    event(
        log,
        logging.WARNING,
        "source.data_lost",
        msg=f"{message}; reading what is left (failOnDataLoss is false)",
    )


def _finer(plans: Sequence[_PartitionPlan], min_partitions: int, max_bytes: int) -> tuple[int, int]:
    """The largest remote byte range and the pieces per broker tail that give about
    ``min_partitions`` slices, each part of the data in proportion to its share (as Spark's
    ``KafkaOffsetRangeCalculator``: remote data by bytes, the broker's tails by offsets)."""
    remote = [
        (first, end)
        for plan in plans
        for found in plan.segments
        for first, end in _byte_ranges(found, max_bytes)
    ]
    tails = [end - first for plan in plans if plan.local is not None for first, end in [plan.local]]
    if len(remote) + len(tails) >= min_partitions:
        return max_bytes, 1
    remote_offsets = sum(
        found.until_offset - found.from_offset for plan in plans for found in plan.segments
    )
    total = remote_offsets + sum(tails)
    remote_share = max(1, round(min_partitions * remote_offsets / total)) if remote_offsets else 0
    remote_bytes = sum(end - first for first, end in remote)
    finer_bytes = (
        max(1, min(max_bytes, -(-remote_bytes // remote_share))) if remote_share else max_bytes
    )
    local_parts = max(1, round((min_partitions - remote_share) / len(tails))) if tails else 1
    return finer_bytes, local_parts


def _slices(
    plan: _PartitionPlan, max_bytes: int, local_parts: int, options: SourceOptions
) -> list[Slice]:
    part = plan.part
    slices: list[Slice] = []
    for found in plan.segments:
        start, entries, last = _batch_starts(found)
        for first, end in _pieces(start, entries, last, max_bytes):
            slices.append(
                RemoteSlice(
                    topic=part.topic,
                    partition=part.partition,
                    segment=found.segment,
                    start_position=first,
                    end_position=end,
                    from_offset=found.from_offset,
                    until_offset=found.until_offset,
                    aborted=plan.aborted,
                    read_cuts=_read_cuts(entries, first, end),
                )
            )
    if plan.local is not None:
        first, until = plan.local
        pieces = min(local_parts, until - first)
        cuts = [first + (until - first) * n // pieces for n in range(pieces + 1)]
        slices.extend(
            LocalSlice(
                topic=part.topic,
                partition=part.partition,
                from_offset=low,
                until_offset=high,
                read_committed=options.read_committed,
            )
            for low, high in itertools.pairwise(cuts)
        )
    return slices


def _byte_ranges(found: RemoteSegment, max_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` pieces of the segment holding ``found``'s offsets, cut at index
    entries (batch starts) into pieces of at most ``max_bytes`` where entries allow."""
    start, cuts, end = _batch_starts(found)
    return _pieces(start, cuts, end, max_bytes)


def _read_cuts(cuts: Sequence[int], first: int, end: int) -> tuple[int, ...]:
    """Where the executor's GETs of the slice ``[first, end)`` are cut: at some of the
    index entries ``cuts``, :data:`FIRST_READ_BYTES` or so after ``first``, then
    :data:`READ_BYTES` or so apart."""
    inside = [cut for cut in cuts if first < cut < end]
    (_first, head), *_rest = _pieces(first, inside, end, FIRST_READ_BYTES)
    if head == end:
        return ()
    pieces = _pieces(head, [cut for cut in inside if cut > head], end, READ_BYTES)
    return (head, *(piece_end for _piece_start, piece_end in pieces[:-1]))


def _batch_starts(found: RemoteSegment) -> tuple[int, list[int], int]:
    """The position of the first batch ``found`` needs, the index entries after it, and the
    position after the last batch it needs.

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
    return start, cuts, end


def _pieces(start: int, cuts: Sequence[int], end: int, max_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut at some of ``cuts`` into pieces of at most ``max_bytes`` (or of
    one cut's span, where cuts are further apart)."""
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
