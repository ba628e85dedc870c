"""The state one segment hands to the next: leader-epoch lineage and producer state.

A remote segment's leader-epoch checkpoint holds the whole lineage up to its end, and its
producer snapshot and transaction index depend on every producer's state before it (a
transaction aborted here may have begun segments earlier). Segments of one partition are
built in parallel by different tasks, so each task is handed that prior state by the driver,
which folds it here from what the fetch tasks saw:

- the leader epoch of every span of batches (:class:`~.planner.BatchSpan`);
- the batches that matter to producer state, thinned by :class:`ProducerEventFilter`: a
  segment boundary always falls on a span boundary, and within a span only a producer's first
  batch, first transactional batch and last batch between two markers change what the state
  is at the span's end, as :class:`~storage.segment.producer_state.ProducerStateTracker`
  replays them.

The fold uses the same tracker and the same epoch rule as
:class:`~storage.segment.builder.SegmentBuilder`, so the prior state a task gets is exactly
what the builder would have carried over had it built the segments one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.indexes.leader_epoch_checkpoint import EpochEntry, assign, entries_in_range
from protocol.indexes.producer_snapshot import ProducerSnapshotEntry
from protocol.records import BatchHeader, ControlRecord
from storage.segment.builder import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from storage.segment.producer_state import InvalidTxnStateError, ProducerStateTracker
from storage.tiering.planner import BatchSpan, PlannedSegment

__all__ = [
    "ChainError",
    "ChainState",
    "ProducerEvent",
    "ProducerEventFilter",
    "SegmentChain",
    "fold_chain",
    "metadata_epochs",
]


class ChainError(ValueError):
    """The batches break a rule that producer state relies on (the builder would refuse
    them too); the partition cannot be tiered past that point."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainState:
    """Epoch lineage and producers at a segment boundary."""

    lineage: tuple[EpochEntry, ...] = ()
    producers: tuple[ProducerSnapshotEntry, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerEvent:
    """A batch of an idempotent or transactional producer, with its marker if it is one."""

    header: BatchHeader
    marker: ControlRecord | None
    """The control record of a non-empty control batch; ``None`` for data batches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentChain:
    """What the task building one planned segment needs, and what its metadata says."""

    prior: ChainState
    segment_leader_epochs: tuple[tuple[int, int], ...]


class ProducerEventFilter:
    """Keeps the batches of one span that decide producer state at the span's end.

    Call :meth:`add` for every batch of a producer in offset order and :meth:`flush` at
    each span end; :attr:`events` collects what was kept, in offset order.
    """

    __slots__ = ("_pending", "_runs", "events")

    def __init__(self) -> None:
        self.events: list[ProducerEvent] = []
        self._pending: list[ProducerEvent] = []
        # Per producer, the current marker-free run: [first, first transactional, latest].
        self._runs: dict[int, list[ProducerEvent | None]] = {}

    def add(self, header: BatchHeader, marker: ControlRecord | None) -> None:
        event = ProducerEvent(header=header, marker=marker)
        if header.is_control:
            self._close_run(header.producer_id)
            self._pending.append(event)
            return
        run = self._runs.get(header.producer_id)
        if run is None:
            run = self._runs[header.producer_id] = [event, None, event]
        run[2] = event
        if header.is_transactional and run[1] is None:
            run[1] = event

    def flush(self) -> None:
        """End the span: what was kept is final."""
        for producer_id in list(self._runs):
            self._close_run(producer_id)
        self._pending.sort(key=lambda e: e.header.base_offset)
        self.events.extend(self._pending)
        self._pending.clear()

    def _close_run(self, producer_id: int) -> None:
        run = self._runs.pop(producer_id, None)
        if run is None:
            return
        kept: list[ProducerEvent] = []
        for event in run:
            if event is not None and all(event is not k for k in kept):
                kept.append(event)
        kept.sort(key=lambda e: e.header.base_offset)
        self._pending.extend(kept)


def fold_chain(
    initial: ChainState,
    spans: Sequence[BatchSpan],
    segments: Sequence[PlannedSegment],
    events: Sequence[ProducerEvent],
    *,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
) -> tuple[list[SegmentChain], ChainState]:
    """The prior state and segment leader epochs of each planned segment, in order, and the
    state after the last one.

    :param initial: the state after the partition's last remote segment (empty for the first).
    :param events: the kept producer batches of all spans, in offset order.
    :raises ChainError: when a producer writes a non-transactional batch inside its open
        transaction.
    """
    chains = []
    state = initial
    cursor = 0
    for segment in segments:
        lineage = state.lineage
        for span in spans[segment.first_span : segment.end_span]:
            epoch = span.leader_epoch
            if epoch >= 0 and (not lineage or epoch > lineage[-1].epoch):
                lineage = assign(lineage, epoch, span.base_offset)
        inside = entries_in_range(lineage, segment.start_offset, segment.end_offset + 1)
        tracker = ProducerStateTracker(state.producers)
        first_offset = spans[segment.first_span].base_offset
        while cursor < len(events) and events[cursor].header.base_offset < first_offset:
            cursor += 1
        while cursor < len(events) and events[cursor].header.base_offset <= segment.end_offset:
            _replay(tracker, events[cursor])
            cursor += 1
        if segment.max_timestamp >= 0:
            tracker.expire(segment.max_timestamp - producer_id_expiration_ms)
        chains.append(
            SegmentChain(
                prior=state,
                segment_leader_epochs=tuple((e.epoch, e.start_offset) for e in inside),
            )
        )
        state = ChainState(lineage=lineage, producers=tracker.snapshot())
    return chains, state


def metadata_epochs(
    segment_leader_epochs: tuple[tuple[int, int], ...], start_offset: int
) -> tuple[tuple[int, int], ...]:
    """The segment leader epochs to publish: KIP-405 metadata needs at least one.

    A broker that stamps no leader epoch on a partition's batches (-1) has only ever had one
    leader as far as its log can tell, which Kafka calls epoch 0.
    """
    return segment_leader_epochs or ((0, start_offset),)


def _replay(tracker: ProducerStateTracker, event: ProducerEvent) -> None:
    header = event.header
    if not header.is_control:
        try:
            tracker.append_data(header)
        except InvalidTxnStateError as err:
            raise ChainError(str(err)) from err
    elif event.marker is not None:
        tracker.end_transaction(header, event.marker)
