"""Builders of the request bodies the tests send, as kio entities of an exact version.

Each builder takes the fields a test varies and fills the others as a consumer fills them
(replica id -1, no session, current leader epoch unknown), for any version the API has:
:func:`protocol.messages.build` keeps the fields the version knows. The bodies go to the
fake brokers, through the proxy, and to real brokers alike.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from protocol.messages import ApiKey, build, nested_class, request_class

__all__ = [
    "api_versions_request",
    "empty_fetch_request",
    "fetch_request",
    "list_offsets_request",
    "metadata_request",
    "offset_for_leader_epoch_request",
]


def fetch_request(
    version: int,
    partitions: Sequence[tuple[str | uuid.UUID, int, int, int]],
    *,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    isolation_level: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[tuple[str | uuid.UUID, int]] = (),
    replica_id: int = -1,
    leader_epoch: int = -1,
) -> Any:
    """A consumer Fetch of ``(topic or topic id, partition, offset, max bytes)``; a topic
    is named by id from v13, by name before."""
    body_class = request_class(ApiKey.FETCH, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    grouped: dict[str | uuid.UUID, list[Any]] = {}
    for topic, index, offset, limit in partitions:
        grouped.setdefault(topic, []).append(
            build(
                partition_class,
                partition=index,
                current_leader_epoch=leader_epoch,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=limit,
                replica_directory_id=None,
            )
        )
    forgotten_class = nested_class(body_class, "forgotten_topics_data") if version >= 7 else None
    forgotten_grouped: dict[str | uuid.UUID, list[int]] = {}
    for topic, index in forgotten:
        forgotten_grouped.setdefault(topic, []).append(index)
    replica_state = None
    if version >= 15:
        replica_state = nested_class(body_class, "replica_state")(
            replica_id=replica_id, replica_epoch=-1
        )
    return build(
        body_class,
        cluster_id=None,
        replica_id=replica_id,
        replica_state=replica_state,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            build(topic_class, topic=t, topic_id=t, partitions=tuple(parts))
            for t, parts in grouped.items()
        ),
        forgotten_topics_data=tuple(
            build(forgotten_class, topic=t, topic_id=t, partitions=tuple(p))
            for t, p in forgotten_grouped.items()
        )
        if forgotten_class is not None
        else (),
        rack_id="",
    )


def empty_fetch_request(version: int) -> Any:
    """A consumer's Fetch asking for nothing, waiting for nothing."""
    return build(
        request_class(ApiKey.FETCH, version),
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_request(
    version: int = 1, timestamp: int = -1, *, topic: str = "t", partitions: Iterable[int] = (0,)
) -> Any:
    """A consumer's ListOffsets of ``timestamp`` (or a sentinel: -1 latest, -2 earliest, ...)
    for ``partitions`` of ``topic``."""
    body_class = request_class(ApiKey.LIST_OFFSETS, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        replica_id=-1,
        isolation_level=0,
        timeout=datetime.timedelta(seconds=30),
        topics=(
            topic_class(
                name=topic,
                partitions=tuple(
                    build(
                        partition_class,
                        partition_index=index,
                        current_leader_epoch=-1,
                        timestamp=timestamp,
                    )
                    for index in partitions
                ),
            ),
        ),
    )


def offset_for_leader_epoch_request(
    version: int, epoch: int, *, topic: str, partitions: Iterable[int] = (0,)
) -> Any:
    """A consumer's OffsetForLeaderEpoch: where ``epoch`` ends in ``partitions`` of
    ``topic``."""
    body_class = request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        replica_id=-1,
        topics=(
            topic_class(
                topic=topic,
                partitions=tuple(
                    build(partition_class, partition=p, current_leader_epoch=-1, leader_epoch=epoch)
                    for p in partitions
                ),
            ),
        ),
    )


def metadata_request(version: int, topics: Sequence[str] | None = None) -> Any:
    """A client's Metadata of ``topics`` (all topics for ``None``), creating none."""
    body_class = request_class(ApiKey.METADATA, version)
    topic_class = nested_class(body_class, "topics")
    return build(
        body_class,
        topics=None
        if topics is None
        else tuple(build(topic_class, name=name, topic_id=uuid.UUID(int=0)) for name in topics),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def api_versions_request(version: int) -> Any:
    """A client's ApiVersions, naming itself ``t`` version ``1`` (v3+)."""
    return build(
        request_class(ApiKey.API_VERSIONS, version),
        client_software_name="t",
        client_software_version="1",
    )
