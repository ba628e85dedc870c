"""Topic creation for tests and the demo, through aiokafka's admin client."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

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

    :raises aiokafka.errors.KafkaError: the broker refused (e.g. ``TopicAlreadyExistsError``).
    :raises TimeoutError: the partitions did not all get leaders within ``timeout_s``.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        topic = NewTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            topic_configs=dict(configs or {}),
        )
        response = await admin.create_topics([topic], timeout_ms=int(timeout_s * 1000))
        for topic_name, error_code, *_ in response.topic_errors:
            if error_code:
                raise for_code(error_code)(f"cannot create topic {topic_name!r}")
        async with asyncio.timeout(timeout_s):
            while True:
                if await _has_leaders(admin, name, partitions):
                    return
                await asyncio.sleep(_METADATA_POLL_S)
    finally:
        await admin.close()


async def _has_leaders(admin: AIOKafkaAdminClient, name: str, partitions: int) -> bool:
    (described,) = await admin.describe_topics([name])
    found = described.get("partitions") or ()
    return (
        described.get("error_code", 0) == 0
        and len(found) == partitions
        and all(p.get("leader", -1) >= 0 for p in found)
    )
