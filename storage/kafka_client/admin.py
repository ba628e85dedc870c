"""The admin requests, each over one connection: DescribeConfigs and CreateTopics."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Final

from protocol.errors import KafkaError
from protocol.messages import ApiKey, nested_class
from protocol.messages import build as build_entity
from storage.kafka_client.connection import Connection
from storage.kafka_client.values import ConfigEntry, CreatedTopic, NewTopic

__all__ = ["BROKER_RESOURCE", "TOPIC_RESOURCE", "create_topics", "describe_configs"]

TOPIC_RESOURCE: Final = 2
"""DescribeConfigs resource type of a topic (``ConfigResource.Type.TOPIC``)."""
BROKER_RESOURCE: Final = 4
"""DescribeConfigs resource type of a broker (``ConfigResource.Type.BROKER``)."""


async def describe_configs(
    connection: Connection, resource_type: int, names: Sequence[str]
) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
    """Each resource's configs, or the error the broker gave for it."""

    def build(cls: type[Any]) -> Any:
        resource_cls = nested_class(cls, "resources")
        return build_entity(
            cls,
            resources=tuple(
                build_entity(
                    resource_cls,
                    resource_type=resource_type,
                    resource_name=name,
                    configuration_keys=None,
                )
                for name in names
            ),
            include_synonyms=False,
            include_documentation=False,
        )

    response = await connection.request(ApiKey.DESCRIBE_CONFIGS, build)
    results: dict[str, dict[str, ConfigEntry] | KafkaError] = {}
    for result in response.results:
        error = KafkaError(int(result.error_code))
        if error != KafkaError.NONE:
            results[result.resource_name] = error
            continue
        results[result.resource_name] = {
            c.name: ConfigEntry(
                name=c.name, value=c.value, source=int(getattr(c, "config_source", -1))
            )
            for c in result.configs
        }
    return results


async def create_topics(
    connection: Connection, topics: Sequence[NewTopic], *, timeout_ms: int
) -> list[CreatedTopic]:
    """Create ``topics``; the answer says, per topic, whether and why not."""

    def build(cls: type[Any]) -> Any:
        topic_cls = nested_class(cls, "topics")
        config_cls = nested_class(topic_cls, "configs")
        return build_entity(
            cls,
            topics=tuple(
                build_entity(
                    topic_cls,
                    name=t.name,
                    num_partitions=t.partitions,
                    replication_factor=t.replication_factor,
                    assignments=(),
                    configs=tuple(
                        build_entity(config_cls, name=k, value=v) for k, v in t.configs.items()
                    ),
                )
                for t in topics
            ),
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            validate_only=False,
        )

    response = await connection.request(ApiKey.CREATE_TOPICS, build)
    return [
        CreatedTopic(
            name=t.name,
            error=KafkaError(int(t.error_code)),
            message=getattr(t, "error_message", None),
        )
        for t in response.topics
    ]
