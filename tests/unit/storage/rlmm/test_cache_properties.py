"""The metadata cache against a brute-force model, on random segment histories.

Two kinds of history: arbitrary copies with arbitrary epochs (anything the schema allows),
and simulated partitions whose leaders change cleanly or uncleanly (truncating the log)
while copies, duplicate copies, failed copies and retention deletes happen. After every
event the cache must agree with :class:`ReferenceCache` on the lineage, and at the end on
every lookup; a cache rebuilt from its own segment list (what a snapshot restores) must
give the same answers as the one that saw every event.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import (
    FlatFileSnapshot,
    decode_flat_file_columns,
    encode_flat_file,
)
from storage.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.lineage import agreeing_end
from storage.rlmm.snapshot import stored_segments
from storage.rlmm.state import InvalidStateTransitionError
from storage.rlmm.store import clipped_ranges
from tests.unit.storage.rlmm.reference import TP, ReferenceCache, S, seg

OFFSETS = range(0, 64)
EPOCHS = range(0, 9)


@dataclass(frozen=True)
class Add:
    metadata: RemoteLogSegmentMetadata


@dataclass(frozen=True)
class Update:
    pick: int
    """Index (modulo) into the segments added so far."""
    state: RemoteLogSegmentState


@dataclass(frozen=True)
class LogStart:
    """The whole log's start moves (a DeleteRecords, or data deleted before it was tiered)."""

    offset: int


Event = Add | Update | LogStart


@st.composite
def arbitrary_segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    # Few distinct boundaries, so that copies often share starts, ends and epochs (ties).
    start = draw(st.one_of(st.sampled_from([0, 10, 20, 30]), st.integers(0, 40)))
    end = start + draw(st.one_of(st.sampled_from([0, 9]), st.integers(0, 10)))
    epochs = sorted(draw(st.sets(st.sampled_from(EPOCHS), min_size=1, max_size=3)))
    first = draw(st.integers(max(0, start - 4), start))
    rest = sorted(
        draw(
            st.lists(
                st.integers(first, end + 2), min_size=len(epochs) - 1, max_size=len(epochs) - 1
            )
        )
    )
    offsets = [first, *rest]
    return seg(
        start,
        end,
        tuple(zip(epochs, offsets, strict=True)),
        max_timestamp=draw(st.integers(0, 100)),
    )


@st.composite
def arbitrary_histories(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.integers(0, 6))
        if kind < 2 or not events:
            events.append(Add(draw(arbitrary_segments())))
        elif kind == 6:
            events.append(LogStart(draw(st.integers(0, 45))))
        else:
            events.append(Update(draw(st.integers(0, 1000)), draw(st.sampled_from(list(S)))))
    return events


@st.composite
def ascending_histories(draw: st.DrawFn) -> list[Event]:
    """Copies by start offset, mostly as a leader copies its log (epochs that do not go
    down, each copy after the last), with near misses: a gap, a copy of one offset, a leader
    change inside a copy, an overlap of an offset or more, an epoch lower than the last
    one's; most copies finish, some stay started or are being deleted."""
    events: list[Event] = []
    start, epoch = draw(st.integers(0, 5)), draw(st.integers(1, 2))
    for number in range(draw(st.integers(1, 12))):
        end = start + draw(st.sampled_from([0, 0, 1, 2, 4, 6]))
        epoch = max(0, epoch + draw(st.sampled_from([0, 0, 0, 1, 1, -1])))
        epochs: tuple[tuple[int, int], ...] = ((epoch, start),)
        if draw(st.integers(0, 5)) == 0 and end > start:
            epoch += 1
            epochs = ((epoch - 1, start), (epoch, draw(st.integers(start + 1, end))))
        events.append(Add(seg(start, end, epochs, max_timestamp=end)))
        fate = draw(
            st.sampled_from([S.COPY_SEGMENT_FINISHED] * 4 + [None, S.DELETE_SEGMENT_STARTED])
        )
        if fate is not None:
            events.append(Update(number, S.COPY_SEGMENT_FINISHED))
            if fate == S.DELETE_SEGMENT_STARTED:
                events.append(Update(number, fate))
        if draw(st.integers(0, 7)) == 0:
            events.append(LogStart(draw(st.integers(0, end + 1))))
        start = max(0, end + 1 + draw(st.sampled_from([0, 0, 0, 0, 1, 3, -1, -1, -2])))
    return events


@dataclass(frozen=True)
class Simulation:
    events: list[Event]
    log: list[int]
    """The epoch of each offset of the final leader's log."""

    def leader_lineage(self) -> tuple[EpochEntry, ...]:
        entries: list[EpochEntry] = []
        for offset, epoch in enumerate(self.log):
            if not entries or entries[-1].epoch != epoch:
                entries.append(EpochEntry(epoch=epoch, start_offset=offset))
        return tuple(entries)


@st.composite
def simulated_histories(draw: st.DrawFn) -> Simulation:  # noqa: C901 (one random history, step by step)
    """A partition whose leaders change, sometimes uncleanly, while a copier follows it."""
    log: list[int] = []  # epoch of each offset in the current leader's log
    epoch = 0
    copied_to = 0  # next offset the copier wants
    events: list[Event] = []
    added: list[RemoteLogSegmentMetadata] = []
    for _ in range(draw(st.integers(1, 40))):
        action = draw(
            st.sampled_from(
                [
                    "append",
                    "append",
                    "elect",
                    "unclean",
                    "copy",
                    "copy",
                    "duplicate",
                    "fail",
                    "expire",
                ]
            )
        )
        if action == "append":
            log.extend([epoch] * draw(st.integers(1, 6)))
        elif action == "elect":
            epoch += 1
        elif action == "unclean" and log:
            log = log[: draw(st.integers(0, len(log)))]
            epoch += 1
            copied_to = min(copied_to, len(log))
        elif action in ("copy", "duplicate", "fail") and log:
            first = draw(st.integers(0, len(log) - 1)) if action == "duplicate" else copied_to
            if first >= len(log):
                continue
            last = draw(st.integers(first, min(len(log) - 1, first + 7)))
            metadata = seg(first, last, _epochs_of(log, first, last), max_timestamp=last)
            events.append(Add(metadata))
            added.append(metadata)
            if action != "fail":
                events.append(Update(len(added) - 1, S.COPY_SEGMENT_FINISHED))
                copied_to = max(copied_to, last + 1)
            elif draw(st.booleans()):
                events.append(Update(len(added) - 1, S.DELETE_SEGMENT_STARTED))
        elif action == "expire" and added:
            oldest = min(range(len(added)), key=lambda i: added[i].start_offset)
            events.append(Update(oldest, S.DELETE_SEGMENT_STARTED))
            if draw(st.booleans()):
                events.append(Update(oldest, S.DELETE_SEGMENT_FINISHED))
    return Simulation(events, log)


def _epochs_of(log: list[int], first: int, last: int) -> tuple[tuple[int, int], ...]:
    entries: list[tuple[int, int]] = []
    for offset in range(first, last + 1):
        if not entries or entries[-1][0] != log[offset]:
            entries.append((log[offset], offset))
    return tuple(entries)


@st.composite
def lineages(draw: st.DrawFn) -> tuple[EpochEntry, ...]:
    epochs = sorted(draw(st.sets(st.sampled_from(EPOCHS), min_size=1, max_size=4)))
    starts = sorted(draw(st.sets(st.integers(0, 50), min_size=len(epochs), max_size=len(epochs))))
    return tuple(EpochEntry(epoch=e, start_offset=o) for e, o in zip(epochs, starts, strict=True))


def replay(events: list[Event]) -> tuple[RemoteLogMetadataCache, ReferenceCache]:
    cache = RemoteLogMetadataCache()
    model = ReferenceCache()
    refused = go_on([cache], model, events, [])
    assert cache.invalid_transitions == refused
    return cache, model


def go_on(
    caches: list[RemoteLogMetadataCache],
    model: ReferenceCache,
    events: list[Event],
    added: list[RemoteLogSegmentMetadata],
) -> int:
    """Apply ``events`` to every cache and the model, checking that each cache accepts or
    refuses each as the model does; ``added`` holds the segments added so far (updates
    pick from it). Returns the number refused."""
    refused = 0
    for event in events:
        if isinstance(event, Add):
            added.append(event.metadata)
            expected = model.add(event.metadata)
            outcomes = [_outcome(cache.add_segment, event.metadata) for cache in caches]
        elif isinstance(event, LogStart):
            model.set_log_start(event.offset)
            expected = True
            outcomes = [_outcome(cache.set_log_start, TP, event.offset) for cache in caches]
        else:
            target = added[event.pick % len(added)]
            expected = model.update(target.segment_id.id, event.state)
            outcomes = [
                _outcome(
                    cache.update_segment,
                    target.segment_id,
                    event.state,
                    leader_epoch=0,
                    event_timestamp=0,
                )
                for cache in caches
            ]
        assert outcomes == [expected] * len(caches), event
        refused += not expected
        for cache in caches:
            assert cache.lineage(TP) == model.lineage()
    return refused


def _outcome(action: Callable[..., None], *args: object, **kwargs: object) -> bool:
    try:
        action(*args, **kwargs)
    except InvalidStateTransitionError:
        return False
    return True


def ident(metadata: RemoteLogSegmentMetadata | None) -> uuid.UUID | None:
    return None if metadata is None else metadata.segment_id.id


def assert_agrees(
    cache: RemoteLogMetadataCache, model: ReferenceCache, other: tuple[EpochEntry, ...]
) -> None:
    assert [(m.segment_id.id, m.state) for m in cache.segments(TP)] == [
        (c.metadata.segment_id.id, c.metadata.state) for c in model.ordered()
    ]
    own = model.lineage()
    assert cache.lineage(TP) == own
    assert (
        cache.remote_log_start_offset(TP),
        cache.remote_log_end_offset(TP),
    ) == model.start_and_end()
    assert cache.remote_log_holes(TP) == model.holes()
    for history in (own, other):
        for offset in OFFSETS:
            assert ident(cache.segment_for(TP, offset, history)) == ident(
                model.segment_for(offset, history)
            )
        for timestamp in (0, 17, 50, 99):
            assert ident(cache.segment_for_timestamp(TP, timestamp, history)) == ident(
                model.segment_for_timestamp(timestamp, history)
            )
    assert [m.segment_id.id for m in cache.unreferenced_segments(TP)] == [
        m.segment_id.id for m in model.unreferenced()
    ]


def restored(cache: RemoteLogMetadataCache) -> RemoteLogMetadataCache:
    fresh = RemoteLogMetadataCache()
    for tp in cache.partitions():
        fresh.restore_partition(
            tp, cache.segments(tp), cache.delete_status(tp), cache.log_start_offset(tp)
        )
    return fresh


def restored_in_bulk(cache: RemoteLogMetadataCache) -> RemoteLogMetadataCache:
    """A cache restored by :meth:`RemoteLogMetadataCache.restore_columns` from the flat
    files of ``cache``'s partitions, as a snapshot load does."""
    fresh = RemoteLogMetadataCache()
    for tp in cache.partitions():
        entries = tuple(stored_segments(cache, tp))
        data = encode_flat_file(
            FlatFileSnapshot(topic_id=tp.topic_id, metadata_topic_offset=0, entries=entries)
        )
        columns = decode_flat_file_columns(data)
        assert fresh.restore_columns(
            tp, columns, cache.delete_status(tp), cache.log_start_offset(tp)
        )
    return fresh


def assert_same(
    cache: RemoteLogMetadataCache,
    other_cache: RemoteLogMetadataCache,
    ids: list[RemoteLogSegmentMetadata],
    other: tuple[EpochEntry, ...],
) -> None:
    """Both caches answer every query alike: whole metadata, not only ids."""
    assert cache.partitions() == other_cache.partitions()
    assert len(cache) == len(other_cache)
    for tp in cache.partitions():
        assert cache.segments(tp) == other_cache.segments(tp)
        assert cache.lineage(tp) == other_cache.lineage(tp)
        assert cache.remote_log_start_offset(tp) == other_cache.remote_log_start_offset(tp)
        assert cache.remote_log_end_offset(tp) == other_cache.remote_log_end_offset(tp)
        assert cache.remote_log_holes(tp) == other_cache.remote_log_holes(tp)
        assert cache.log_start_offset(tp) == other_cache.log_start_offset(tp)
        assert cache.delete_status(tp) == other_cache.delete_status(tp)
        assert cache.unreferenced_segments(tp) == other_cache.unreferenced_segments(tp)
        for history in (cache.lineage(tp), other):
            for offset in OFFSETS:
                assert cache.segment_for(tp, offset, history) == other_cache.segment_for(
                    tp, offset, history
                )
            for timestamp in (0, 17, 50, 99):
                assert cache.segment_for_timestamp(
                    tp, timestamp, history
                ) == other_cache.segment_for_timestamp(tp, timestamp, history)
    for metadata in ids:
        assert cache.segment(metadata.segment_id) == other_cache.segment(metadata.segment_id)
        assert cache.segment_state(metadata.segment_id) == other_cache.segment_state(
            metadata.segment_id
        )


@settings(max_examples=150, deadline=None)
@given(events=arbitrary_histories(), more=arbitrary_histories(), other=lineages())
def test_a_bulk_restore_answers_as_the_per_segment_restore(
    events: list[Event], more: list[Event], other: tuple[EpochEntry, ...]
) -> None:
    """Restored in bulk or segment by segment, a cache answers alike and as the model
    does, and goes on alike with whatever events follow."""
    cache, model = replay(events)
    in_bulk, by_segment = restored_in_bulk(cache), restored(cache)
    added = [event.metadata for event in events if isinstance(event, Add)]
    assert_same(in_bulk, by_segment, added, other)
    assert_agrees(in_bulk, model, other)
    refused = go_on([in_bulk, by_segment], model, more, added)
    assert in_bulk.invalid_transitions == by_segment.invalid_transitions == refused
    assert_same(in_bulk, by_segment, added, other)
    assert_agrees(in_bulk, model, other)


@settings(max_examples=300, deadline=None)
@given(events=ascending_histories(), more=arbitrary_histories(), other=lineages())
def test_a_bulk_restore_of_ascending_copies_answers_as_the_per_segment_restore(
    events: list[Event], more: list[Event], other: tuple[EpochEntry, ...]
) -> None:
    """The common shape, whose chain a bulk restore takes without walking it, and its
    near misses (overlaps, leader changes inside a copy, unfinished copies)."""
    cache, model = replay(events)
    in_bulk, by_segment = restored_in_bulk(cache), restored(cache)
    added = [event.metadata for event in events if isinstance(event, Add)]
    assert_same(in_bulk, by_segment, added, other)
    assert_agrees(in_bulk, model, other)
    go_on([in_bulk, by_segment], model, more, added)
    assert_same(in_bulk, by_segment, added, other)
    assert_agrees(in_bulk, model, other)


@settings(max_examples=150, deadline=None)
@given(simulation=simulated_histories(), more=arbitrary_histories(), other=lineages())
def test_a_bulk_restore_of_a_simulated_partition_answers_as_the_per_segment_restore(
    simulation: Simulation, more: list[Event], other: tuple[EpochEntry, ...]
) -> None:
    cache, model = replay(simulation.events)
    in_bulk, by_segment = restored_in_bulk(cache), restored(cache)
    added = [event.metadata for event in simulation.events if isinstance(event, Add)]
    for history in (other, simulation.leader_lineage()):
        assert_same(in_bulk, by_segment, added, history)
        assert_agrees(in_bulk, model, history)
    go_on([in_bulk, by_segment], model, more, added)
    assert_same(in_bulk, by_segment, added, other)
    assert_agrees(in_bulk, model, other)


@settings(max_examples=150, deadline=None)
@given(events=arbitrary_histories(), other=lineages())
def test_arbitrary_histories_match_the_model(
    events: list[Event], other: tuple[EpochEntry, ...]
) -> None:
    cache, model = replay(events)
    assert_agrees(cache, model, other)
    assert_agrees(restored(cache), model, other)


@settings(max_examples=150, deadline=None)
@given(simulation=simulated_histories(), other=lineages())
def test_simulated_partitions_match_the_model(
    simulation: Simulation, other: tuple[EpochEntry, ...]
) -> None:
    cache, model = replay(simulation.events)
    assert_agrees(cache, model, other)
    assert_agrees(cache, model, simulation.leader_lineage())
    assert_agrees(restored(cache), model, other)


@settings(max_examples=100, deadline=None)
@given(simulation=simulated_histories())
def test_readers_get_exactly_the_leaders_records(simulation: Simulation) -> None:
    """A record is identified by (epoch, offset): a leader writes each offset once in its
    epoch. Under the final leader's lineage, every offset that some finished copy holds as
    the leader wrote it is served, and a reader going on from it up to ``agreeing_end``
    reads only the leader's records, never a truncated leader's."""
    cache, model = replay(simulation.events)
    log = simulation.log
    leader = simulation.leader_lineage()
    for offset in range(len(log)):
        held = any(
            c.metadata.start_offset <= offset <= c.metadata.end_offset
            and dict(_per_offset(c.metadata)).get(offset) == log[offset]
            for c in model.finished()
        )
        found = cache.segment_for(TP, offset, leader)
        assert (found is not None) == held
        if found is None:
            continue
        served = dict(_per_offset(found))
        stop = min(agreeing_end(found, offset, leader), len(log) - 1)
        assert stop >= offset
        assert all(served[o] == log[o] for o in range(offset, stop + 1))


def _per_offset(metadata: RemoteLogSegmentMetadata) -> list[tuple[int, int]]:
    """``(offset, epoch)`` for every offset of the copy."""
    return [
        (offset, epoch)
        for epoch, first, last in clipped_ranges(
            metadata.segment_leader_epochs, metadata.start_offset, metadata.end_offset
        )
        for offset in range(first, last + 1)
    ]
