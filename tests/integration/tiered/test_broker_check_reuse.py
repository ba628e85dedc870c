"""Fetches answered without the broker (``remote.fetch.broker.check.reuse.ms``) on Apache
Kafka with ``StandardAuthorizer``: what the broker decides still ends up being the answer.

``alice`` reads a tiered topic (its local copy deleted) through the proxy with raw,
sessionless Fetch loops on one connection, as catch-up readers do, with a small fetch size
so that most Fetches are answered by the proxy alone. Then:

- her READ ACL is revoked: within a bounded time every answer is TOPIC_AUTHORIZATION_FAILED
  without records, and from the first such answer on the proxy starts no remote read for
  her connection (``tierproxy_remote_fetch_requests_total`` stays put, issue 28); granted
  again, she reads on from where she stopped;
- the topic is deleted: within a bounded time the answers carry the broker's error, never
  records.

Throughout, the offsets she received are every offset of the topic at most once, in order:
none lost, duplicated or skipped. The leader-epoch side (a client that learned a new epoch
goes to the broker; an old epoch is fenced there) is covered against the scripted broker in
``tests/unit/proxy/remote/test_broker_checks.py``: it needs a leader change, and this
module's single broker cannot move leadership.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from protocol.errors import KafkaError
from protocol.records import iter_batches
from proxy.embedded import S3Info
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings
from storage.config import from_settings
from storage.kafka_client import FetchTarget, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from tests.integration.tiered.scram import (
    RECORDS,
    Topics,
    acl,
    apply_acls,
    new_topics,
    pipeline_acls,
    proxy_acls,
)
from tests.integration.tiered.secured import SecuredKafka, cycle, login
from tests.integration.tiered.support import earliest_offsets, running

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REUSE_MS = 200
FETCH_BYTES = 16 * 1024
"""Small fetches: many Fetches per reuse interval, most answered without the broker."""
SETTLE_SECONDS = 30
"""Bound on how long a broker decision may take to reach the answers (Kafka's own ACL and
topic propagation included; the proxy adds at most ``REUSE_MS``)."""


class Reader:
    """alice's raw sessionless Fetch loop on one connection, with every offset received."""

    def __init__(self, client: KafkaClient, topic: str) -> None:
        self._client, self._topic = client, topic
        self.offsets: list[int] = []

    @property
    def position(self) -> int:
        return self.offsets[-1] + 1 if self.offsets else 0

    async def step(self) -> KafkaError:
        """One Fetch at the position; the partition's error (records taken on NONE)."""
        target = FetchTarget(
            topic=self._topic, partition=0, offset=self.position, max_bytes=FETCH_BYTES
        )
        (answer,) = await self._client.fetch(None, [target], max_bytes=FETCH_BYTES)
        if answer.error != KafkaError.NONE:
            assert not answer.records, "records with an error"
            return answer.error
        for _position, header in iter_batches(answer.records):
            assert header.base_offset <= self.position <= header.last_offset, (
                f"batch {header.base_offset}-{header.last_offset} at {self.position}"
            )
            self.offsets += range(self.position, header.last_offset + 1)
        return KafkaError.NONE

    async def until_refused(self) -> KafkaError:
        """Fetch until the broker's refusal is the answer; it must come within the bound."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            error = await self.step()
            if error != KafkaError.NONE:
                return error
            if self.position >= RECORDS:
                await asyncio.sleep(0.01)  # nothing left to read: keep asking
        raise AssertionError("the broker's refusal never reached the answers")


def security(bootstrap: str, user: str) -> KafkaSecurityConfig:
    return from_settings(KafkaSecurityConfig, {"bootstrap.servers": bootstrap, **login(user)})


def revoke_read(admin_bootstrap: str, user: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    binding = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        f"User:{user}",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in admin.delete_acls([binding]).values():
        assert future.result(), "no ACL was deleted"


def start_deleting(admin_bootstrap: str, topic: str) -> None:
    """Delete ``topic`` without waiting for the deletion to spread: the reader keeps
    fetching meanwhile, with checks the broker gave before it."""
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result()


def answered_alone(proxy: TierproxyServer) -> float:
    return proxy.metric("tierproxy_remote_fetch_answered_without_broker_total")


def remote_reads(proxy: TierproxyServer) -> float:
    return proxy.metric("tierproxy_remote_fetch_requests_total")


@pytest.fixture
def tiered(secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path) -> Topics:
    """A tiered topic alice may read, its local copy of the tiered range deleted."""
    # About one record per batch: a Fetch of FETCH_BYTES gets a few dozen records.
    topics = new_topics(secured.plaintext, "reuse", **{"batch.size": 1024, "linger.ms": 0})
    apply_acls(secured.plaintext, proxy_acls(topics.topic, topics.metadata).values())
    apply_acls(secured.plaintext, pipeline_acls(topics.topic, topics.metadata).values())
    apply_acls(secured.plaintext, [acl("alice", topics.topic, AclOperation.READ)])
    report = cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill")
    assert not report.errors, report.errors
    assert earliest_offsets(secured.plaintext, topics.topic, 1)[0] > 0, "nothing deleted"
    return topics


def test_a_revoked_acl_and_a_deleted_topic_end_up_answered_by_the_broker(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, tiered: Topics, tmp_path: Path
) -> None:
    topic, metadata_topic = tiered.topic, tiered.metadata
    settings = {
        **storage_settings(s3, s3_bucket, metadata_topic),
        **login("proxy"),
        "remote.fetch.broker.check.reuse.ms": REUSE_MS,
    }
    with running(proxy_process(secured.sasl, tmp_path, settings)) as proxy:

        async def scenario() -> list[int]:
            async with KafkaClient(
                proxy.bootstrap, security=security(proxy.bootstrap, "alice")
            ) as client:
                reader = Reader(client, topic)
                while reader.position < RECORDS // 3:
                    assert await reader.step() == KafkaError.NONE
                assert answered_alone(proxy) > 0, "every Fetch went to the broker"

                revoke_read(secured.plaintext, "alice", topic)
                stopped = reader.position
                assert await reader.until_refused() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                reads = remote_reads(proxy)
                for _ in range(5):  # refused from now on, the broker asked each time
                    assert await reader.step() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                assert remote_reads(proxy) == reads, "a remote read after the broker refused"
                assert reader.position >= stopped

                apply_acls(secured.plaintext, [acl("alice", topic, AclOperation.READ)])
                deadline = time.monotonic() + SETTLE_SECONDS
                while reader.position < RECORDS and time.monotonic() < deadline:
                    await reader.step()
                assert reader.position >= RECORDS, "alice could not read on after the grant"
                assert reader.offsets == list(range(reader.position))

                start_deleting(secured.plaintext, topic)
                reader.offsets.clear()  # from the start of the (tiered) log again
                error = await reader.until_refused()
                assert error in {
                    KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
                    KafkaError.UNKNOWN_TOPIC_ID,
                    KafkaError.NOT_LEADER_OR_FOLLOWER,
                }, error
                for _ in range(5):
                    assert await reader.step() != KafkaError.NONE
                return reader.offsets

        after_deletion = asyncio.run(scenario())
    assert after_deletion == list(range(len(after_deletion)))
