"""Leader-epoch lineage: which remote copy serves an offset, and the chain of copies that
makes up the remote log. The metadata cache (:mod:`storage.rlmm.cache`) keeps one
:class:`PartitionChain` per partition; the remote reader asks :func:`agreeing_end` where a
copy stops agreeing with a lineage.

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
oldest, or a late duplicate costs a few steps, not a walk of the partition. A partition
restored from a snapshot in bulk walks its chain once.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from array import array
from collections import Counter
from collections.abc import Sequence, Set

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import FlatFileColumns
from storage.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from storage.rlmm.state import PartitionDeleteStatus
from storage.rlmm.store import DEAD, EpochRange, PartitionSegments, clipped_ranges

__all__ = ["LineageView", "PartitionChain", "agreeing_end"]

_FINISHED = int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
_START = operator.attrgetter("start_offset")
_NO_LIMIT = 1 << 63


class PartitionChain:
    """One partition's segments, delete status and lineage chain, and the lookups on them."""

    __slots__ = (
        "_chain",
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
        self._last_epochs: dict[int, int] = {}
        """How many FINISHED segments end in each epoch: tells the epoch of the next tip."""

    # -- state changes ------------------------------------------------------------------

    def insert(self, metadata: RemoteLogSegmentMetadata) -> None:
        slot = self.seg.insert(metadata)
        if metadata.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._finished(slot)

    def fill(self, columns: FlatFileColumns) -> None:
        """Load a decoded snapshot's segments into this empty partition
        (:meth:`PartitionSegments.fill`) and build the chain once, as the walk from the tip
        that defines it chooses it, rather than splicing it at every segment.

        When the FINISHED segments, by start offset, each have one epoch, do not overlap
        and never go down in epoch (how a leader copies its log), each is the walk's
        predecessor of the next and the last is the tip: the chain is all of them, in that
        order, with no walk at all.
        """
        seg = self.seg
        seg.fill(columns)
        index, first_epoch = seg.index, seg.first_epoch
        finished = list(
            itertools.compress(index, map(_FINISHED.__eq__, map(seg.state.__getitem__, index)))
        )
        if not finished:
            return
        spanning = seg.spanning()
        epochs = list(map(first_epoch.__getitem__, finished))
        last_epochs = Counter(epochs)
        for slot in spanning:
            if seg.state[slot] == _FINISHED:
                last_epochs[first_epoch[slot]] -= 1
                last_epochs[seg.ranges(slot)[-1][0]] += 1
        self._last_epochs = dict(+last_epochs)
        starts, ends = seg.start, seg.end
        if (
            spanning.isdisjoint(finished)
            and all(map(operator.le, epochs, itertools.islice(epochs, 1, None)))
            and all(
                map(
                    operator.lt,
                    map(ends.__getitem__, finished),
                    map(starts.__getitem__, itertools.islice(finished, 1, None)),
                )
            )
        ):
            self._adopt(finished, spanning)
            return
        tip = self._find_tip()
        assert tip is not None  # some segment is FINISHED
        walked = [tip]
        while (
            previous := self._step(starts[walked[-1]], _first_epoch(seg, walked[-1]))
        ) is not None:
            walked.append(previous)
        walked.reverse()
        self._adopt(walked, spanning)

    def _adopt(self, chain: list[int], spanning: Set[int]) -> None:
        """Take ``chain`` (head to tip) as the chain of this partition, which had none, with
        the lineage and holes :meth:`_splice` derives from it."""
        seg = self.seg
        starts, ends, first_epoch = seg.start, seg.end, seg.first_epoch
        lineage: list[EpochEntry] = []
        if spanning.isdisjoint(chain):  # one epoch a segment: the lineage is where it changes
            epochs = list(map(first_epoch.__getitem__, chain))
            changes = map(operator.ne, epochs, itertools.chain((-1,), epochs))
            lineage = [
                EpochEntry(epoch=first_epoch[slot], start_offset=starts[slot])
                for slot in itertools.compress(chain, changes)
            ]
        else:
            current = -1
            for position, slot in enumerate(chain):
                if slot in spanning:
                    last = (
                        ends[slot]
                        if position == len(chain) - 1
                        else starts[chain[position + 1]] - 1
                    )
                    pieces = [(epoch, first) for epoch, first, _ in self._ranges_upto(slot, last)]
                else:
                    pieces = [(first_epoch[slot], starts[slot])]
                for epoch, first in pieces:
                    if epoch != current:
                        lineage.append(EpochEntry(epoch=epoch, start_offset=first))
                        current = epoch
        chain_starts = list(map(starts.__getitem__, chain))
        self._holes = [
            start
            for end, start in zip(map(ends.__getitem__, chain), chain_starts[1:], strict=False)
            if start > end + 1
        ]
        self._chain = array("i", chain)
        self._lineage = tuple(lineage)

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
        """``slot`` just became readable: update the chain."""
        seg = self.seg
        ranges = seg.ranges(slot)
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
        """``slot`` is no longer readable: update the chain."""
        ranges = self.seg.ranges(slot)
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

    def find(self, epoch: int, offset: int, lineage: LineageView | None = None) -> int | None:
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

    def referenced(self, slot: int, lineage: LineageView) -> bool:
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


class LineageView:
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


def agreeing_end(
    metadata: RemoteLogSegmentMetadata, offset: int, lineage: Sequence[EpochEntry]
) -> int:
    """The last offset of ``metadata`` from ``offset`` on that ``lineage`` agrees with.

    :meth:`storage.rlmm.cache.RemoteLogMetadataCache.segment_for` prefers copies that
    agree with the lineage to their end, but when only a copy that a later unclean election
    truncated holds the offset, a reader must stop here instead of serving the truncated
    leader's records.
    Returns ``offset - 1`` if the copy disagrees at ``offset`` itself.
    """
    ranges = clipped_ranges(
        metadata.segment_leader_epochs, metadata.start_offset, metadata.end_offset
    )
    if not ranges or offset > metadata.end_offset:
        return offset - 1
    return LineageView(lineage).agreeing_end(ranges, offset)


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
