"""The read requests, each over one connection: Metadata, Fetch and ListOffsets.

Fetch returns the record batches *as stored* (no decompression, no record objects) with the
high watermark, last stable offset and log start offset of each partition: the pipeline
copies them byte for byte, and the metadata consumer decodes them with
:mod:`protocol.record_reader`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from protocol.errors import KafkaError
from protocol.messages import ApiKey, nested_class
from protocol.messages import build as build_entity
from storage.kafka_client.connection import Connection
from storage.kafka_client.values import (
    NO_TOPIC_ID,
    READ_UNCOMMITTED,
    BrokerAddress,
    ClusterMetadata,
    FetchedPartition,
    FetchTarget,
    KafkaClientError,
    ListedOffset,
    PartitionMetadata,
    TopicMetadata,
)

__all__ = ["fetch", "list_offsets", "metadata", "partition_topics"]


def partition_topics(
    request_cls: type[Any],
    partitions: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    topics_field: str = "topics",
    partitions_field: str = "partitions",
    name_field: str = "name",
) -> tuple[Any, ...]:
    """The topics field of a per-partition request, for ``request_cls``'s version.

    ``partitions`` are ``(topic, partition fields)`` rows; they are grouped by topic in the
    order topics first appear, as Fetch, Produce, ListOffsets and DeleteRecords all nest them.
    """
    topic_cls = nested_class(request_cls, topics_field)
    partition_cls = nested_class(topic_cls, partitions_field)
    by_topic: dict[str, list[Mapping[str, Any]]] = {}
    for topic, fields in partitions:
        by_topic.setdefault(topic, []).append(fields)
    return tuple(
        build_entity(
            topic_cls,
            **{
                name_field: topic,
                partitions_field: tuple(build_entity(partition_cls, **f) for f in rows),
            },
        )
        for topic, rows in by_topic.items()
    )


async def metadata(
    connection: Connection, topics: Sequence[str] | None
) -> tuple[ClusterMetadata, dict[int, BrokerAddress]]:
    """Brokers and the topics named (all for ``None``, none for ``()``), never creating one."""

    def build(cls: type[Any]) -> Any:
        if topics is None:
            wanted = None
        else:
            topic_cls = nested_class(cls, "topics")
            wanted = tuple(build_entity(topic_cls, name=t, topic_id=NO_TOPIC_ID) for t in topics)
        return build_entity(
            cls,
            topics=wanted,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )

    response = await connection.request(ApiKey.METADATA, build)
    brokers = {
        int(b.node_id): BrokerAddress(node_id=int(b.node_id), host=b.host, port=int(b.port))
        for b in response.brokers
    }
    topic_map = {t.name: _topic(t) for t in response.topics if t.name is not None}
    cluster = ClusterMetadata(
        cluster_id=getattr(response, "cluster_id", None),
        controller_id=int(getattr(response, "controller_id", -1)),
        brokers=brokers,
        topics=topic_map,
    )
    return cluster, dict(brokers)


def _topic(t: Any) -> TopicMetadata:
    partitions = (
        PartitionMetadata(
            partition=int(p.partition_index),
            leader_id=int(p.leader_id),
            leader_epoch=int(getattr(p, "leader_epoch", -1)),
            error=KafkaError(int(p.error_code)),
            replicas=tuple(int(r) for r in p.replica_nodes),
        )
        for p in t.partitions
    )
    return TopicMetadata(
        name=t.name,
        topic_id=getattr(t, "topic_id", None) or NO_TOPIC_ID,
        is_internal=bool(getattr(t, "is_internal", False)),
        error=KafkaError(int(t.error_code)),
        partitions=tuple(sorted(partitions, key=lambda p: p.partition)),
    )


async def fetch(
    connection: Connection,
    targets: Sequence[FetchTarget],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
) -> list[FetchedPartition]:
    """Fetch raw record batches (sessionless, as a consumer: replica -1).

    :raises KafkaClientError: for a top-level error of the whole response.
    """
    partitions = [
        (
            t.topic,
            {
                "partition": t.partition,
                "fetch_offset": t.offset,
                "partition_max_bytes": t.max_bytes,
                "log_start_offset": -1,
                "current_leader_epoch": -1,
                "last_fetched_epoch": -1,
            },
        )
        for t in targets
    ]

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=partition_topics(cls, partitions, name_field="topic"),
            forgotten_topics_data=(),
            rack_id="",
        )

    response = await connection.request(ApiKey.FETCH, build)
    error = KafkaError(int(getattr(response, "error_code", 0)))
    if error != KafkaError.NONE:
        raise KafkaClientError(f"Fetch failed: {error.name}")
    return [
        FetchedPartition(
            topic=t.topic,
            partition=int(p.partition_index),
            error=KafkaError(int(p.error_code)),
            high_watermark=int(p.high_watermark),
            last_stable_offset=int(getattr(p, "last_stable_offset", -1)),
            log_start_offset=int(getattr(p, "log_start_offset", -1)),
            records=bytes(p.records or b""),
            aborted_transactions=tuple(
                (int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ())
            ),
        )
        for t in response.responses
        for p in t.partitions
    ]


async def list_offsets(
    connection: Connection,
    targets: Sequence[tuple[str, int, int]],
    *,
    isolation_level: int = READ_UNCOMMITTED,
) -> list[ListedOffset]:
    """ListOffsets for ``(topic, partition, timestamp)`` targets (-2 earliest, -1 latest)."""
    partitions = [
        (topic, {"partition_index": p, "timestamp": ts, "current_leader_epoch": -1})
        for topic, p, ts in targets
    ]

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=partition_topics(cls, partitions),
        )

    response = await connection.request(ApiKey.LIST_OFFSETS, build)
    return [
        ListedOffset(
            topic=t.name,
            partition=int(p.partition_index),
            error=KafkaError(int(p.error_code)),
            offset=int(p.offset),
            timestamp=int(p.timestamp),
            leader_epoch=int(getattr(p, "leader_epoch", -1)),
        )
        for t in response.topics
        for p in t.partitions
    ]
