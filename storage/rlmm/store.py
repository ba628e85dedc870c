"""Compact, columnar storage of one partition's remote segments.

KIP-405 budgets about 100 bytes of memory per remote segment (two UUIDs, five longs, an int,
a byte and a few epochs). A Python object per segment costs several times that (a dataclass
with its ints and UUIDs is ~600 bytes), so a partition keeps its segments in parallel
``array`` columns indexed by a *slot* number, and builds a :class:`RemoteLogSegmentMetadata`
only when a lookup returns one:

- one column per field (8 bytes for offsets and timestamps, 4 for epochs and sizes, 1 for
  the state, the segment UUID as two unsigned 64-bit halves);
- the segment's leader epoch in a column when it has one epoch starting at its start offset
  (as Kafka writes it); the rare segment that spans a leader change, or whose epochs start
  before it, keeps its whole epoch tuple in a small dict;
- an ``index`` of slots sorted by start offset (ties in arrival order) for offset lookups;
- an open-addressing hash table (``array('i')`` of slots, linear probing) from segment UUID
  to slot, for the updates that name a segment only by its id.

Together that is about 80 bytes per segment. Removed segments leave *dead* slots in the
index until enough accumulate to compact it, so that deleting old segments one by one (the
usual retention order) costs O(1) amortised instead of a memmove of the whole index each.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import sys
import uuid
from array import array
from collections.abc import Iterator, Sequence, Set

from protocol.metadata_records import FlatFileColumns
from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = ["DEAD", "EpochRange", "PartitionSegments", "clipped_ranges"]

DEAD = 255
"""State byte of a slot whose segment was removed but which the index still lists."""

EpochRange = tuple[int, int, int]
"""``(leader epoch, first offset, last offset)`` of one epoch inside one segment."""

_EMPTY = -1
_TOMBSTONE = -2
_MIN_TABLE = 8
_MAX_LOAD_NUM, _MAX_LOAD_DEN = 3, 4
"""Grow or rebuild the id table above 3/4 occupancy (tombstones included): linear probing
stays short, and after a rebuild to twice the live count the table costs 8-16 bytes a
segment."""
_MIN_COMPACT = 64
"""Dead index entries tolerated before compaction is considered; below this a compaction
would cost more than the scans it saves."""
_STATES = tuple(RemoteLogSegmentState)
_MIX = 0x9E3779B97F4A7C15
"""Fibonacci hashing constant: spreads sequential or low-entropy UUIDs over the table."""


class PartitionSegments:
    """The segments of one partition, in columns; slots are stable until the segment is removed.

    The caller (the metadata cache) owns the rules; this class only stores, finds and orders.
    """

    __slots__ = (
        "_extras",
        "_free",
        "_table",
        "_tombstones",
        "_used",
        "dead",
        "end",
        "event_timestamp",
        "first_epoch",
        "front",
        "id_hi",
        "id_lo",
        "index",
        "leader_epoch",
        "max_len",
        "max_timestamp",
        "size",
        "start",
        "state",
    )

    def __init__(self) -> None:
        self.start = array("q")
        self.end = array("q")
        self.max_timestamp = array("q")
        self.event_timestamp = array("q")
        self.size = array("i")
        self.leader_epoch = array("i")
        self.state = array("B")
        self.id_hi = array("Q")
        self.id_lo = array("Q")
        self.first_epoch = array("i")
        self._extras: dict[int, tuple[tuple[int, int], ...]] = {}
        self._free = array("i")
        self.index = array("i")
        """Slots sorted by start offset, equal starts in arrival order; may hold dead slots."""
        self.front = 0
        """Index positions below ``front`` are all dead."""
        self.dead = 0
        """Dead slots at or after ``front``."""
        self.max_len = 0
        """Largest ``end - start`` ever stored: bounds how far back an offset lookup scans."""
        self._table = array("i", [_EMPTY]) * _MIN_TABLE
        self._used = 0
        self._tombstones = 0

    def __len__(self) -> int:
        return self._used

    # -- slots ---------------------------------------------------------------------------

    def insert(self, metadata: RemoteLogSegmentMetadata) -> int:
        """Store a new segment and return its slot (the id must not be stored yet)."""
        epochs = metadata.segment_leader_epochs
        seg_id = metadata.segment_id.id.int
        hi, lo = seg_id >> 64, seg_id & 0xFFFFFFFFFFFFFFFF
        row = (
            metadata.start_offset,
            metadata.end_offset,
            metadata.max_timestamp,
            metadata.event_timestamp,
            metadata.segment_size_in_bytes,
            metadata.leader_epoch,
            int(metadata.state),
            hi,
            lo,
            epochs[0][0],
        )
        if self._free:
            slot = self._free.pop()
            for column, value in zip(self._columns(), row, strict=True):
                column[slot] = value
        else:
            slot = len(self.start)
            for column, value in zip(self._columns(), row, strict=True):
                column.append(value)
        if len(epochs) > 1 or epochs[0][1] != metadata.start_offset:
            self._extras[slot] = epochs
        self.max_len = max(self.max_len, metadata.end_offset - metadata.start_offset)
        self._index_insert(slot)
        self._table_insert(slot)
        return slot

    def fill(self, columns: FlatFileColumns) -> None:
        """Store a decoded snapshot's segments in this empty store, as inserting
        :meth:`~protocol.metadata_records.FlatFileColumns.segment_entry` of each in order
        would: slot ``i`` for the ``i``-th. The ids must be distinct (not checked)."""
        assert not self.start, "fill() needs an empty store"
        count = len(columns)
        starts, ends = columns.start_offsets, columns.end_offsets
        halves = array("Q", b"".join(columns.segment_ids))
        if sys.byteorder == "little":
            halves.byteswap()  # UUIDs are big endian
        self.start = array("q", starts)
        self.end = array("q", ends)
        self.max_timestamp = array("q", columns.max_timestamps)
        self.event_timestamp = array("q", columns.event_timestamps)
        self.size = array("i", columns.sizes)
        self.leader_epoch = array("i", columns.leader_epochs)
        self.state = array("B", columns.states)
        self.id_hi = halves[0::2]
        self.id_lo = halves[1::2]
        self.first_epoch = array("i", columns.first_epochs)
        first_epochs, first_offsets = columns.first_epochs, columns.first_epoch_offsets
        self._extras = {
            slot: ((first_epochs[slot], first_offsets[slot]),)
            for slot in itertools.compress(range(count), map(operator.ne, first_offsets, starts))
        }
        self._extras.update(columns.epochs)
        self.max_len = max(map(operator.sub, ends, starts), default=0)
        if all(map(operator.le, starts, itertools.islice(starts, 1, None))):
            self.index = array("i", range(count))
        else:  # a stable sort: equal starts stay in arrival order
            self.index = array("i", sorted(range(count), key=starts.__getitem__))
        self._build_table(range(count), count)

    def spanning(self) -> Set[int]:
        """The slots whose segment does not have exactly one epoch starting at its start."""
        return self._extras.keys()

    def remove(self, slot: int) -> None:
        """Forget the segment in ``slot``; its index entry stays dead until compaction."""
        self._table_remove(slot)
        self._extras.pop(slot, None)
        self.state[slot] = DEAD
        if self.index[self.front] == slot:
            self.front += 1
            while self.front < len(self.index) and self.state[self.index[self.front]] == DEAD:
                self.front += 1
                self.dead -= 1
        else:
            self.dead += 1
        self._maybe_compact()

    def find(self, segment_id: uuid.UUID) -> int | None:
        """The slot of ``segment_id``, or ``None``."""
        value = segment_id.int
        hi, lo = value >> 64, value & 0xFFFFFFFFFFFFFFFF
        table = self._table
        mask = len(table) - 1
        position = _hash(hi, lo) & mask
        while True:
            slot = table[position]
            if slot == _EMPTY:
                return None
            if slot >= 0 and self.id_lo[slot] == lo and self.id_hi[slot] == hi:
                return slot
            position = (position + 1) & mask

    def epochs(self, slot: int) -> tuple[tuple[int, int], ...]:
        """The segment's leader epochs exactly as they were stored."""
        extra = self._extras.get(slot)
        if extra is not None:
            return extra
        return ((self.first_epoch[slot], self.start[slot]),)

    def epoch_at(self, slot: int, offset: int) -> int | None:
        """The leader epoch that wrote ``offset`` according to this segment's epochs."""
        extra = self._extras.get(slot)
        if extra is None:
            return self.first_epoch[slot] if offset >= self.start[slot] else None
        epoch = None
        for entry_epoch, entry_offset in extra:
            if entry_offset > offset:
                break
            epoch = entry_epoch
        return epoch

    def ranges(self, slot: int) -> list[EpochRange]:
        """The segment's epochs clipped to its own offsets (see :func:`clipped_ranges`)."""
        start, end = self.start[slot], self.end[slot]
        extra = self._extras.get(slot)
        if extra is None:
            return [(self.first_epoch[slot], start, end)]
        return clipped_ranges(extra, start, end)

    def metadata(self, slot: int, tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
        """Materialise the segment in ``slot`` as the shared model value."""
        return RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId(
                topic_id_partition=tp,
                id=uuid.UUID(int=(self.id_hi[slot] << 64) | self.id_lo[slot]),
            ),
            start_offset=self.start[slot],
            end_offset=self.end[slot],
            max_timestamp=self.max_timestamp[slot],
            leader_epoch=self.leader_epoch[slot],
            event_timestamp=self.event_timestamp[slot],
            segment_leader_epochs=self.epochs(slot),
            segment_size_in_bytes=self.size[slot],
            state=_STATES[self.state[slot]],
        )

    # -- ordered access -------------------------------------------------------------------

    def live(self) -> Iterator[int]:
        """Live slots in index order (start offset, then arrival)."""
        state, index = self.state, self.index
        for position in range(self.front, len(index)):
            slot = index[position]
            if state[slot] != DEAD:
                yield slot

    def position_after(self, offset: int) -> int:
        """The first index position whose segment starts after ``offset``."""
        return bisect.bisect_right(self.index, offset, lo=self.front, key=self.start.__getitem__)

    def position_from(self, offset: int) -> int:
        """The first index position whose segment starts at or after ``offset``."""
        return bisect.bisect_left(self.index, offset, lo=self.front, key=self.start.__getitem__)

    def position_of(self, slot: int) -> int:
        """The index position of a live ``slot``."""
        position = self.position_from(self.start[slot])
        while self.index[position] != slot:
            position += 1
        return position

    # -- internals ------------------------------------------------------------------------

    def _columns(self) -> tuple[array[int], ...]:
        return (
            self.start,
            self.end,
            self.max_timestamp,
            self.event_timestamp,
            self.size,
            self.leader_epoch,
            self.state,
            self.id_hi,
            self.id_lo,
            self.first_epoch,
        )

    def _index_insert(self, slot: int) -> None:
        position = self.position_after(self.start[slot])
        if position == len(self.index):
            self.index.append(slot)
        else:
            self.index.insert(position, slot)

    def _maybe_compact(self) -> None:
        live = len(self.index) - self.front - self.dead
        if self.front + self.dead < _MIN_COMPACT or (self.front + self.dead) < live:
            return
        state = self.state
        kept = array("i")
        for slot in self.index:
            if state[slot] == DEAD:
                self._free.append(slot)
            else:
                kept.append(slot)
        self.index = kept
        self.front = 0
        self.dead = 0

    def _table_insert(self, slot: int) -> None:
        if (self._used + self._tombstones + 1) * _MAX_LOAD_DEN > len(self._table) * _MAX_LOAD_NUM:
            self._rebuild_table(self._used + 1)
        table = self._table
        mask = len(table) - 1
        position = _hash(self.id_hi[slot], self.id_lo[slot]) & mask
        while table[position] >= 0:
            position = (position + 1) & mask
        if table[position] == _TOMBSTONE:
            self._tombstones -= 1
        table[position] = slot
        self._used += 1

    def _table_remove(self, slot: int) -> None:
        table = self._table
        mask = len(table) - 1
        position = _hash(self.id_hi[slot], self.id_lo[slot]) & mask
        while table[position] != slot:
            position = (position + 1) & mask
        table[position] = _TOMBSTONE
        self._used -= 1
        self._tombstones += 1

    def _rebuild_table(self, needed: int) -> None:
        self._build_table([slot for slot in self._table if slot >= 0], needed)

    def _build_table(self, slots: Sequence[int], needed: int) -> None:
        """A fresh id table holding ``slots`` (no tombstones), sized for ``needed`` entries."""
        size = _MIN_TABLE
        while size < 2 * needed:
            size *= 2
        table = array("i", [_EMPTY]) * size
        mask = size - 1
        id_hi, id_lo = self.id_hi, self.id_lo
        for slot in slots:
            position = _hash(id_hi[slot], id_lo[slot]) & mask
            while table[position] != _EMPTY:
                position = (position + 1) & mask
            table[position] = slot
        self._table = table
        self._used = len(slots)
        self._tombstones = 0


def clipped_ranges(epochs: tuple[tuple[int, int], ...], start: int, end: int) -> list[EpochRange]:
    """``(epoch, first, last)`` for each epoch of a segment ``start..end``, empty ones dropped.

    Kafka clips a segment's first epoch to the segment's base offset; KIP-405's examples
    also show unclipped histories (``LE-0, 0`` in a segment starting at 4). Both mean the
    same records, so every rule works on the clipped ranges.
    """
    result = []
    for i, (epoch, offset) in enumerate(epochs):
        following = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else end
        first, last = max(offset, start), min(following, end)
        if first <= last:
            result.append((epoch, first, last))
    return result


def _hash(hi: int, lo: int) -> int:
    return (((hi ^ lo) & 0xFFFFFFFFFFFFFFFF) * _MIX) >> 40
