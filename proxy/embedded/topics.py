"""Topic creation for tests, benchmarks and the demo, through the product's Kafka client."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from protocol.errors import KafkaError
from storage.kafka_client import KafkaClient, KafkaClientError, NewTopic

__all__ = ["create_topic"]

_METADATA_POLL_S = 0.05


async def create_topic(
    bootstrap: str,
    name: str,
    *,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create ``name`` and return once Metadata shows every partition with a leader.

    CreateTopics answers before the new topic's metadata reaches every listener of the broker
    (Apache Kafka), and a producer that asks too early gets UNKNOWN_TOPIC_OR_PARTITION; waiting
    here keeps that race out of every test. Polling is the only way to observe it.

    :raises KafkaClientError: the broker refused (e.g. TOPIC_ALREADY_EXISTS).
    :raises TimeoutError: the partitions did not all get leaders within ``timeout_s``.
    """
    topic = NewTopic(
        name=name, partitions=partitions, replication_factor=1, configs=dict(configs or {})
    )
    async with KafkaClient(bootstrap) as client:
        (created,) = await client.create_topics([topic], timeout_ms=int(timeout_s * 1000))
        if created.error != KafkaError.NONE:
            detail = f": {created.message}" if created.message else ""
            raise KafkaClientError(f"cannot create topic {name!r}: {created.error.name}{detail}")
        async with asyncio.timeout(timeout_s):
            while True:
                if await _has_leaders(client, name, partitions):
                    return
                await asyncio.sleep(_METADATA_POLL_S)


async def _has_leaders(client: KafkaClient, name: str, partitions: int) -> bool:
    described = (await client.metadata([name])).topics.get(name)
    return (
        described is not None
        and described.error == KafkaError.NONE
        and len(described.partitions) == partitions
        and all(p.leader_id >= 0 for p in described.partitions)
    )
