"""A fake of the product's Kafka client (:class:`storage.kafka_client.KafkaClient`) at the
level the tiering pipeline calls it: values in, values out, no wire.

It stands in for a cluster whose topics each have one partition, led by node 1 in leader
epoch 0, with a topic id derived from the name; DescribeConfigs answers each topic's own
settings (as topic overrides); every partition's log is empty, so a cycle finds nothing to
copy. Every Fetch is recorded by topic. Anything else the pipeline might call is missing on
purpose: a test that reaches it fails with ``AttributeError`` and says what it needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from protocol.errors import KafkaError
from storage.kafka_client import (
    DYNAMIC_TOPIC_CONFIG,
    ClusterMetadata,
    ConfigEntry,
    FetchedPartition,
    FetchTarget,
    PartitionMetadata,
    TopicMetadata,
)

__all__ = ["FakeClusterClient"]


class FakeClusterClient:
    """``topics``, each set as ``topic_configs`` says, with empty logs (see the module)."""

    def __init__(
        self, topics: Sequence[str], topic_configs: dict[str, dict[str, str]] | None = None
    ) -> None:
        self.topics = tuple(topics)
        self.topic_configs = topic_configs or {}
        """Per topic, settings set on the topic itself (``retention.ms``, ...)."""
        self.fetched: list[str] = []
        """The topic of every partition fetched, in order."""

    async def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        return ClusterMetadata(
            cluster_id="c",
            controller_id=1,
            brokers={},
            topics={
                name: TopicMetadata(
                    name=name,
                    topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                    is_internal=False,
                    error=KafkaError.NONE,
                    partitions=(
                        PartitionMetadata(
                            partition=0, leader_id=1, leader_epoch=0, error=KafkaError.NONE
                        ),
                    ),
                )
                for name in self.topics
                if topics is None or name in topics
            },
        )

    async def describe_configs(
        self, topics: Sequence[str]
    ) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
        return {
            name: {
                key: ConfigEntry(name=key, value=value, source=DYNAMIC_TOPIC_CONFIG)
                for key, value in self.topic_configs.get(name, {}).items()
            }
            for name in topics
        }

    async def fetch(
        self, leader_id: int | None, targets: Sequence[FetchTarget], **_: Any
    ) -> list[FetchedPartition]:
        self.fetched += [t.topic for t in targets]
        return [
            FetchedPartition(
                topic=t.topic,
                partition=t.partition,
                error=KafkaError.NONE,
                high_watermark=0,
                last_stable_offset=0,
                log_start_offset=0,
                records=b"",
            )
            for t in targets
        ]
