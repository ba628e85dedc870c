"""The remote log metadata cache: what ``__remote_log_metadata`` says, ready for lookups.

Kafka's ``RemoteLogMetadataCache`` keeps, per partition, a map from leader epoch to an
offset → segment-id map, plus unreferenced segments. This cache answers the same questions
from a compact per-partition store (:mod:`storage.rlmm.store`, about 80 bytes per segment)
and reads the leader epochs of each segment when it needs them:

Which copy serves an offset
    A segment *serves* offset ``o`` under a lineage (a leader-epoch history) when it is
    COPY_SEGMENT_FINISHED, covers ``o``, and its own epochs say that ``o`` was written in
    the epoch the lineage gives for ``o``. A leader never rewrites an offset within its
    epoch, so every serving copy holds the same record; copies that fail the test hold a
    truncated leader's records (KIP-405 scenarios 3-5) and are never chosen. A reader goes
    on from ``o`` to the following offsets of the same copy, so copies that agree with the
    lineage from ``o`` to their end come first; among equals the one starting last wins
    (ties: the one that arrived last). When only a partly truncated copy serves ``o``,
    :func:`agreeing_end` tells the reader where to stop.

The cache's own lineage
    ``lineage(tp)`` merges the epochs of a chain of FINISHED segments. The chain starts at
    the *tip*, the segment with the highest (last epoch, end offset, start offset, arrival)
    — a copy whose last epoch is lower but whose end is higher was written by a leader
    that a later epoch truncated. Walking back from offset ``s`` whose epoch is ``e``, the
    predecessor is the FINISHED segment starting below ``s`` with the highest (last offset
    below ``s``, epoch there, start offset, arrival) whose epoch there is ``<= e``: a later
    epoch cannot precede an earlier one. Segment metadata carries only the epochs inside
    each segment, so when two truncated histories meet exactly at a segment boundary the
    higher epoch is taken; a caller that knows the broker's epoch history should pass that
    instead.
    Remote log start and end offsets are the ends of this chain.

Costs: offset lookups bisect the start-offset index and look back only as far as the
longest segment. The chain is spliced on every change: a re-walk starts where the change
can matter and stops where it meets the old chain, so appending a copy, deleting the
oldest, or a late duplicate costs a few steps, not a walk of the partition.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import uuid
from array import array
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import (
    DeletePartitionStateRecord,
    MetadataRecord,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogStartOffsetRecord,
)
from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from storage.rlmm.state import (
    InvalidStateTransitionError,
    RemoteLogMetadataError,
    check_partition_transition,
    check_segment_transition,
    check_segment_update,
)
from storage.rlmm.store import DEAD, EpochRange, PartitionSegments, clipped_ranges

__all__ = [
    "InvalidSegmentMetadataError",
    "PartitionDeleteStatus",
    "RemoteLogMetadataCache",
    "agreeing_end",
]

_FINISHED = int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_START = operator.attrgetter("start_offset")
_NO_LIMIT = 1 << 63
_StateT = TypeVar("_StateT", RemoteLogSegmentState, RemotePartitionDeleteState)


class InvalidSegmentMetadataError(RemoteLogMetadataError):
    """Segment metadata that cannot describe a real segment (offsets, epochs or size)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionDeleteStatus:
    """The last DeletePartitionStateRecord applied to a partition."""

    state: RemotePartitionDeleteState
    epoch: int
    event_timestamp: int


class _Partition:
    """One partition's segments, delete status, chain (lineage) and per-epoch highest offsets."""

    __slots__ = (
        "_chain",
        "_highest",
        "_highest_dirty",
        "_holes",
        "_last_epochs",
        "_lineage",
        "delete_status",
        "log_start",
        "seg",
        "tp",
    )

    def __init__(self, tp: TopicIdPartition) -> None:
        self.tp = tp
        self.seg = PartitionSegments()
        self.delete_status: PartitionDeleteStatus | None = None
        self.log_start = 0
        """The whole log's start (RemoteLogStartOffsetRecord): nothing below is served."""
        self._chain = array("i")
        """Slots of the lineage chain, head to tip."""
        self._holes: list[int] = []
        """Start offsets of the chain's segments that begin after a hole (offsets no copy
        holds), in order: the remote log is contiguous only from the last of them."""
        self._lineage: tuple[EpochEntry, ...] = ()
        self._highest: dict[int, int] = {}
        self._highest_dirty = False
        self._last_epochs: dict[int, int] = {}
        """How many FINISHED segments end in each epoch: tells the epoch of the next tip."""

    # -- state changes ------------------------------------------------------------------

    def insert(self, metadata: RemoteLogSegmentMetadata) -> None:
        slot = self.seg.insert(metadata)
        if metadata.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._finished(slot)

    def set_state(
        self, slot: int, state: RemoteLogSegmentState, leader_epoch: int, event_timestamp: int
    ) -> None:
        seg = self.seg
        before = seg.state[slot]
        if state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            seg.remove(slot)  # only DELETE_SEGMENT_STARTED leads here: never readable now
            return
        seg.state[slot] = int(state)
        seg.leader_epoch[slot] = leader_epoch
        seg.event_timestamp[slot] = event_timestamp
        if before != _FINISHED and state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._finished(slot)
        elif before == _FINISHED and state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._unfinished(slot)

    def _finished(self, slot: int) -> None:
        """``slot`` just became readable: update the per-epoch highs and the chain."""
        seg = self.seg
        ranges = seg.ranges(slot)
        if not self._highest_dirty:
            for epoch, _, last in ranges:
                if last > self._highest.get(epoch, -1):
                    self._highest[epoch] = last
        last_epoch = ranges[-1][0]
        self._last_epochs[last_epoch] = self._last_epochs.get(last_epoch, 0) + 1
        chain = self._chain
        if not chain or self._outranks(slot, chain[-1]):
            if chain and seg.start[slot] > seg.end[chain[-1]] and self._extends(slot):
                return
            self._splice(slot, len(chain), seg.start[slot])  # the new tip
            return
        # The walk's step at chain[j] chose a predecessor ending (clipped) at c_j, and c_j
        # grows with j. The new copy ends at or before its own end, so it can win only at
        # steps whose c_j is not above that, and only where it starts below chain[j].
        ends, starts = seg.end, seg.start
        j = bisect.bisect_right(
            range(1, len(chain)),
            ends[slot],
            key=lambda k: min(ends[chain[k - 1]], starts[chain[k]] - 1),
        )
        if starts[slot] < starts[chain[j]]:
            self._splice(chain[j], j + 1, starts[slot])

    def _unfinished(self, slot: int) -> None:
        """``slot`` is no longer readable: update the per-epoch highs and the chain."""
        ranges = self.seg.ranges(slot)
        for epoch, _, last in ranges:
            if self._highest.get(epoch) == last:
                self._highest_dirty = True
        last_epoch = ranges[-1][0]
        self._last_epochs[last_epoch] -= 1
        if not self._last_epochs[last_epoch]:
            del self._last_epochs[last_epoch]
        chain = self._chain
        position = _chain_position(chain, self.seg, slot)
        if position is None:
            return  # never chosen, so no choice of the walk changes
        if position < len(chain) - 1:
            self._splice(chain[position + 1], position + 2, _NO_LIMIT)
            return
        tip = self._find_tip()
        if tip is None:
            self._chain = array("i")
            self._lineage = ()
            self._holes = []
        else:
            self._splice(tip, len(chain), self.seg.start[tip])

    def _extends(self, slot: int) -> bool:
        """Append ``slot`` to the chain if its predecessor is the tip (the common case of a
        copy following the last one), as :meth:`_splice` would but without its work."""
        seg, chain = self.seg, self._chain
        if self._step(seg.start[slot], _first_epoch(seg, slot)) != chain[-1]:
            return False
        if seg.start[slot] > seg.end[chain[-1]] + 1:
            self._holes.append(seg.start[slot])
        chain.append(slot)
        entries = list(self._lineage)
        for epoch, first, _ in seg.ranges(slot):
            if entries[-1].epoch != epoch:
                entries.append(EpochEntry(epoch=epoch, start_offset=first))
        self._lineage = tuple(entries)
        return True

    def _find_tip(self) -> int | None:
        """The FINISHED segment with the highest tip key: it ends in the highest epoch any
        segment ends in, and among those ends last, so look back from the highest starts
        only as far as the longest segment reaches."""
        if not self._last_epochs:
            return None
        top_epoch = max(self._last_epochs)
        seg = self.seg
        best: int | None = None
        best_key = (-1, -1)
        position = len(seg.index) - 1
        while position >= seg.front:
            slot = seg.index[position]
            position -= 1
            start, end = seg.start[slot], seg.end[slot]
            if best is not None and start + seg.max_len < best_key[0]:
                break
            if seg.state[slot] != _FINISHED or seg.epoch_at(slot, end) != top_epoch:
                continue
            if (end, start) > best_key:  # scanning backwards: on a tie the later arrival stays
                best, best_key = slot, (end, start)
        return best

    # -- lineage ------------------------------------------------------------------------

    def lineage(self) -> tuple[EpochEntry, ...]:
        return self._lineage

    def chain(self) -> array[int]:
        return self._chain

    def contiguous_start(self) -> int | None:
        """The first readable offset of the chain's last contiguous run (its end is the
        tip's), at or above the log start; ``None`` if nothing is readable."""
        if not self._chain:
            return None
        start = self._holes[-1] if self._holes else self.seg.start[self._chain[0]]
        start = max(start, self.log_start)
        return start if start <= self.seg.end[self._chain[-1]] else None

    def holes(self) -> list[tuple[int, int]]:
        """The offset ranges (first, last) that no copy of the chain holds, in order."""
        seg, chain = self.seg, self._chain
        out = []
        for start in self._holes:
            position = bisect.bisect_left(chain, start, key=seg.start.__getitem__)
            out.append((seg.end[chain[position - 1]] + 1, start - 1))
        return out

    def _splice(self, top: int, keep_from: int, converge_below: int) -> None:
        """Walk the chain down again from ``top``, keeping ``chain[keep_from:]`` above it.

        The walk from a chain element depends only on that element and the FINISHED
        segments starting below it. So once the walk chooses an element ``P`` of the old
        chain that starts at or below ``converge_below`` (no changed segment starts below
        it), the old chain below ``P`` is the rest of the walk and is kept, with its part of
        the lineage. Usually that happens at the first step, so appending a copy or deleting
        the oldest one costs a step and a bisection, not a walk of the whole partition.
        """
        old_chain = self._chain
        old_lineage = self._lineage
        seg = self.seg
        suffix_start = seg.start[old_chain[keep_from]] if keep_from < len(old_chain) else None
        walked = [top]
        pieces = [
            self._ranges_upto(top, seg.end[top] if suffix_start is None else suffix_start - 1)
        ]
        kept = 0
        converged = False
        head = top
        while True:
            previous = self._step(seg.start[head], _first_epoch(seg, head))
            if previous is None:
                break
            walked.append(previous)
            pieces.append(self._ranges_upto(previous, seg.start[head] - 1))
            position = _chain_position(old_chain, seg, previous)
            if position is not None and seg.start[previous] <= converge_below:
                kept, converged = position, True
                break
            head = previous
        walked.reverse()
        pieces.reverse()
        merged: list[EpochEntry] = []
        if converged:  # the old lineage below the kept part of the chain stays
            below = bisect.bisect_left(old_lineage, seg.start[walked[0]], key=_START)
            merged += old_lineage[:below]
        for epoch, first, _ in (r for piece in pieces for r in piece):
            if not merged or merged[-1].epoch != epoch:
                merged.append(EpochEntry(epoch=epoch, start_offset=first))
        if suffix_start is not None:
            above = bisect.bisect_right(old_lineage, suffix_start, key=_START)
            epoch = old_lineage[above - 1].epoch
            if not merged or merged[-1].epoch != epoch:
                merged.append(EpochEntry(epoch=epoch, start_offset=suffix_start))
            merged.extend(old_lineage[above:])
        self._lineage = tuple(merged)
        replaced = [seg.start[slot] for slot in old_chain[kept:keep_from]]
        old_chain[kept:keep_from] = array("i", walked)
        low = min([seg.start[walked[0]], *replaced[:1]])
        self._refresh_holes(kept, kept + len(walked), low, max(replaced, default=low))

    def _refresh_holes(self, first: int, after: int, low: int, replaced_high: int) -> None:
        """Recompute the holes before ``chain[first:after + 1]`` (the walked part and the
        element after it), dropping those recorded from offset ``low`` up to there or up to
        ``replaced_high``, the last start of the elements the walk replaced."""
        seg, chain = self.seg, self._chain
        last = min(after, len(chain) - 1)
        high = max(seg.start[chain[last]], replaced_high)
        holes = self._holes
        del holes[bisect.bisect_left(holes, low) : bisect.bisect_right(holes, high)]
        found = [
            seg.start[chain[i]]
            for i in range(max(first, 1), last + 1)
            if seg.start[chain[i]] > seg.end[chain[i - 1]] + 1
        ]
        position = bisect.bisect_left(holes, low)
        holes[position:position] = found

    def _step(self, start: int, epoch: int) -> int | None:
        """The chain predecessor of offset ``start`` written in ``epoch`` (see module doc)."""
        seg = self.seg
        index, starts, ends, states = seg.index, seg.start, seg.end, seg.state
        best: int | None = None
        best_key = (-1, -1)
        position = seg.position_from(start) - 1
        while position >= seg.front:
            slot = index[position]
            position -= 1
            if best is not None and starts[slot] + seg.max_len < best_key[0]:
                break
            if states[slot] != _FINISHED:
                continue
            last = min(ends[slot], start - 1)
            last_epoch = seg.epoch_at(slot, last)
            if last_epoch is None or last_epoch > epoch:
                continue
            key = (last, last_epoch)
            if key > best_key:  # scanning backwards: on a tie the later arrival stays
                best, best_key = slot, key
        return best

    def _outranks(self, slot: int, tip: int) -> bool:
        """Whether ``slot`` would be the tip rather than ``tip`` (see module doc)."""
        key, tip_key = self._tip_key(slot), self._tip_key(tip)
        if key != tip_key:
            return key > tip_key
        return self.seg.position_of(slot) > self.seg.position_of(tip)

    def _tip_key(self, slot: int) -> tuple[int, int, int]:
        seg = self.seg
        end = seg.end[slot]
        last_epoch = seg.epoch_at(slot, end)
        return (-1 if last_epoch is None else last_epoch, end, seg.start[slot])

    def _ranges_upto(self, slot: int, last: int) -> list[tuple[int, int, int]]:
        return [(e, a, min(b, last)) for e, a, b in self.seg.ranges(slot) if a <= last]

    # -- lookups ------------------------------------------------------------------------

    def find(self, epoch: int, offset: int, lineage: _LineageView | None = None) -> int | None:
        """The slot serving ``offset`` written in ``epoch`` (see module doc), or ``None``."""
        seg = self.seg
        index, starts, ends, states = seg.index, seg.start, seg.end, seg.state
        lowest = offset - seg.max_len
        fallback = None
        position = seg.position_after(offset) - 1
        while position >= seg.front:
            slot = index[position]
            position -= 1
            if starts[slot] < lowest:
                break
            if (
                states[slot] == _FINISHED
                and ends[slot] >= offset
                and seg.epoch_at(slot, offset) == epoch
            ):
                if lineage is None or lineage.agrees(seg.ranges(slot), offset):
                    return slot
                if fallback is None:
                    fallback = slot
        return fallback

    def highest(self, epoch: int) -> int | None:
        if self._highest_dirty:
            self._highest = {}
            for slot in self.seg.live():
                if self.seg.state[slot] == _FINISHED:
                    for range_epoch, _, last in self.seg.ranges(slot):
                        if last > self._highest.get(range_epoch, -1):
                            self._highest[range_epoch] = last
            self._highest_dirty = False
        return self._highest.get(epoch)

    def referenced(self, slot: int, lineage: _LineageView) -> bool:
        """Whether :meth:`find` under ``lineage`` returns ``slot`` for at least one offset at
        or above the log start.

        Which copy is chosen can only change where a copy starts or ends, where a copy's or
        the lineage's epoch changes, so trying those points inside the segment (and the log
        start) suffices.
        """
        seg = self.seg
        first, last = seg.start[slot], seg.end[slot]
        if last < self.log_start:
            return False
        points = {a for _, a, _ in seg.ranges(slot)}
        points.add(self.log_start)
        points.update(e.start_offset for e in lineage.entries if first <= e.start_offset <= last)
        position = seg.position_from(first - seg.max_len)
        while position < len(seg.index):
            other = seg.index[position]
            position += 1
            if seg.start[other] > last:
                break
            if seg.state[other] == DEAD:
                continue
            points.update(a for _, a, _ in seg.ranges(other) if first <= a <= last)
            if first <= seg.end[other] + 1 <= last:
                points.add(seg.end[other] + 1)
        for point in points:
            if point < self.log_start:
                continue
            epoch = lineage.epoch_at(point)
            if epoch is not None and self.find(epoch, point, lineage) == slot:
                return True
        return False


class _LineageView:
    """Epoch lookups in a leader-epoch history, by bisection (nothing is copied)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[EpochEntry]) -> None:
        self.entries = entries

    def epoch_at(self, offset: int) -> int | None:
        position = bisect.bisect_right(self.entries, offset, key=_START)
        return self.entries[position - 1].epoch if position else None

    def agreeing_end(self, ranges: Sequence[EpochRange], offset: int) -> int:
        """The last offset from ``offset`` on up to which ``ranges`` agree with the lineage
        (``offset - 1`` if they disagree at ``offset`` already)."""
        entries = self.entries
        for epoch, first, last in ranges:
            if last < offset:
                continue
            begin = max(first, offset)
            position = bisect.bisect_right(entries, begin, key=_START)
            if not position or entries[position - 1].epoch != epoch:
                return begin - 1
            if position < len(entries) and entries[position].start_offset <= last:
                return entries[position].start_offset - 1  # the lineage changes epoch inside
        return ranges[-1][2]

    def agrees(self, ranges: Sequence[EpochRange], offset: int) -> bool:
        """Whether ``ranges`` agree with the lineage from ``offset`` to their end."""
        return self.agreeing_end(ranges, offset) == ranges[-1][2]


class RemoteLogMetadataCache:
    """Every partition's remote segments and delete state, as the metadata topic built them.

    Events come in through :meth:`apply` (or the typed :meth:`add_segment`,
    :meth:`update_segment`, :meth:`update_partition_delete`); an event that breaks the state
    machine of :mod:`storage.rlmm.state` raises :class:`InvalidStateTransitionError`,
    changes nothing, and is counted in :attr:`invalid_transitions`. Not thread-safe: one
    event loop owns it.
    """

    def __init__(self) -> None:
        self._topics: dict[uuid.UUID, dict[int, _Partition]] = {}
        self._topic_ids_by_name: dict[str, list[uuid.UUID]] = {}
        """Topic ids seen for each name, oldest first (a re-created topic gets a new id)."""
        self._segment_count = 0
        self.invalid_transitions = 0

    # -- events -------------------------------------------------------------------------

    def apply(self, record: MetadataRecord) -> None:
        """Apply one decoded ``__remote_log_metadata`` record.

        :raises InvalidStateTransitionError: if the record breaks the state machine.
        :raises InvalidSegmentMetadataError: if a new segment's metadata is impossible.
        """
        if isinstance(record, RemoteLogSegmentMetadataRecord):
            self.add_segment(_metadata_of(record))
        elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
            self.update_segment(
                _segment_id_of(record),
                record.state,
                leader_epoch=record.leader_epoch,
                event_timestamp=record.event_timestamp,
            )
        elif isinstance(record, RemoteLogStartOffsetRecord):
            self.set_log_start(_tp_of(record), record.start_offset)
        else:
            self.update_partition_delete(
                _tp_of(record),
                record.state,
                epoch=record.epoch,
                event_timestamp=record.event_timestamp,
            )

    def check(self, record: MetadataRecord) -> None:
        """Raise what :meth:`apply` would raise for ``record``, without applying it.

        Writers call this before publishing, so that a mistake reaches them instead of
        being skipped by every consumer. A refusal counts in :attr:`invalid_transitions`.

        :raises InvalidStateTransitionError: if the record breaks the state machine.
        :raises InvalidSegmentMetadataError: if a new segment's metadata is impossible.
        """
        if isinstance(record, RemoteLogSegmentMetadataRecord):
            self._check_add(_metadata_of(record))
        elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
            self._check_update(_segment_id_of(record), record.state)
        elif isinstance(record, RemoteLogStartOffsetRecord):
            if record.start_offset < 0:
                raise InvalidSegmentMetadataError(
                    f"log start {record.start_offset} of {_tp_of(record)} is negative"
                )
        else:
            self._check_partition(_tp_of(record), record.state)

    def set_log_start(self, tp: TopicIdPartition, start_offset: int) -> None:
        """Offsets below ``start_offset`` are deleted from the whole log (it only moves up):
        reads below it find nothing, and the pipeline deletes segments wholly below it."""
        partition = self._partition(tp)
        partition.log_start = max(partition.log_start, start_offset)

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        """The whole log's start as deletions recorded it (0 when none was)."""
        partition = self._find_partition(tp)
        return 0 if partition is None else partition.log_start

    def add_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A copy attempt starts (COPY_SEGMENT_STARTED); a repeat of a known one updates it.

        :raises InvalidStateTransitionError: if the state may not follow the current one.
        :raises InvalidSegmentMetadataError: if a new segment's metadata is impossible.
        """
        partition, slot = self._check_add(metadata)
        if partition is not None and slot is not None:
            self._set_state(
                partition, slot, metadata.state, metadata.leader_epoch, metadata.event_timestamp
            )
        else:
            self._partition(metadata.topic_id_partition).insert(metadata)
            self._segment_count += 1

    def update_segment(
        self,
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        *,
        leader_epoch: int,
        event_timestamp: int,
    ) -> None:
        """Move a known segment to ``state``; DELETE_SEGMENT_FINISHED forgets it.

        :raises InvalidStateTransitionError: if the segment is unknown or ``state`` may not
            follow its current one.
        """
        partition, slot = self._check_update(segment_id, state)
        self._set_state(partition, slot, state, leader_epoch, event_timestamp)

    def update_partition_delete(
        self,
        tp: TopicIdPartition,
        state: RemotePartitionDeleteState,
        *,
        epoch: int,
        event_timestamp: int,
    ) -> None:
        """Record a partition deletion step; DELETE_PARTITION_FINISHED forgets the partition
        and its segments, as Kafka's store does.

        :raises InvalidStateTransitionError: if ``state`` may not follow the current one.
        """
        self._check_partition(tp, state)
        if state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self._drop(tp)
        else:
            self._partition(tp).delete_status = PartitionDeleteStatus(
                state=state, epoch=epoch, event_timestamp=event_timestamp
            )

    def restore_partition(
        self,
        tp: TopicIdPartition,
        segments: Iterable[RemoteLogSegmentMetadata],
        delete_status: PartitionDeleteStatus | None,
        log_start: int = 0,
    ) -> None:
        """Load a partition's materialised state (from a snapshot) without replaying events.

        ``segments`` come in the order :meth:`segments` lists them, which keeps the arrival
        order of copies with equal start offsets.

        :raises InvalidSegmentMetadataError: if a segment is impossible or already known.
        """
        partition = self._partition(tp)
        for metadata in segments:
            if metadata.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                raise InvalidSegmentMetadataError(f"{_describe(metadata.segment_id)} is deleted")
            _validate(metadata)
            if partition.seg.find(metadata.segment_id.id) is not None:
                raise InvalidSegmentMetadataError(f"{_describe(metadata.segment_id)} is repeated")
            partition.insert(metadata)
            self._segment_count += 1
        partition.delete_status = delete_status
        partition.log_start = log_start

    def drop_partition(self, tp: TopicIdPartition) -> None:
        """Forget a partition entirely (before re-reading its metadata from the topic)."""
        self._drop(tp)

    # -- lookups ------------------------------------------------------------------------

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The current metadata of one copy, or ``None`` once deleted or if never seen."""
        partition, slot = self._locate(segment_id)
        if partition is None or slot is None:
            return None
        return partition.seg.metadata(slot, partition.tp)

    def segment_state(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentState | None:
        """The state of one copy, or ``None`` once deleted or if never seen."""
        partition, slot = self._locate(segment_id)
        if partition is None or slot is None:
            return None
        return RemoteLogSegmentState(partition.seg.state[slot])

    def segment_for(
        self, tp: TopicIdPartition, offset: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None:
        """The readable copy holding ``offset`` as the leader-epoch history ``lineage`` wrote it.

        ``lineage`` is the partition's epoch history (the broker's, or :meth:`lineage`).
        Copies from truncated leaders (KIP-405 scenarios 3-5) are never returned; ``None``
        when the lineage does not cover ``offset`` or no readable copy holds it.
        """
        view = _LineageView(lineage)
        epoch = view.epoch_at(offset)
        partition = self._find_partition(tp)
        if epoch is None or partition is None or offset < partition.log_start:
            return None
        slot = partition.find(epoch, offset, view)
        return None if slot is None else partition.seg.metadata(slot, partition.tp)

    def segment_for_epoch(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The readable copy holding ``offset`` written in ``epoch`` (Kafka's
        ``remoteLogSegmentMetadata(topicIdPartition, epoch, offset)``)."""
        partition = self._find_partition(tp)
        if partition is None:
            return None
        slot = partition.find(epoch, offset)
        return None if slot is None else partition.seg.metadata(slot, partition.tp)

    def segment_for_timestamp(
        self, tp: TopicIdPartition, timestamp: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None:
        """The first readable copy on ``lineage``, by start offset, with a record at or after
        ``timestamp`` (its max timestamp is ``>= timestamp``), for ListOffsets by time.

        Only copies whose every offset agrees with ``lineage`` count: a truncated leader's
        records must not answer a time query. Linear in the partition's segments.
        """
        partition = self._find_partition(tp)
        if partition is None:
            return None
        view = _LineageView(lineage)
        seg = partition.seg
        for slot in seg.live():
            if (
                seg.state[slot] == _FINISHED
                and seg.end[slot] >= partition.log_start
                and seg.max_timestamp[slot] >= timestamp
                and view.agrees(seg.ranges(slot), seg.start[slot])
            ):
                return seg.metadata(slot, partition.tp)
        return None

    def highest_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> int | None:
        """The highest offset written in ``epoch`` held by a readable copy, or ``None``.

        A new leader resumes copying after it (KIP-405 "Follower to leader transition").
        Unlike Kafka, copies being deleted no longer count: the cache keeps no memory of a
        segment beyond its metadata, so the answer is the same after a snapshot restart.
        """
        partition = self._find_partition(tp)
        return None if partition is None else partition.highest(epoch)

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The first offset of the remote log, or ``None``: the start of the lineage chain's
        last contiguous run. Copies below a hole in the chain (offsets that no copy holds,
        left when the broker deleted data before it was tiered) cannot be read through to
        the end, so, as in Kafka, they are not part of the log; :meth:`remote_log_holes`
        names the holes."""
        partition = self._find_partition(tp)
        return None if partition is None else partition.contiguous_start()

    def remote_log_holes(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """Offset ranges (first, last) inside the lineage chain that no copy holds."""
        partition = self._find_partition(tp)
        return [] if partition is None else partition.holes()

    def remote_log_end_offset(self, tp: TopicIdPartition) -> int | None:
        """The last offset of the remote log (end of the lineage tip, inclusive), or ``None``
        when nothing is readable (no copy, or all below the log start)."""
        partition = self._find_partition(tp)
        if partition is None or partition.contiguous_start() is None:
            return None
        return partition.seg.end[partition.chain()[-1]]

    def lineage(self, tp: TopicIdPartition) -> tuple[EpochEntry, ...]:
        """The leader-epoch history of the remote log, for lookups and OffsetForLeaderEpoch."""
        partition = self._find_partition(tp)
        if partition is None:
            return ()
        return partition.lineage()

    def segments(
        self, tp: TopicIdPartition, states: Collection[RemoteLogSegmentState] | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """The partition's copies (optionally only those in ``states``) by start offset,
        copies with equal starts in arrival order."""
        partition = self._find_partition(tp)
        if partition is None:
            return []
        seg = partition.seg
        wanted = None if states is None else {int(s) for s in states}
        return [
            seg.metadata(slot, partition.tp)
            for slot in seg.live()
            if wanted is None or seg.state[slot] in wanted
        ]

    def segments_for_epoch(
        self, tp: TopicIdPartition, epoch: int
    ) -> list[RemoteLogSegmentMetadata]:
        """The copies holding offsets of ``epoch``, in any live state, by start offset
        (Kafka's ``listRemoteLogSegments(topicIdPartition, leaderEpoch)``)."""
        partition = self._find_partition(tp)
        if partition is None:
            return []
        seg = partition.seg
        return [
            seg.metadata(slot, partition.tp)
            for slot in seg.live()
            if any(e == epoch for e, _, _ in seg.ranges(slot))
        ]

    def unreferenced_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Copies no read will use: unfinished or being deleted, or finished but never
        chosen under :meth:`lineage` (duplicates, truncated leaders' copies, and copies
        wholly below the log start, whose records were deleted). These are what a cleaner
        may delete."""
        partition = self._find_partition(tp)
        if partition is None:
            return []
        seg = partition.seg
        lineage = _LineageView(partition.lineage())
        return [
            seg.metadata(slot, partition.tp)
            for slot in seg.live()
            if seg.state[slot] != _FINISHED or not partition.referenced(slot, lineage)
        ]

    def delete_status(self, tp: TopicIdPartition) -> PartitionDeleteStatus | None:
        """The partition's deletion state, ``None`` if it is not being deleted."""
        partition = self._find_partition(tp)
        return None if partition is None else partition.delete_status

    def partitions(self) -> list[TopicIdPartition]:
        """Every partition the cache holds metadata for."""
        return [p.tp for parts in self._topics.values() for p in parts.values()]

    def topic_id_partition(self, topic: str, partition: int) -> TopicIdPartition | None:
        """The partition ``topic-partition`` of the newest topic id seen for ``topic`` that
        is not being deleted.

        After a topic is deleted and re-created, the older id's segments belong to a
        different topic and must not answer for the new one; once the pipeline marks the
        old id's partitions for deletion, they never answer for the name again.
        """
        for topic_id in reversed(self._topic_ids_by_name.get(topic, ())):
            found = self._topics[topic_id].get(partition)
            if found is not None and found.delete_status is None:
                return found.tp
        return None

    def topic_id_partition_by_id(
        self, topic_id: uuid.UUID, partition: int
    ) -> TopicIdPartition | None:
        """The partition of ``topic_id``, if the cache holds metadata for it."""
        found = self._topics.get(topic_id, {}).get(partition)
        return None if found is None else found.tp

    def __len__(self) -> int:
        """The number of segment copies held (every state but DELETE_SEGMENT_FINISHED)."""
        return self._segment_count

    # -- internals ----------------------------------------------------------------------

    def _find_partition(self, tp: TopicIdPartition) -> _Partition | None:
        return self._topics.get(tp.topic_id, {}).get(tp.partition)

    def _partition(self, tp: TopicIdPartition) -> _Partition:
        partitions = self._topics.setdefault(tp.topic_id, {})
        found = partitions.get(tp.partition)
        if found is None:
            found = partitions[tp.partition] = _Partition(tp)
            ids = self._topic_ids_by_name.setdefault(tp.topic, [])
            if tp.topic_id not in ids:
                ids.append(tp.topic_id)
        return found

    def _drop(self, tp: TopicIdPartition) -> None:
        partitions = self._topics.get(tp.topic_id)
        if partitions is None or tp.partition not in partitions:
            return
        dropped = partitions.pop(tp.partition)
        self._segment_count -= len(dropped.seg)
        if not partitions:
            del self._topics[tp.topic_id]
            ids = self._topic_ids_by_name[dropped.tp.topic]
            ids.remove(tp.topic_id)
            if not ids:
                del self._topic_ids_by_name[dropped.tp.topic]

    def _locate(self, segment_id: RemoteLogSegmentId) -> tuple[_Partition | None, int | None]:
        partition = self._find_partition(segment_id.topic_id_partition)
        if partition is None:
            return None, None
        return partition, partition.seg.find(segment_id.id)

    def _set_state(
        self,
        partition: _Partition,
        slot: int,
        state: RemoteLogSegmentState,
        leader_epoch: int,
        event_timestamp: int,
    ) -> None:
        partition.set_state(slot, state, leader_epoch, event_timestamp)
        if state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            self._segment_count -= 1

    def _check_add(
        self, metadata: RemoteLogSegmentMetadata
    ) -> tuple[_Partition | None, int | None]:
        partition, slot = self._locate(metadata.segment_id)
        current = None
        if partition is not None and slot is not None:
            current = RemoteLogSegmentState(partition.seg.state[slot])
        self._counted(
            check_segment_transition, _Described(metadata.segment_id), current, metadata.state
        )
        if current is None:
            _validate(metadata)
        return partition, slot

    def _check_update(
        self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState
    ) -> tuple[_Partition, int]:
        partition, slot = self._locate(segment_id)
        current = None
        if partition is not None and slot is not None:
            current = RemoteLogSegmentState(partition.seg.state[slot])
        self._counted(check_segment_update, _Described(segment_id), current, state)
        assert partition is not None and slot is not None  # an unknown segment was refused
        return partition, slot

    def _check_partition(self, tp: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        partition = self._find_partition(tp)
        status = None if partition is None else partition.delete_status
        current = None if status is None else status.state
        self._counted(check_partition_transition, _Described(tp), current, state)

    def _counted(
        self,
        check: Callable[[object, _StateT | None, _StateT], None],
        subject: object,
        current: _StateT | None,
        target: _StateT,
    ) -> None:
        try:
            check(subject, current, target)
        except InvalidStateTransitionError:
            self.invalid_transitions += 1
            raise


def agreeing_end(
    metadata: RemoteLogSegmentMetadata, offset: int, lineage: Sequence[EpochEntry]
) -> int:
    """The last offset of ``metadata`` from ``offset`` on that ``lineage`` agrees with.

    :meth:`RemoteLogMetadataCache.segment_for` prefers copies that agree with the lineage
    to their end, but when only a copy that a later unclean election truncated holds the
    offset, a reader must stop here instead of serving the truncated leader's records.
    Returns ``offset - 1`` if the copy disagrees at ``offset`` itself.
    """
    ranges = clipped_ranges(
        metadata.segment_leader_epochs, metadata.start_offset, metadata.end_offset
    )
    if not ranges or offset > metadata.end_offset:
        return offset - 1
    return _LineageView(lineage).agreeing_end(ranges, offset)


def _validate(metadata: RemoteLogSegmentMetadata) -> None:
    """Refuse metadata that cannot describe a segment, before any of it reaches the store."""
    what = _describe(metadata.segment_id)
    if not 0 <= metadata.start_offset <= metadata.end_offset <= _INT64_MAX:
        raise InvalidSegmentMetadataError(
            f"{what} has offsets {metadata.start_offset}..{metadata.end_offset}"
        )
    if not 0 <= metadata.segment_size_in_bytes <= _INT32_MAX:
        raise InvalidSegmentMetadataError(f"{what} has size {metadata.segment_size_in_bytes}")
    for name, value, limit in (
        ("leader epoch", metadata.leader_epoch, _INT32_MAX),
        ("max timestamp", metadata.max_timestamp, _INT64_MAX),
        ("event timestamp", metadata.event_timestamp, _INT64_MAX),
    ):
        if not -limit - 1 <= value <= limit:
            raise InvalidSegmentMetadataError(f"{what} has {name} {value} out of range")
    epochs = metadata.segment_leader_epochs
    if not epochs or not 0 <= epochs[0][1] <= metadata.start_offset:
        raise InvalidSegmentMetadataError(
            f"{what} has leader epochs {epochs!r} that do not cover its start offset "
            f"{metadata.start_offset}"
        )
    pairs = itertools.pairwise(epochs)
    if any(
        b_epoch <= a_epoch or b_offset < a_offset
        for (a_epoch, a_offset), (b_epoch, b_offset) in pairs
    ):
        raise InvalidSegmentMetadataError(f"{what} has leader epochs {epochs!r} not ascending")
    if epochs[0][0] < 0 or epochs[-1][0] > _INT32_MAX or epochs[-1][1] > _INT64_MAX:
        raise InvalidSegmentMetadataError(f"{what} has leader epochs {epochs!r} out of range")


@dataclass(frozen=True, slots=True)
class _Described:
    """Names a segment or partition in an error message, formatted only if one is raised."""

    subject: RemoteLogSegmentId | TopicIdPartition

    def __str__(self) -> str:
        if isinstance(self.subject, TopicIdPartition):
            return f"partition {self.subject} ({self.subject.topic_id})"
        return _describe(self.subject)


def _describe(segment_id: RemoteLogSegmentId) -> str:
    tp = segment_id.topic_id_partition
    return f"segment {segment_id.id} of {tp} ({tp.topic_id})"


def _first_epoch(seg: PartitionSegments, slot: int) -> int:
    epoch = seg.epoch_at(slot, seg.start[slot])
    assert epoch is not None  # validated: the first epoch covers the start offset
    return epoch


def _chain_position(chain: array[int], seg: PartitionSegments, slot: int) -> int | None:
    """Where ``slot`` sits in the chain (whose start offsets strictly increase), if at all."""
    position = bisect.bisect_left(chain, seg.start[slot], key=seg.start.__getitem__)
    if position < len(chain) and chain[position] == slot:
        return position
    return None


def _metadata_of(record: RemoteLogSegmentMetadataRecord) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        segment_id=_segment_id_of(record),
        start_offset=record.start_offset,
        end_offset=record.end_offset,
        max_timestamp=record.max_timestamp,
        leader_epoch=record.leader_epoch,
        event_timestamp=record.event_timestamp,
        segment_leader_epochs=record.segment_leader_epochs,
        segment_size_in_bytes=record.segment_size_in_bytes,
        state=record.state,
    )


def _segment_id_of(
    record: RemoteLogSegmentMetadataRecord | RemoteLogSegmentMetadataUpdateRecord,
) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(
        topic_id_partition=TopicIdPartition(
            topic_id=record.topic_id, topic=record.topic, partition=record.partition
        ),
        id=record.segment_id,
    )


def _tp_of(record: DeletePartitionStateRecord | RemoteLogStartOffsetRecord) -> TopicIdPartition:
    return TopicIdPartition(
        topic_id=record.topic_id, topic=record.topic, partition=record.partition
    )
