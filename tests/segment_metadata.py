"""A remote segment's metadata for tests that need one and care only about a few fields."""

from __future__ import annotations

from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = ["segment_metadata"]


def segment_metadata(
    topic: TopicIdPartition,
    *,
    size: int = 0,
    end_offset: int = 9,
    timestamp: int = 0,
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
) -> RemoteLogSegmentMetadata:
    """A new segment of ``topic`` from offset 0 to ``end_offset``, of ``size`` bytes, in
    leader epoch 0, with ``timestamp`` as its largest and its event time."""
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId.generate(topic),
        start_offset=0,
        end_offset=end_offset,
        max_timestamp=timestamp,
        leader_epoch=0,
        event_timestamp=timestamp,
        segment_leader_epochs=((0, 0),),
        segment_size_in_bytes=size,
        state=state,
    )
