"""The product's one Kafka client (:class:`KafkaClient`), the producer and consumer of the
metadata topic built on it, and the values their requests answer.

Modules, by responsibility: :mod:`.values` (answers, errors, pure helpers),
:mod:`.connection` (one pipelined, logged-in connection), :mod:`.reads`, :mod:`.writes` and
:mod:`.admin` (the requests), :mod:`.client` (connections per broker, routing),
:mod:`.producer` and :mod:`.consumer` (leader-following produce and consume with retries).
"""

from storage.kafka_client.client import KafkaClient
from storage.kafka_client.values import (
    DYNAMIC_TOPIC_CONFIG,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_TOPIC_ID,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AuthenticationError,
    BrokerAddress,
    BrokerConnectionError,
    BrokerKind,
    ClusterMetadata,
    ConfigEntry,
    CreatedTopic,
    DeletedRecords,
    DeleteRecordsUnsupportedError,
    FetchedPartition,
    FetchTarget,
    KafkaClientError,
    ListedOffset,
    NewTopic,
    PartitionMetadata,
    ProducedBatch,
    TopicMetadata,
    broker_kind_from_api_versions,
    parse_bootstrap,
)

__all__ = [
    "DYNAMIC_TOPIC_CONFIG",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "NO_TOPIC_ID",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
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
    "KafkaClient",
    "KafkaClientError",
    "ListedOffset",
    "NewTopic",
    "PartitionMetadata",
    "ProducedBatch",
    "TopicMetadata",
    "broker_kind_from_api_versions",
    "parse_bootstrap",
]
