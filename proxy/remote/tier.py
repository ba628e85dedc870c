"""The tiered partitions as the read path sees them: which partition a request names, its
remote range and leader-epoch lineage (:class:`TieredPartitions`), over the metadata cache
(:class:`RemoteLogMetadata`) and what the broker says each topic's id is now
(:mod:`proxy.remote.topic_ids`). How the proxy records a metadata change is
:class:`MetadataPublisher`.

The read path's services are built and wired by the proxy's composition root,
:mod:`proxy.app`; none of them reaches another through this module.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.metadata_records import MetadataRecord
from proxy.remote.offsets import RemoteRange
from proxy.remote.topic_ids import TopicIds
from storage.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from storage.remote_reader import RemoteSegmentLookup

__all__ = ["MetadataPublisher", "RemoteLogMetadata", "TieredPartitions", "tiered_names"]


class RemoteLogMetadata(RemoteSegmentLookup, Protocol):
    """The metadata cache as the read path queries it (``RemoteLogMetadataCache``)."""

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None: ...

    def remote_log_end_offset(self, tp: TopicIdPartition) -> int | None: ...

    def topic_id_partition(self, topic: str, partition: int) -> TopicIdPartition | None: ...

    def topic_id_partition_by_id(
        self, topic_id: uuid.UUID, partition: int
    ) -> TopicIdPartition | None: ...

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...

    def log_start_offset(self, tp: TopicIdPartition) -> int: ...

    def partitions(self) -> list[TopicIdPartition]: ...


class MetadataPublisher(Protocol):
    """How the proxy records a change in the metadata topic (the metadata manager's
    ``publish``): returns once the proxy's own metadata cache has applied it."""

    async def __call__(self, record: MetadataRecord) -> None: ...


def tiered_names(metadata: RemoteLogMetadata) -> set[str]:
    """The names of the topics that have tiered partitions."""
    return {tp.topic for tp in metadata.partitions()}


class TieredPartitions:
    """The tiered partitions a request may name, with their remote ranges and lineages."""

    def __init__(self, *, metadata: RemoteLogMetadata, topic_ids: TopicIds) -> None:
        """:param topic_ids: the broker's current id of each tiered topic's name, to refuse
        the tiered data of an older topic of the same name."""
        self._metadata = metadata
        self._topic_ids = topic_ids

    def readable(self, segment: RemoteLogSegmentMetadata) -> bool:
        """Whether the metadata lists ``segment`` as readable (its copy finished)."""
        state = self._metadata.segment_state(segment.segment_id)
        return state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED

    def partition(
        self, *, topic: str | None, topic_id: uuid.UUID | None, partition: int
    ) -> TopicIdPartition | None:
        """The tiered partition a request names, or ``None`` if nothing of it is tiered.

        By id when the request has one (Fetch v13+); by name otherwise, refusing the tiered
        data of an older topic of that name when the broker says the name has a newer id
        (see :mod:`proxy.remote.topic_ids`).
        """
        if topic_id is not None:
            return self._metadata.topic_id_partition_by_id(topic_id, partition)
        if topic is None:
            return None
        tp = self._metadata.topic_id_partition(topic, partition)
        if tp is None:
            return None
        current = self._topic_ids.current(topic)
        if current is not None and current != tp.topic_id:
            return None
        return tp

    def remote_range(self, tp: TopicIdPartition) -> RemoteRange | None:
        """The partition's tiered offsets and lineage, ``None`` if nothing is readable."""
        start = self._metadata.remote_log_start_offset(tp)
        end = self._metadata.remote_log_end_offset(tp)
        if start is None or end is None:
            return None
        return RemoteRange(start=start, end=end, lineage=self.lineage(tp))

    def lineage(self, tp: TopicIdPartition) -> Sequence[EpochEntry]:
        return self._metadata.lineage(tp)

    def bytes_per_record(self, tp: TopicIdPartition) -> float:
        """Average bytes per offset of the partition's remote segments (for offload lag)."""
        size = offsets = 0
        for segment in self._metadata.segments(tp):
            size += segment.segment_size_in_bytes
            offsets += segment.end_offset - segment.start_offset + 1
        return size / offsets if offsets else 0.0
