"""A secured Apache Kafka for the tiered tests: SCRAM users, ``StandardAuthorizer``, ACLs.

The broker keeps a PLAINTEXT listener where ``User:ANONYMOUS`` is a super user: the harness's
readiness probe and the tests' own setup (users, topics, ACLs, producing) go there. tierproxy
and the clients under test log in as SCRAM users on a SASL listener (SASL_PLAINTEXT or
SASL_SSL), each holding exactly the ACLs ``docs/operations.md`` lists for its part: the rows
of :data:`storage.kafka_acls.REQUIRED_ACLS`, which that table shows.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from proxy.embedded.tierproxy import TierproxyServer
from storage.config import from_settings
from storage.kafka_acls import Part, RequiredAcl, Resource, required_acls
from storage.kafka_client import FetchedPartition, FetchTarget, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from tests.integration.tiering.workload import create_topic

MECHANISM = "SCRAM-SHA-512"
RECORDS = 3_000


def password(user: str) -> str:
    return f"{user}-secret"


def scram_broker_properties(listener: str) -> dict[str, str]:
    """Broker settings: ACLs enforced, the PLAINTEXT super user, SCRAM on ``listener``."""
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.{listener.lower()}.{MECHANISM.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }


def create_users(admin_bootstrap: str, users: Iterable[str]) -> None:
    """SCRAM credentials for ``users``, each with :func:`password`."""
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password(user).encode()
        )
        for user in users
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)


def acl(user: str, topic: str, operation: AclOperation, *, pattern: str = "LITERAL") -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType[pattern],
        f"User:{user}",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def group_acls(*users: str) -> list[AclBinding]:
    """READ on the consumer groups (``g-...``) the test's clients use."""
    return [
        AclBinding(
            ResourceType.GROUP,
            "g-",
            ResourcePatternType.PREFIXED,
            f"User:{user}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for user in users
    ]


def part_acls(part: Part, user: str, names: Mapping[Resource, str]) -> dict[str, AclBinding]:
    """The ACLs :data:`storage.kafka_acls.REQUIRED_ACLS` lists for ``part`` without a
    condition (those ``docs/operations.md`` shows), for ``user``, by what they are on
    (``"READ on the tiered topic"``); ``names`` names each resource (the cluster needs none).
    """
    return {
        f"{required.operation} on the {required.resource}": _binding(user, required, names)
        for required in required_acls(part)
    }


def _binding(user: str, required: RequiredAcl, names: Mapping[Resource, str]) -> AclBinding:
    kinds = {
        "tiered topic": ResourceType.TOPIC,
        "metadata topic": ResourceType.TOPIC,
        "cluster": ResourceType.BROKER,
        "transactional id": ResourceType.TRANSACTIONAL_ID,
    }
    name = "kafka-cluster" if required.resource == "cluster" else names[required.resource]
    return AclBinding(
        kinds[required.resource],
        name,
        ResourcePatternType.LITERAL,
        f"User:{user}",
        "*",
        AclOperation[required.operation],
        AclPermissionType.ALLOW,
    )


def pipeline_acls(topic: str, metadata_topic: str, user: str = "tiering") -> dict[str, AclBinding]:
    """What ``docs/operations.md`` says the pipeline's principal needs, by what it is for."""
    names: dict[Resource, str] = {
        "tiered topic": topic,
        "metadata topic": metadata_topic,
        "transactional id": f"tierproxy-tiering.{metadata_topic}",
    }
    return part_acls("tier", user, names)


def status_acls(topic: str, metadata_topic: str, user: str = "status") -> dict[str, AclBinding]:
    """What ``docs/operations.md`` says ``tierproxy status`` needs."""
    return part_acls("status", user, {"tiered topic": topic, "metadata topic": metadata_topic})


def proxy_acls(topic: str, metadata_topic: str, user: str = "proxy") -> dict[str, AclBinding]:
    """What ``docs/operations.md`` says ``tierproxy serve``'s own principal needs."""
    return part_acls("serve", user, {"tiered topic": topic, "metadata topic": metadata_topic})


def apply_acls(admin_bootstrap: str, bindings: Iterable[AclBinding]) -> None:
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


@dataclass(frozen=True, slots=True)
class Topics:
    topic: str
    metadata: str


def new_topics(admin_bootstrap: str, prefix: str, **producer_settings: Any) -> Topics:
    """A topic with ``RECORDS`` records and an empty metadata topic, made by the super user;
    ``producer_settings`` are librdkafka's, added to the producer's (``batch.size``, say)."""
    topics = Topics(
        topic=f"{prefix}-{uuid.uuid4().hex[:8]}",
        metadata=f"__tierproxy_meta_{uuid.uuid4().hex[:8]}",
    )
    create_topic(admin_bootstrap, topics.topic, 1)
    create_topic(admin_bootstrap, topics.metadata, 3)
    producer = Producer({"bootstrap.servers": admin_bootstrap, "linger.ms": 5, **producer_settings})
    for i in range(RECORDS):
        producer.produce(topics.topic, key=str(i).encode(), value=os.urandom(512), partition=0)
    producer.flush(30)
    return topics


def consume(
    bootstrap: str,
    topic: str,
    user: str,
    security: Mapping[str, Any],
    *,
    seconds: float = 60,
) -> list[int]:
    """The offsets ``user`` reads from the beginning, until the end or the first error.

    ``security`` is librdkafka's ``security.protocol`` (and ``ssl.*`` for TLS); the login
    is ``user``'s SCRAM credentials.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            **security,
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": password(user),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    offsets: list[int] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(offsets) < RECORDS:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            offset = message.offset()
            assert offset is not None
            offsets.append(offset)
    finally:
        consumer.close()
    return offsets


def storage_reads(proxy: TierproxyServer) -> float:
    """What the proxy read from object storage: index and chunk cache misses."""
    return float(
        proxy.metric("tierproxy_remote_index_cache_misses_total")
        + proxy.metric("tierproxy_remote_chunk_cache_misses_total")
    )


async def fetch_from_zero(bootstrap: str, topic: str, login: Mapping[str, Any]) -> FetchedPartition:
    """One Fetch from offset 0 (in the remote tier) through tierproxy's own client, logged in
    with the ``upstream.*`` settings ``login``: a client that skips Metadata and goes
    straight for the tiered range."""
    security = from_settings(KafkaSecurityConfig, {"bootstrap.servers": bootstrap, **login})
    async with KafkaClient(bootstrap, security=security) as client:
        metadata = await client.metadata(())
        leader = min(metadata.brokers)
        (answer,) = await client.fetch(
            leader, [FetchTarget(topic=topic, partition=0, offset=0, max_bytes=1 << 20)]
        )
    return answer
