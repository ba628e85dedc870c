"""Object keys of remote segments, exactly as docs/architecture.md's "Remote layout" states.

``{prefix}/{topic}-{topicId}/{partition}/{baseOffset:020d}-{segmentId}.{suffix}``

The topic name makes listings readable; the topic id keeps a re-created topic of the same name
apart. The zero-padded base offset sorts lexicographically like numerically (as Kafka names its
segment files), and the segment id keeps every copy attempt apart. Ids are printed as Kafka's
``Uuid.toString()`` (URL-safe base64 without padding, 22 characters), so keys match what
Kafka-side tools print for the same ids. Every backend uses these keys, the local directory
backend as relative paths.

Segments written with a manifest (:mod:`storage.rsm.manifest`) add
``{baseOffset:020d}-{segmentId}.manifest``; an object stored encoded (compressed or
encrypted) has the suffix ``.tpx`` after its usual key (``….log.tpx``), so that a reader
that does not know the manifest (an older tierproxy, a manifest deleted by hand) finds no
``.log`` rather than serving its encoded bytes as records.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

from storage.model import IndexType, RemoteLogSegmentMetadata, TopicIdPartition

__all__ = ["ENCODED_SUFFIX", "LOG_SUFFIX", "MANIFEST_SUFFIX", "RemoteLayout", "kafka_uuid_string"]

LOG_SUFFIX = "log"
"""Suffix of the object holding the segment's record batches."""
MANIFEST_SUFFIX = "manifest"
"""Suffix of the segment's manifest (its chunks, checksums and encryption)."""
ENCODED_SUFFIX = ".tpx"
"""Appended to the key of an object stored compressed or encrypted."""


def kafka_uuid_string(value: uuid.UUID) -> str:
    """``value`` as Kafka's ``Uuid.toString()`` prints it: URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLayout:
    """Turns segment metadata into object keys under an optional ``prefix``.

    Slashes around ``prefix`` are ignored; an empty prefix gives keys without a leading slash.
    """

    prefix: str = ""

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        """The key prefix (ending in ``/``) under which a partition's segments live."""
        tip = topic_id_partition
        path = f"{tip.topic}-{kafka_uuid_string(tip.topic_id)}/{tip.partition}/"
        prefix = self.prefix.strip("/")
        return f"{prefix}/{path}" if prefix else path

    def segment_prefix(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The key prefix (ending in ``.``) shared by all files of one segment copy attempt."""
        segment_id = kafka_uuid_string(metadata.segment_id.id)
        name = f"{metadata.start_offset:020d}-{segment_id}."
        return self.partition_prefix(metadata.topic_id_partition) + name

    def log_key(self, metadata: RemoteLogSegmentMetadata) -> str:
        """Key of the segment's ``.log`` object."""
        return self.segment_prefix(metadata) + LOG_SUFFIX

    def index_key(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        """Key of the segment's auxiliary file ``index_type``."""
        return self.segment_prefix(metadata) + index_type.value

    def manifest_key(self, metadata: RemoteLogSegmentMetadata) -> str:
        """Key of the segment's manifest."""
        return self.segment_prefix(metadata) + MANIFEST_SUFFIX

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> tuple[str, ...]:
        """Keys of all six files of a segment, ``.log`` first."""
        indexes = (self.index_key(metadata, index_type) for index_type in IndexType)
        return (self.log_key(metadata), *indexes)
