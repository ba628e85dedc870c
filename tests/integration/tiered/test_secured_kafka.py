"""tierproxy on a secured Apache Kafka: SCRAM users, ``StandardAuthorizer``, least privilege.

One broker with a PLAINTEXT listener (the harness's readiness probe and the test's own admin,
``User:ANONYMOUS`` as super user) and a SASL_PLAINTEXT listener with SCRAM-SHA-512, where
every tierproxy part and every client logs in as its own user:

- ``tiering`` (the pipeline) has exactly the ACLs ``docs/operations.md`` lists, and tiers a
  topic; with any one of them taken away the cycle fails with a message naming it;
- ``proxy`` (``tierproxy serve``'s own connections) has exactly its documented ACLs;
- ``alice`` may read the topic through the proxy and gets every record, the tiered ones from
  the remote tier;
- ``mallory`` may not: TOPIC_AUTHORIZATION_FAILED, and the proxy reads nothing from storage
  on her behalf (issue 11.14).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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

from protocol.errors import KafkaError
from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.tierproxy import proxy_process, storage_settings
from storage.config import from_settings
from storage.kafka_client import FetchedPartition, FetchTarget, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.tiering.report import CycleReport
from tests.integration.tiered.support import (
    SEGMENT_BYTES,
    CycleTarget,
    earliest_offsets,
    run_cycle,
    running,
)
from tests.integration.tiering.workload import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

USERS = ("tiering", "proxy", "alice", "mallory")
MECHANISM = "SCRAM-SHA-512"
RECORDS = 3_000


def password(user: str) -> str:
    return f"{user}-secret"


@dataclasses.dataclass(frozen=True, slots=True)
class SecuredKafka:
    plaintext: str
    """The super user's listener (the test's admin)."""
    sasl: BrokerInfo
    """The SCRAM listener, where tierproxy and the clients log in."""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    work = tmp_path_factory.mktemp("secured-kafka")
    properties = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_plaintext.{MECHANISM.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    with KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=work / "kafka",
        properties=properties,
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
    ) as server:
        info = server.start()
        admin = AdminClient({"bootstrap.servers": info.bootstrap})
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                user,
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                password(user).encode(),
            )
            for user in USERS
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
        sasl_bootstrap = server.listener_bootstrap("SASL_PLAINTEXT")
        _host, port = sasl_bootstrap.rsplit(":", 1)
        yield SecuredKafka(
            plaintext=info.bootstrap,
            sasl=dataclasses.replace(info, bootstrap=sasl_bootstrap, port=int(port)),
        )


def login(user: str) -> dict[str, Any]:
    """The ``upstream.*`` settings of a tierproxy part that logs in as ``user``."""
    return {
        "upstream.security.protocol": "SASL_PLAINTEXT",
        "upstream.sasl.mechanism": MECHANISM,
        "upstream.sasl.username": user,
        "upstream.sasl.password": password(user),
    }


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


def pipeline_acls(topic: str, metadata_topic: str) -> dict[str, AclBinding]:
    """What ``docs/operations.md`` says the pipeline's principal needs, by what it is for."""
    return {
        "READ on the tiered topic": acl("tiering", topic, AclOperation.READ),
        "DESCRIBE_CONFIGS on the tiered topic": acl(
            "tiering", topic, AclOperation.DESCRIBE_CONFIGS
        ),
        "DELETE on the tiered topic": acl("tiering", topic, AclOperation.DELETE),
        "READ on the metadata topic": acl("tiering", metadata_topic, AclOperation.READ),
        "WRITE on the metadata topic": acl("tiering", metadata_topic, AclOperation.WRITE),
    }


def proxy_acls(topic: str, metadata_topic: str) -> dict[str, AclBinding]:
    """What ``docs/operations.md`` says ``tierproxy serve``'s own principal needs."""
    return {
        "READ on the metadata topic": acl("proxy", metadata_topic, AclOperation.READ),
        "DESCRIBE on the tiered topic": acl("proxy", topic, AclOperation.DESCRIBE),
    }


def apply_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings).values():
        future.result(30)


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=os.urandom(512), partition=0)
    producer.flush(30)


def cycle(
    secured: SecuredKafka, s3: S3Info, spark: Any, bucket: str, topics: Topics, spill: Path
) -> CycleReport:
    """One pipeline cycle over ``topics.topic``, logged in as ``tiering``."""
    target = CycleTarget(
        topic=topics.topic, bucket=bucket, metadata_topic=topics.metadata, spill=spill
    )
    policy = {"local.retention.bytes": SEGMENT_BYTES}
    return asyncio.run(
        run_cycle(secured.sasl, s3, spark, target, policy, settings=login("tiering"))
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Topics:
    topic: str
    metadata: str


def new_topics(secured: SecuredKafka) -> Topics:
    """A topic with ``RECORDS`` records and an empty metadata topic, made by the super user."""
    topics = Topics(
        topic=f"secured-{uuid.uuid4().hex[:8]}", metadata=f"__tierproxy_meta_{uuid.uuid4().hex[:8]}"
    )
    create_topic(secured.plaintext, topics.topic, 1)
    create_topic(secured.plaintext, topics.metadata, 3)
    produce(secured.plaintext, topics.topic)
    return topics


def consume(bootstrap: str, topic: str, user: str, *, seconds: float = 60) -> list[int]:
    """The offsets ``user`` reads from the beginning, until the end or the first error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "security.protocol": "SASL_PLAINTEXT",
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


def test_least_privilege_tiering_and_reads_through_the_proxy(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured)
    topic, metadata_topic = topics.topic, topics.metadata
    admin = AdminClient({"bootstrap.servers": secured.plaintext})
    apply_acls(admin, [*pipeline_acls(topic, metadata_topic).values()])
    apply_acls(admin, [*proxy_acls(topic, metadata_topic).values()])
    apply_acls(admin, [acl("alice", topic, AclOperation.READ), *group_acls("alice", "mallory")])

    report = cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill")

    assert not report.errors, report.errors
    assert report.segments_copied > 0
    assert earliest_offsets(secured.plaintext, topic, 1)[0] > 0, "no local data was deleted"
    settings = {**storage_settings(s3, s3_bucket, metadata_topic), **login("proxy")}
    with running(proxy_process(secured.sasl, tmp_path, settings)) as proxy:
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            consume(proxy.bootstrap, topic, "mallory", seconds=20)
        # A client that skips Metadata and fetches the tiered range straight away.
        refused = asyncio.run(fetch_as("mallory", proxy.bootstrap, topic))
        assert refused.error == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert refused.records == b""
        assert storage_reads(proxy) == 0, "reads from storage before the broker's refusal"

        assert consume(proxy.bootstrap, topic, "alice") == list(range(RECORDS))
        assert storage_reads(proxy) > 0


async def fetch_as(user: str, bootstrap: str, topic: str) -> FetchedPartition:
    """One Fetch from offset 0 (in the remote tier), as ``user``, through tierproxy's client."""
    login_settings = {"bootstrap.servers": bootstrap, **login(user)}
    security = from_settings(KafkaSecurityConfig, login_settings)
    async with KafkaClient(bootstrap, security=security) as client:
        metadata = await client.metadata(())
        leader = min(metadata.brokers)
        (answer,) = await client.fetch(
            leader, [FetchTarget(topic=topic, partition=0, offset=0, max_bytes=1 << 20)]
        )
    return answer


def storage_reads(proxy: Any) -> float:
    """What the proxy read from object storage: index and chunk cache misses."""
    return float(
        proxy.metric("tierproxy_remote_index_cache_misses_total")
        + proxy.metric("tierproxy_remote_chunk_cache_misses_total")
    )


@pytest.mark.parametrize(
    "missing", list(pipeline_acls("topic", "metadata")), ids=lambda text: text.replace(" ", "-")
)
def test_the_pipeline_names_the_acl_it_lacks(
    missing: str, secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured)
    granted = pipeline_acls(topics.topic, topics.metadata)
    del granted[missing]
    apply_acls(AdminClient({"bootstrap.servers": secured.plaintext}), [*granted.values()])

    try:
        messages = " ".join(cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill").errors)
    except Exception as err:
        messages = f"{type(err).__name__}: {err}"

    operation = missing.split(" on ", maxsplit=1)[0]
    assert f"User:tiering lacks {operation} on topic" in messages, messages
