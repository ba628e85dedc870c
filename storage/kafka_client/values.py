"""What the client's requests answer, its errors, and the pure helpers its callers share."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from protocol.errors import KafkaError
from protocol.messages import ApiKey

__all__ = [
    "DYNAMIC_TOPIC_CONFIG",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "NO_TOPIC_ID",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "RETRIABLE_ERRORS",
    "AuthenticationError",
    "BrokerAddress",
    "BrokerConnectionError",
    "BrokerKind",
    "ClusterMetadata",
    "ConfigEntry",
    "CreatedTopic",
    "DeleteRecordsUnsupportedError",
    "DeletedRecords",
    "FetchTarget",
    "FetchedPartition",
    "KafkaClientError",
    "ListedOffset",
    "NewTopic",
    "PartitionMetadata",
    "ProducedBatch",
    "TopicMetadata",
    "broker_kind_from_api_versions",
    "parse_bootstrap",
]

BrokerKind = Literal["kafka", "tansu", "other"]

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
DYNAMIC_TOPIC_CONFIG: Final = 1
"""DescribeConfigs config source of a value set on the topic itself."""
NO_TOPIC_ID: Final = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: what brokers without topic ids report."""

RETRIABLE_ERRORS: Final = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_OR_FOLLOWER,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
"""Partition errors after which Kafka's clients refresh metadata and try again (the codes
whose exceptions extend ``RetriableException`` and concern a partition's leadership)."""


class KafkaClientError(Exception):
    """A request could not be answered (the message says which and why)."""


class BrokerConnectionError(KafkaClientError):
    """The connection to a broker failed, closed or timed out; retrying may succeed."""


class AuthenticationError(KafkaClientError):
    """The broker refused tierproxy's TLS or SASL login: retrying with these settings fails too."""


class DeleteRecordsUnsupportedError(KafkaClientError):
    """The broker cannot delete records (Tansu drops the connection when asked)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAddress:
    """A broker as Metadata (or another response naming brokers) gives it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    partition: int
    leader_id: int
    leader_epoch: int
    error: KafkaError
    replicas: tuple[int, ...] = ()
    """The node ids of the partition's replicas."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    """:data:`NO_TOPIC_ID` where the broker has no topic ids (Metadata before v10)."""
    is_internal: bool
    error: KafkaError
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, BrokerAddress]
    topics: Mapping[str, TopicMetadata]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTarget:
    """One partition to fetch from ``offset``, at most ``max_bytes`` (KIP-74 may exceed it
    by one batch)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedPartition:
    """A partition of a Fetch answer; ``records`` are the batches as the broker stores them
    (possibly ending with a partial batch)."""

    topic: str
    partition: int
    error: KafkaError
    high_watermark: int
    last_stable_offset: int
    """-1 where the broker does not report one."""
    log_start_offset: int
    """-1 where the broker does not report one."""
    records: bytes
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    """``(producer id, first offset)`` of aborted transactions in range (READ_COMMITTED)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedOffset:
    topic: str
    partition: int
    error: KafkaError
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletedRecords:
    topic: str
    partition: int
    error: KafkaError
    low_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    """Kafka's ``ConfigSource`` (1: set on the topic itself, 5: static broker default, ...)."""

    @property
    def is_topic_override(self) -> bool:
        return self.source == DYNAMIC_TOPIC_CONFIG


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTopic:
    """A topic to create, as CreateTopics takes it."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatedTopic:
    """CreateTopics' answer for one topic: ``NONE``, or the error and the broker's message."""

    name: str
    error: KafkaError
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducedBatch:
    """Produce's answer for one partition: the offset of the batch's first record."""

    error: KafkaError
    base_offset: int
    message: str | None


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list of such) as ``[(host, port), ...]``.

    :raises ValueError: for an entry without a numeric port.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap servers given")
    return addresses


def broker_kind_from_api_versions(api_keys: Mapping[int, range], feature_epoch: int) -> BrokerKind:
    """Tell Apache Kafka from Tansu by the APIs a broker advertises.

    Every Apache Kafka broker since 0.11 serves OffsetForLeaderEpoch; Tansu serves it not, and
    reports no finalized-feature epoch.
    """
    if ApiKey.OFFSET_FOR_LEADER_EPOCH in api_keys:
        return "kafka"
    if feature_epoch < 0 and ApiKey.DESCRIBE_TOPIC_PARTITIONS in api_keys:
        return "tansu"
    return "other"
