"""Domain values shared by the storage managers, the metadata manager and the pipeline.

These mirror KIP-405's Java types (``TopicIdPartition``, ``RemoteLogSegmentId``,
``RemoteLogSegmentMetadata``, ``LogSegmentData``) as frozen dataclasses. The wire
encodings of the metadata records live in :mod:`protocol.metadata_records`; this module
is what the rest of ``storage`` and ``proxy`` pass around.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum

from protocol.metadata_records import RemoteLogSegmentState, RemotePartitionDeleteState

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteState",
    "TopicIdPartition",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicIdPartition:
    """A partition named both by topic id (survives re-creation) and by name (for humans)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's TopicPartition.toString(): the string murmur2 hashes for the metadata topic.
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentId:
    """One copy attempt of one segment: a fresh UUID per attempt, as KIP-405 requires."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        """A new, never reused id for a copy attempt of ``topic_id_partition``."""
        return cls(topic_id_partition=topic_id_partition, id=uuid.uuid4())


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadata:
    """What the metadata topic says about one remote segment (offsets are inclusive)."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp: int
    leader_epoch: int
    """Epoch of the writer that produced this event (KIP-405 ``LeaderEpoch``)."""
    event_timestamp: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    """``(leader epoch, start offset)`` pairs within the segment, ascending."""
    segment_size_in_bytes: int
    state: RemoteLogSegmentState

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition


class IndexType(Enum):
    """The auxiliary files stored next to a segment's ``.log``; values are the file suffixes."""

    OFFSET = "index"
    TIMESTAMP = "timeindex"
    TRANSACTION = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    LEADER_EPOCH = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSegmentData:
    """The bytes of one segment and its indexes, ready to upload.

    ``log`` may be a view of a mapped spill file (the tiering pipeline hands segments over
    without copying them): a storage manager that keeps it past ``copy_log_segment`` must
    copy it (``bytes(data.log)``).
    """

    log: bytes | memoryview
    offset_index: bytes
    time_index: bytes
    transaction_index: bytes
    producer_snapshot: bytes
    leader_epoch_checkpoint: bytes

    def file_for(self, index_type: IndexType) -> bytes:
        """The bytes of the auxiliary file ``index_type``."""
        return {
            IndexType.OFFSET: self.offset_index,
            IndexType.TIMESTAMP: self.time_index,
            IndexType.TRANSACTION: self.transaction_index,
            IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
            IndexType.LEADER_EPOCH: self.leader_epoch_checkpoint,
        }[index_type]
