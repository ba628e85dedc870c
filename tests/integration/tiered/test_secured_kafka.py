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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

from protocol.errors import KafkaError
from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.tierproxy import proxy_process, storage_settings
from storage.tiering.report import CycleReport
from tests.integration.tiered.scram import (
    MECHANISM,
    RECORDS,
    Topics,
    acl,
    apply_acls,
    consume,
    create_users,
    fetch_from_zero,
    group_acls,
    new_topics,
    password,
    pipeline_acls,
    proxy_acls,
    scram_broker_properties,
    storage_reads,
)
from tests.integration.tiered.support import (
    SEGMENT_BYTES,
    CycleTarget,
    earliest_offsets,
    run_cycle,
    running,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

USERS = ("tiering", "proxy", "alice", "mallory")
CLIENT_SECURITY = {"security.protocol": "SASL_PLAINTEXT"}


@dataclasses.dataclass(frozen=True, slots=True)
class SecuredKafka:
    plaintext: str
    """The super user's listener (the test's admin)."""
    sasl: BrokerInfo
    """The SCRAM listener, where tierproxy and the clients log in."""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    work = tmp_path_factory.mktemp("secured-kafka")
    with KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=work / "kafka",
        properties=scram_broker_properties("SASL_PLAINTEXT"),
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
    ) as server:
        info = server.start()
        create_users(info.bootstrap, USERS)
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


def test_least_privilege_tiering_and_reads_through_the_proxy(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    topic, metadata_topic = topics.topic, topics.metadata
    apply_acls(secured.plaintext, pipeline_acls(topic, metadata_topic).values())
    apply_acls(secured.plaintext, proxy_acls(topic, metadata_topic).values())
    apply_acls(
        secured.plaintext,
        [acl("alice", topic, AclOperation.READ), *group_acls("alice", "mallory")],
    )

    report = cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill")

    assert not report.errors, report.errors
    assert report.segments_copied > 0
    assert earliest_offsets(secured.plaintext, topic, 1)[0] > 0, "no local data was deleted"
    settings = {**storage_settings(s3, s3_bucket, metadata_topic), **login("proxy")}
    with running(proxy_process(secured.sasl, tmp_path, settings)) as proxy:
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            consume(proxy.bootstrap, topic, "mallory", CLIENT_SECURITY, seconds=20)
        # A client that skips Metadata and fetches the tiered range straight away.
        refused = asyncio.run(fetch_from_zero(proxy.bootstrap, topic, login("mallory")))
        assert refused.error == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert refused.records == b""
        assert storage_reads(proxy) == 0, "reads from storage before the broker's refusal"

        assert consume(proxy.bootstrap, topic, "alice", CLIENT_SECURITY) == list(range(RECORDS))
        assert storage_reads(proxy) > 0


@pytest.mark.parametrize(
    "missing", list(pipeline_acls("topic", "metadata")), ids=lambda text: text.replace(" ", "-")
)
def test_the_pipeline_names_the_acl_it_lacks(
    missing: str, secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    granted = pipeline_acls(topics.topic, topics.metadata)
    del granted[missing]
    apply_acls(secured.plaintext, granted.values())

    try:
        messages = " ".join(cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill").errors)
    except Exception as err:
        messages = f"{type(err).__name__}: {err}"

    operation = missing.split(" on ", maxsplit=1)[0]
    assert f"User:tiering lacks {operation} on topic" in messages, messages
