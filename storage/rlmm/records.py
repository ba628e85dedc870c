"""The metadata topic's records and the metadata they carry, both ways, in one place.

Readers turn records into metadata (:func:`metadata_of`, :func:`segment_id_of`,
:func:`tp_of`); writers turn metadata into records (:func:`segment_record`,
:func:`segment_update_record`, :func:`partition_delete_record`, :func:`log_start_record`).
Keeping each builder beside its inverse keeps the two in step: a field added to one side is
seen missing on the other. :func:`validate_segment` refuses metadata that no real segment
can have, before a cache stores it or a writer publishes it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

from protocol.metadata_records import (
    DeletePartitionStateRecord,
    FlatFileColumns,
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
from storage.rlmm.state import RemoteLogMetadataError

__all__ = [
    "InvalidSegmentMetadataError",
    "columns_valid",
    "describe_segment",
    "log_start_record",
    "metadata_of",
    "partition_delete_record",
    "segment_id_of",
    "segment_record",
    "segment_update_record",
    "tp_of",
    "validate_segment",
]

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


class InvalidSegmentMetadataError(RemoteLogMetadataError):
    """Segment metadata that cannot describe a real segment (offsets, epochs or size)."""


# -- records to metadata ------------------------------------------------------------------


def metadata_of(record: RemoteLogSegmentMetadataRecord) -> RemoteLogSegmentMetadata:
    """The segment a RemoteLogSegmentMetadataRecord announces (inverse of
    :func:`segment_record`)."""
    return RemoteLogSegmentMetadata(
        segment_id=segment_id_of(record),
        start_offset=record.start_offset,
        end_offset=record.end_offset,
        max_timestamp=record.max_timestamp,
        leader_epoch=record.leader_epoch,
        event_timestamp=record.event_timestamp,
        segment_leader_epochs=record.segment_leader_epochs,
        segment_size_in_bytes=record.segment_size_in_bytes,
        state=record.state,
    )


def segment_id_of(
    record: RemoteLogSegmentMetadataRecord | RemoteLogSegmentMetadataUpdateRecord,
) -> RemoteLogSegmentId:
    """The segment a segment record names."""
    return RemoteLogSegmentId(
        topic_id_partition=TopicIdPartition(
            topic_id=record.topic_id, topic=record.topic, partition=record.partition
        ),
        id=record.segment_id,
    )


def tp_of(record: DeletePartitionStateRecord | RemoteLogStartOffsetRecord) -> TopicIdPartition:
    """The partition a partition record names."""
    return TopicIdPartition(
        topic_id=record.topic_id, topic=record.topic, partition=record.partition
    )


# -- metadata to records ------------------------------------------------------------------


def segment_record(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataRecord:
    """The record announcing a copy in its state; inverse of :func:`metadata_of`."""
    tp = metadata.topic_id_partition
    return RemoteLogSegmentMetadataRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        segment_id=metadata.segment_id.id,
        start_offset=metadata.start_offset,
        end_offset=metadata.end_offset,
        leader_epoch=metadata.leader_epoch,
        max_timestamp=metadata.max_timestamp,
        event_timestamp=metadata.event_timestamp,
        segment_leader_epochs=metadata.segment_leader_epochs,
        segment_size_in_bytes=metadata.segment_size_in_bytes,
        state=metadata.state,
    )


def segment_update_record(
    metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, now: int
) -> RemoteLogSegmentMetadataUpdateRecord:
    """The record moving a known copy to ``state`` at ``now`` (ms since the epoch)."""
    tp = metadata.topic_id_partition
    return RemoteLogSegmentMetadataUpdateRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        segment_id=metadata.segment_id.id,
        leader_epoch=metadata.leader_epoch,
        event_timestamp=now,
        state=state,
    )


def partition_delete_record(
    tp: TopicIdPartition, state: RemotePartitionDeleteState, now: int
) -> DeletePartitionStateRecord:
    """The record of one step of a deleted partition's clean-up."""
    return DeletePartitionStateRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        epoch=0,
        event_timestamp=now,
        state=state,
    )


def log_start_record(
    tp: TopicIdPartition, start_offset: int, now: int
) -> RemoteLogStartOffsetRecord:
    """The record moving the whole log's start of ``tp`` up to ``start_offset``."""
    return RemoteLogStartOffsetRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        start_offset=start_offset,
        event_timestamp=now,
    )


# -- what metadata may say ----------------------------------------------------------------


def validate_segment(metadata: RemoteLogSegmentMetadata) -> None:
    """Refuse metadata that cannot describe a segment, before any of it reaches the store.

    :raises InvalidSegmentMetadataError: for offsets, sizes, epochs or timestamps out of
        range, or leader epochs that do not ascend from the start offset.
    """
    what = _Described(metadata.segment_id)
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
    problem = _epochs_problem(epochs, metadata.start_offset)
    if problem is not None:
        raise InvalidSegmentMetadataError(f"{what} has leader epochs {epochs!r} {problem}")


def columns_valid(columns: FlatFileColumns) -> bool:
    """Whether :func:`validate_segment` accepts every segment of ``columns``, checked a
    column at a time (the checks are the same; the first failing segment is not named)."""
    if not len(columns):
        return True
    starts, ends = columns.start_offsets, columns.end_offsets
    first_offsets = columns.first_epoch_offsets
    return (
        _within(starts, 0, _INT64_MAX)
        and _within(ends, 0, _INT64_MAX)
        and all(map(operator.le, starts, ends))
        and _within(columns.sizes, 0, _INT32_MAX)
        and _within(columns.leader_epochs, -_INT32_MAX - 1, _INT32_MAX)
        and _within(columns.max_timestamps, -_INT64_MAX - 1, _INT64_MAX)
        and _within(columns.event_timestamps, -_INT64_MAX - 1, _INT64_MAX)
        and _within(columns.first_epochs, 0, _INT32_MAX)
        and _within(first_offsets, 0, _INT64_MAX)
        and all(map(operator.le, first_offsets, starts))
        and all(_epochs_problem(epochs, starts[i]) is None for i, epochs in columns.epochs.items())
    )


def _epochs_problem(epochs: tuple[tuple[int, int], ...], start_offset: int) -> str | None:
    """Why a segment starting at ``start_offset`` cannot have leader epochs ``epochs``, or
    ``None`` if it can."""
    if not epochs or not 0 <= epochs[0][1] <= start_offset:
        return f"that do not cover its start offset {start_offset}"
    pairs = itertools.pairwise(epochs)
    if any(
        b_epoch <= a_epoch or b_offset < a_offset
        for (a_epoch, a_offset), (b_epoch, b_offset) in pairs
    ):
        return "not ascending"
    if epochs[0][0] < 0 or epochs[-1][0] > _INT32_MAX or epochs[-1][1] > _INT64_MAX:
        return "out of range"
    return None


def _within(values: Sequence[int], low: int, high: int) -> bool:
    return low <= min(values) and max(values) <= high


class _Described:
    """A segment's description, formatted only when an error message needs it (the checks
    run for every segment loaded, and almost all pass)."""

    __slots__ = ("segment_id",)

    def __init__(self, segment_id: RemoteLogSegmentId) -> None:
        self.segment_id = segment_id

    def __str__(self) -> str:
        return describe_segment(self.segment_id)


def describe_segment(segment_id: RemoteLogSegmentId) -> str:
    """How error messages name a segment: its id, partition and topic id."""
    tp = segment_id.topic_id_partition
    return f"segment {segment_id.id} of {tp} ({tp.topic_id})"
