"""The metadata topic is replicated like Kafka's own ``__remote_log_metadata``: three replicas
with ``min.insync.replicas=2`` on a cluster of three brokers, one replica on a single broker,
and an existing topic weaker than that on a multi-broker cluster is warned about in one line.
Every writer produces with ``acks=all``, so a COPY_SEGMENT_FINISHED is then on two brokers
before the pipeline lets the broker drop the range it covers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from proxy.embedded import KAFKA_4, BrokerInfo, KafkaCluster, create_topic, ensure_jars
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager

pytestmark = pytest.mark.integration

WARNING = "replica(s) and min.insync.replicas="


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    with KafkaCluster(ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes.start()


def metadata_config(name: str) -> RemoteLogMetadataConfig:
    """The defaults but the name (and no snapshots)."""
    return RemoteLogMetadataConfig(
        topic_name=name, topic_partitions=3, snapshot_dir="", initialization_timeout_ms=120_000
    )


def describe(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions and its ``min.insync.replicas``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=30)
    replicas = {len(p.replicas) for p in metadata.topics[topic].partitions.values()}
    (configs,) = (
        f.result(30) for f in admin.describe_configs([ConfigResource("topic", topic)]).values()
    )
    return replicas, configs["min.insync.replicas"].value


async def start_and_close(bootstrap: str, name: str) -> None:
    async with TopicBasedRemoteLogMetadataManager(
        metadata_config(name), bootstrap_servers=bootstrap
    ):
        pass


async def test_three_brokers_get_three_replicas_and_two_in_sync(
    cluster: BrokerInfo, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"__rlm-durable-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.INFO, logger="storage.rlmm.topic_setup"):
        await start_and_close(cluster.bootstrap, name)
    assert describe(cluster.bootstrap, name) == ({3}, "2")
    assert "replication factor 3, min.insync.replicas 2" in caplog.text
    assert WARNING not in caplog.text


async def test_a_weaker_existing_topic_on_three_brokers_is_warned_about_once(
    cluster: BrokerInfo, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"__rlm-weak-{uuid.uuid4().hex[:8]}"
    await create_topic(cluster.bootstrap, name, partitions=3, configs={"retention.ms": "-1"})
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.topic_setup"):
        await start_and_close(cluster.bootstrap, name)
    warnings = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"metadata topic {name} has 1 replica(s)" in warnings[0]
    assert "on a 3-broker cluster" in warnings[0]
    assert "give it 3 replicas and min.insync.replicas=2" in warnings[0]


async def test_one_broker_gets_one_replica_without_a_warning(
    broker: BrokerInfo, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"__rlm-single-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.INFO, logger="storage.rlmm.topic_setup"):
        await start_and_close(broker.bootstrap, name)
        await start_and_close(broker.bootstrap, name)  # the existing topic is checked too
    replicas, _ = describe(broker.bootstrap, name)
    assert replicas == {1}
    assert "replication factor 1)" in caplog.text
    assert WARNING not in caplog.text
