"""Builders for segment histories and a brute-force model of the metadata cache's rules.

The model keeps plain Python objects and answers every question by trying every segment and
every offset, straight from the definitions in ``storage.rlmm.lineage``'s module docstring;
the property tests check the compact, incremental cache against it.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field, replace

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import RemoteLogSegmentMetadataRecordStored
from storage.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.state import is_valid_segment_transition
from tests.fakes.segments import segment_metadata

S = RemoteLogSegmentState
TP = TopicIdPartition(topic_id=uuid.UUID(int=0xA11CE), topic="orders", partition=3)


def lineage(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    """``lineage((0, 0), (1, 3))``: epoch 0 from offset 0, epoch 1 from offset 3."""
    return tuple(EpochEntry(epoch=e, start_offset=o) for e, o in pairs)


def seg(
    start: int,
    end: int,
    epochs: tuple[tuple[int, int], ...],
    *,
    number: int | None = None,
    tp: TopicIdPartition = TP,
    state: RemoteLogSegmentState = S.COPY_SEGMENT_STARTED,
    max_timestamp: int = 0,
) -> RemoteLogSegmentMetadata:
    """A segment copy of 1 KiB an offset; ``number`` gives it the readable id
    ``UUID(int=number)``."""
    return segment_metadata(
        tp,
        start_offset=start,
        end_offset=end,
        epochs=epochs,
        size=1024 * (end - start + 1),
        timestamp=max_timestamp,
        event_timestamp=1_700_000_000_000,
        segment_id=None if number is None else uuid.UUID(int=number),
        state=state,
    )


def stored_entry(number: int, start: int) -> RemoteLogSegmentMetadataRecordStored:
    """A snapshot's entry for a finished copy of ten offsets from ``start`` in leader epoch
    0, of 100 bytes, with the readable id ``UUID(int=number)``."""
    return RemoteLogSegmentMetadataRecordStored(
        segment_id=uuid.UUID(int=number),
        start_offset=start,
        end_offset=start + 9,
        leader_epoch=0,
        max_timestamp=0,
        event_timestamp=0,
        segment_leader_epochs=((0, start),),
        segment_size_in_bytes=100,
        state=S.COPY_SEGMENT_FINISHED,
    )


def copy(cache: RemoteLogMetadataCache, metadata: RemoteLogSegmentMetadata) -> None:
    """Publish a whole successful copy: COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED."""
    cache.add_segment(replace(metadata, state=S.COPY_SEGMENT_STARTED))
    cache.update_segment(
        metadata.segment_id,
        S.COPY_SEGMENT_FINISHED,
        leader_epoch=metadata.leader_epoch,
        event_timestamp=metadata.event_timestamp,
    )


def ranges(metadata: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
    """``(epoch, first, last)`` of a segment, by trying every offset."""
    result: list[tuple[int, int, int]] = []
    for offset in range(metadata.start_offset, metadata.end_offset + 1):
        epoch = epoch_at(metadata, offset)
        assert epoch is not None
        if result and result[-1][0] == epoch:
            result[-1] = (epoch, result[-1][1], offset)
        else:
            result.append((epoch, offset, offset))
    return result


def epoch_at(metadata: RemoteLogSegmentMetadata, offset: int) -> int | None:
    found = None
    for epoch, start in metadata.segment_leader_epochs:
        if start <= offset:
            found = epoch
    return found


def lineage_epoch(history: tuple[EpochEntry, ...], offset: int) -> int | None:
    found = None
    for entry in history:
        if entry.start_offset <= offset:
            found = entry.epoch
    return found


@dataclass
class _Copy:
    metadata: RemoteLogSegmentMetadata
    arrival: int


@dataclass
class ReferenceCache:
    """One partition's copies as plain objects, and the cache's rules by brute force."""

    copies: list[_Copy] = field(default_factory=list)
    arrivals: int = 0
    log_start: int = 0

    # -- events ---------------------------------------------------------------------------

    def add(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Apply a full metadata record; ``False`` if the cache must refuse it."""
        existing = self._find(metadata.segment_id.id)
        if existing is None:
            if metadata.state != S.COPY_SEGMENT_STARTED:
                return False
            self.arrivals += 1
            self.copies.append(_Copy(metadata, self.arrivals))
            return True
        return self.update(metadata.segment_id.id, metadata.state)

    def update(self, segment_id: uuid.UUID, state: RemoteLogSegmentState) -> bool:
        """Apply an update record; ``False`` if the cache must refuse it."""
        existing = self._find(segment_id)
        if existing is None or not is_valid_segment_transition(existing.metadata.state, state):
            return False
        if state == S.DELETE_SEGMENT_FINISHED:
            self.copies.remove(existing)
        else:
            existing.metadata = replace(existing.metadata, state=state)
        return True

    def set_log_start(self, offset: int) -> None:
        """The whole log's start moves up to ``offset`` (never down)."""
        self.log_start = max(self.log_start, offset)

    def _find(self, segment_id: uuid.UUID) -> _Copy | None:
        for entry in self.copies:
            if entry.metadata.segment_id.id == segment_id:
                return entry
        return None

    # -- questions ------------------------------------------------------------------------

    def ordered(self) -> list[_Copy]:
        return sorted(self.copies, key=lambda c: (c.metadata.start_offset, c.arrival))

    def finished(self) -> list[_Copy]:
        return [c for c in self.ordered() if c.metadata.state == S.COPY_SEGMENT_FINISHED]

    def agrees_from(
        self, metadata: RemoteLogSegmentMetadata, offset: int, history: tuple[EpochEntry, ...]
    ) -> bool:
        return all(
            epoch_at(metadata, o) == lineage_epoch(history, o)
            for o in range(offset, metadata.end_offset + 1)
        )

    def segment_for(
        self, offset: int, history: tuple[EpochEntry, ...]
    ) -> RemoteLogSegmentMetadata | None:
        epoch = lineage_epoch(history, offset)
        if offset < self.log_start:
            return None
        candidates = [
            c
            for c in self.finished()
            if c.metadata.start_offset <= offset <= c.metadata.end_offset
            and epoch is not None
            and epoch_at(c.metadata, offset) == epoch
        ]
        if not candidates:
            return None
        best = max(
            candidates,
            key=lambda c: (
                self.agrees_from(c.metadata, offset, history),
                c.metadata.start_offset,
                c.arrival,
            ),
        )
        return best.metadata

    def chain(self) -> list[_Copy]:
        finished = self.finished()
        if not finished:
            return []

        def tip_key(c: _Copy) -> tuple[int, int, int, int]:
            m = c.metadata
            last_epoch = epoch_at(m, m.end_offset)
            assert last_epoch is not None
            return (last_epoch, m.end_offset, m.start_offset, c.arrival)

        chain = [max(finished, key=tip_key)]
        while True:
            head = chain[0].metadata
            start = head.start_offset
            first_epoch = epoch_at(head, start)
            assert first_epoch is not None
            best = None
            best_key = None
            for c in finished:
                m = c.metadata
                if m.start_offset >= start:
                    continue
                last = min(m.end_offset, start - 1)
                epoch = epoch_at(m, last)
                if epoch is None or epoch > first_epoch:
                    continue
                key = (last, epoch, m.start_offset, c.arrival)
                if best_key is None or key > best_key:
                    best, best_key = c, key
            if best is None:
                return chain
            chain.insert(0, best)

    def lineage(self) -> tuple[EpochEntry, ...]:
        chain = self.chain()
        entries: list[EpochEntry] = []
        for i, c in enumerate(chain):
            m = c.metadata
            last = chain[i + 1].metadata.start_offset - 1 if i + 1 < len(chain) else m.end_offset
            for offset in range(m.start_offset, min(m.end_offset, last) + 1):
                epoch = epoch_at(m, offset)
                assert epoch is not None
                if not entries or entries[-1].epoch != epoch:
                    entries.append(EpochEntry(epoch=epoch, start_offset=offset))
        return tuple(entries)

    def holes(self) -> list[tuple[int, int]]:
        """Offset ranges between consecutive chain copies that neither holds."""
        chain = [c.metadata for c in self.chain()]
        return [
            (a.end_offset + 1, b.start_offset - 1)
            for a, b in itertools.pairwise(chain)
            if b.start_offset > a.end_offset + 1
        ]

    def start_and_end(self) -> tuple[int | None, int | None]:
        """The chain's last contiguous run, from the last hole (or the head) or the log
        start, whichever is later, to the tip; nothing when the log start is past it."""
        chain = self.chain()
        if not chain:
            return None, None
        holes = self.holes()
        start = holes[-1][1] + 1 if holes else chain[0].metadata.start_offset
        start, end = max(start, self.log_start), chain[-1].metadata.end_offset
        return (start, end) if start <= end else (None, None)

    def segment_for_timestamp(
        self, timestamp: int, history: tuple[EpochEntry, ...]
    ) -> RemoteLogSegmentMetadata | None:
        for c in self.finished():
            m = c.metadata
            if (
                m.end_offset >= self.log_start
                and m.max_timestamp >= timestamp
                and self.agrees_from(m, m.start_offset, history)
            ):
                return m
        return None

    def unreferenced(self) -> list[RemoteLogSegmentMetadata]:
        history = self.lineage()
        chosen = set()
        for c in self.finished():
            for offset in range(c.metadata.start_offset, c.metadata.end_offset + 1):
                found = self.segment_for(offset, history)
                if found is not None:
                    chosen.add(found.segment_id.id)
        return [
            c.metadata
            for c in self.ordered()
            if c.metadata.state != S.COPY_SEGMENT_FINISHED or c.metadata.segment_id.id not in chosen
        ]
