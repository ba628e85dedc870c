"""Metadata responses as the read path reads them: typed and version-independent.

Topic ids come with Metadata v10 (a zero id means none: a topic the broker names but does
not identify, or an older broker); this module is the one place that knows it. The proxy
reads the topics and their partitions' leaders; it never changes them here (broker
addresses are rewritten by the address interceptor).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final

from protocol.messages import Body

__all__ = ["MetadataPartition", "MetadataTopic", "read_metadata_topics"]

FIRST_TOPIC_ID_VERSION: Final = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataPartition:
    """One partition of a Metadata answer; ``leader`` is -1 without one."""

    index: int
    error: int
    leader: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataTopic:
    """One topic of a Metadata answer; ``topic_id`` is ``None`` below v10 or when zero."""

    name: str | None
    topic_id: uuid.UUID | None
    error: int
    partitions: tuple[MetadataPartition, ...]


def read_metadata_topics(body: Body, version: int) -> tuple[MetadataTopic, ...]:
    """The topics of a decoded Metadata response body of ``version``."""
    kio: Any = body
    return tuple(
        MetadataTopic(
            name=topic.name or None,
            topic_id=_topic_id(topic, version),
            error=int(topic.error_code),
            partitions=tuple(
                MetadataPartition(
                    index=int(part.partition_index),
                    error=int(part.error_code),
                    leader=int(part.leader_id),
                )
                for part in topic.partitions
            ),
        )
        for topic in kio.topics
    )


def _topic_id(topic: Any, version: int) -> uuid.UUID | None:
    if version < FIRST_TOPIC_ID_VERSION:
        return None
    topic_id = topic.topic_id
    return topic_id if topic_id is not None and topic_id.int else None
