"""Builders of a remote segment's metadata and of the files a copy uploads.

:func:`segment_metadata` makes a :class:`RemoteLogSegmentMetadata` for tests that care about a
few of its fields: every field has a default that makes a valid copy (offsets 0-9 in leader
epoch 0), so a test names only what it checks. :func:`storage.rlmm.records.segment_record`
turns one into the record the metadata topic carries. :func:`segment_data` makes the six
files of a copy around a test's ``.log`` bytes.
"""

from __future__ import annotations

import uuid

from storage.model import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = ["segment_data", "segment_metadata"]


def segment_metadata(
    topic: TopicIdPartition,
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    epochs: tuple[tuple[int, int], ...] | None = None,
    size: int = 0,
    timestamp: int = 0,
    event_timestamp: int | None = None,
    segment_id: uuid.UUID | None = None,
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
) -> RemoteLogSegmentMetadata:
    """A copy of ``topic`` from ``start_offset`` to ``end_offset`` (ten offsets unless said).

    :param epochs: its leader-epoch lineage as (epoch, start offset) pairs; by default epoch
        0 from ``start_offset``. The copy's own leader epoch is the last one.
    :param size: its ``.log`` size in bytes.
    :param timestamp: its largest record timestamp, and its event time unless
        ``event_timestamp`` says otherwise.
    :param segment_id: its id; a fresh random one by default.
    """
    lineage = ((0, start_offset),) if epochs is None else epochs
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId(
            topic_id_partition=topic, id=uuid.uuid4() if segment_id is None else segment_id
        ),
        start_offset=start_offset,
        end_offset=start_offset + 9 if end_offset is None else end_offset,
        max_timestamp=timestamp,
        leader_epoch=lineage[-1][0],
        event_timestamp=timestamp if event_timestamp is None else event_timestamp,
        segment_leader_epochs=lineage,
        segment_size_in_bytes=size,
        state=state,
    )


def segment_data(log: bytes) -> LogSegmentData:
    """``log`` with an index file of every other kind, as a copy uploads them.

    The index files differ from each other and compress well, as real ones do; the
    transaction index is empty, as a segment without aborted transactions has it; the
    leader-epoch checkpoint is one Kafka reads (epoch 0 from offset 0). Their contents are
    otherwise arbitrary: storage managers treat every file as opaque bytes.
    """
    return LogSegmentData(
        log=log,
        offset_index=bytes(range(256)) * 40,
        time_index=b"time" * 300,
        transaction_index=b"",
        producer_snapshot=b"snapshot" * 10,
        leader_epoch_checkpoint=b"0\n1\n0 0\n",
    )
