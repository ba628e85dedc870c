"""The remote log metadata cache: what ``__remote_log_metadata`` says, ready for lookups.

Kafka's ``RemoteLogMetadataCache`` keeps, per partition, a map from leader epoch to an
offset → segment-id map, plus unreferenced segments. This cache answers the same questions
from a compact per-partition store (:mod:`storage.rlmm.store`, about 80 bytes per segment)
and reads the leader epochs of each segment when it needs them:

Which copy serves an offset, and the lineage chain that makes up the remote log, are
:mod:`storage.rlmm.lineage`; the records' conversions and the checks of what metadata may
say are :mod:`storage.rlmm.records`; the rules of the state machines are
:mod:`storage.rlmm.state`. This module holds the cache's public face: applying events and
answering lookups, each a few lines over those.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import (
    FlatFileColumns,
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
from storage.rlmm.lineage import LineageView, PartitionChain
from storage.rlmm.records import (
    InvalidSegmentMetadataError,
    columns_valid,
    describe_segment,
    metadata_of,
    segment_id_of,
    tp_of,
    validate_segment,
)
from storage.rlmm.state import (
    InvalidStateTransitionError,
    PartitionDeleteStatus,
    check_partition_transition,
    check_segment_transition,
    check_segment_update,
)

__all__ = [
    "InvalidSegmentMetadataError",
    "PartitionDeleteStatus",
    "RemoteLogMetadataCache",
]

_FINISHED = int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
_RESTORABLE_STATES = frozenset(
    int(state)
    for state in RemoteLogSegmentState
    if state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
)
_StateT = TypeVar("_StateT", RemoteLogSegmentState, RemotePartitionDeleteState)


class RemoteLogMetadataCache:
    """Every partition's remote segments and delete state, as the metadata topic built them.

    Events come in through :meth:`apply` (or the typed :meth:`add_segment`,
    :meth:`update_segment`, :meth:`update_partition_delete`); an event that breaks the state
    machine of :mod:`storage.rlmm.state` raises :class:`InvalidStateTransitionError`,
    changes nothing, and is counted in :attr:`invalid_transitions`. Not thread-safe: one
    event loop owns it.
    """

    def __init__(self) -> None:
        self._topics: dict[uuid.UUID, dict[int, PartitionChain]] = {}
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
            self.add_segment(metadata_of(record))
        elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
            self.update_segment(
                segment_id_of(record),
                record.state,
                leader_epoch=record.leader_epoch,
                event_timestamp=record.event_timestamp,
            )
        elif isinstance(record, RemoteLogStartOffsetRecord):
            self.set_log_start(tp_of(record), record.start_offset)
        else:
            self.update_partition_delete(
                tp_of(record),
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
            self._check_add(metadata_of(record))
        elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
            self._check_update(segment_id_of(record), record.state)
        elif isinstance(record, RemoteLogStartOffsetRecord):
            if record.start_offset < 0:
                raise InvalidSegmentMetadataError(
                    f"log start {record.start_offset} of {tp_of(record)} is negative"
                )
        else:
            self._check_partition(tp_of(record), record.state)

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
                raise InvalidSegmentMetadataError(
                    f"{describe_segment(metadata.segment_id)} is deleted"
                )
            validate_segment(metadata)
            if partition.seg.find(metadata.segment_id.id) is not None:
                raise InvalidSegmentMetadataError(
                    f"{describe_segment(metadata.segment_id)} is repeated"
                )
            partition.insert(metadata)
            self._segment_count += 1
        partition.delete_status = delete_status
        partition.log_start = log_start

    def restore_columns(
        self,
        tp: TopicIdPartition,
        columns: FlatFileColumns,
        delete_status: PartitionDeleteStatus | None,
        log_start: int = 0,
    ) -> bool:
        """Load a partition's materialised state from a decoded snapshot in bulk: the same
        cache as :meth:`restore_partition` of each segment entry in file order, built a
        column at a time with the chain walked once.

        Returns ``False``, changing nothing, when it cannot vouch for the entries in bulk:
        the partition is already held, or :meth:`restore_partition` would refuse a segment
        (impossible metadata, DELETE_SEGMENT_FINISHED, a repeated id). The caller then
        restores them with :meth:`restore_partition`, which names the refused segment.
        """
        if (
            self._find_partition(tp) is not None
            or not _RESTORABLE_STATES.issuperset(columns.states)
            or len(set(columns.segment_ids)) != len(columns)
            or not columns_valid(columns)
        ):
            return False
        partition = self._partition(tp)
        partition.fill(columns)
        self._segment_count += len(columns)
        partition.delete_status = delete_status
        partition.log_start = log_start
        return True

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
        view = LineageView(lineage)
        epoch = view.epoch_at(offset)
        partition = self._find_partition(tp)
        if epoch is None or partition is None or offset < partition.log_start:
            return None
        slot = partition.find(epoch, offset, view)
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
        view = LineageView(lineage)
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

    def unreferenced_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Copies no read will use: unfinished or being deleted, or finished but never
        chosen under :meth:`lineage` (duplicates, truncated leaders' copies, and copies
        wholly below the log start, whose records were deleted). These are what a cleaner
        may delete."""
        partition = self._find_partition(tp)
        if partition is None:
            return []
        seg = partition.seg
        lineage = LineageView(partition.lineage())
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

    def _find_partition(self, tp: TopicIdPartition) -> PartitionChain | None:
        return self._topics.get(tp.topic_id, {}).get(tp.partition)

    def _partition(self, tp: TopicIdPartition) -> PartitionChain:
        partitions = self._topics.setdefault(tp.topic_id, {})
        found = partitions.get(tp.partition)
        if found is None:
            found = partitions[tp.partition] = PartitionChain(tp)
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

    def _locate(self, segment_id: RemoteLogSegmentId) -> tuple[PartitionChain | None, int | None]:
        partition = self._find_partition(segment_id.topic_id_partition)
        if partition is None:
            return None, None
        return partition, partition.seg.find(segment_id.id)

    def _set_state(
        self,
        partition: PartitionChain,
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
    ) -> tuple[PartitionChain | None, int | None]:
        partition, slot = self._locate(metadata.segment_id)
        current = None
        if partition is not None and slot is not None:
            current = RemoteLogSegmentState(partition.seg.state[slot])
        self._counted(
            check_segment_transition, _Described(metadata.segment_id), current, metadata.state
        )
        if current is None:
            validate_segment(metadata)
        return partition, slot

    def _check_update(
        self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState
    ) -> tuple[PartitionChain, int]:
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


@dataclass(frozen=True, slots=True)
class _Described:
    """Names a segment or partition in an error message, formatted only if one is raised."""

    subject: RemoteLogSegmentId | TopicIdPartition

    def __str__(self) -> str:
        if isinstance(self.subject, TopicIdPartition):
            return f"partition {self.subject} ({self.subject.topic_id})"
        return describe_segment(self.subject)
