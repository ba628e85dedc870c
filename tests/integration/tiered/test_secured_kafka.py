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
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

from protocol.errors import KafkaError
from proxy.embedded import S3Info
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.integration.tiered.scram import (
    RECORDS,
    acl,
    apply_acls,
    consume,
    fetch_from_zero,
    group_acls,
    new_topics,
    pipeline_acls,
    proxy_acls,
    storage_reads,
)
from tests.integration.tiered.secured import CLIENT_SECURITY, SecuredKafka, cycle, login
from tests.integration.tiered.support import earliest_offsets, running

pytestmark = [pytest.mark.integration, pytest.mark.spark]


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
    resource = "TransactionalId" if missing.endswith("transactional id") else "topic"
    assert f"User:tiering lacks {operation} on {resource}" in messages, messages
