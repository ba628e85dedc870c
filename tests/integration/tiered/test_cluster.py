"""Leader changes on a three-node Apache Kafka cluster (KRaft, replication factor 3).

The pipeline tiers a topic and the cluster deletes the tiered range on every replica. A
consumer reads from offset 0 through the proxy while the leader of the partitions it reads
is stopped (a controlled shutdown moves leadership): it must get every record once, in
order. After the election, OffsetForLeaderEpoch through the proxy answers as the new leader
does directly, and when the stopped broker comes back the proxy still gives each broker the
port it had.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from proxy.embedded import KAFKA_4, BrokerInfo, S3Info, ensure_jars
from proxy.embedded.kafka_cluster import KafkaCluster
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.integration.tiered.support import (
    Record,
    by_partition,
    consume_confluent,
    running,
    tier_topic,
)
from tests.integration.tiered.wire import end_offset_for_epoch

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 2
RECORDS = 1200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("cluster")) as nodes:
        nodes.start()
        yield nodes


def produce(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 3, config={"retention.ms": "-1", "min.insync.replicas": "2"})
    for future in admin.create_topics([new]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 250 + b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (log start, high watermark), each asked of the partition's leader."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def brokers_and_leaders(bootstrap: str, topic: str) -> tuple[dict[int, str], dict[int, int]]:
    """Metadata as a client sees it at ``bootstrap``: node id -> address, partition ->
    leader."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    brokers = {node: f"{b.host}:{b.port}" for node, b in metadata.brokers.items()}
    leaders = {p: part.leader for p, part in metadata.topics[topic].partitions.items()}
    return brokers, leaders


def read_across_a_change(
    bootstrap: str, topic: str, ends: dict[int, int], change: Callable[[], None]
) -> list[Record]:
    """Read from offset 0 with a small prefetch queue; run ``change`` after a quarter of
    the records (inside the remote range), so most of the range is fetched after it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cluster-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 8192,
            "fetch.max.bytes": 16384,
            "message.max.bytes": 16384,
            "queued.max.messages.kbytes": 32,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    got: list[Record] = []
    changed = False
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                got.append((partition, offset, message.key(), message.value()))
            if not changed and len(got) >= sum(ends.values()) // 4:
                change()
                changed = True
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if changed and all(tp.offset >= ends[tp.partition] for tp in positions):
                return got
        raise TimeoutError(f"read {len(got)} records across the leader change, not all")
    finally:
        consumer.close()


def test_reads_survive_leader_changes_and_brokers_that_come_back(
    cluster: KafkaCluster, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    broker: BrokerInfo = dataclasses.replace(cluster.info, bootstrap=cluster.bootstrap)
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    produce(cluster.bootstrap, topic)
    ends = {p: high for p, (_low, high) in watermarks(cluster.bootstrap, topic).items()}
    expected = by_partition(consume_confluent(cluster.bootstrap, topic, ends))
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1, "segment.bytes": 16384},
        )
    )
    starts = {p: low for p, (low, _high) in watermarks(cluster.bootstrap, topic).items()}
    assert all(start > ends[p] // 2 for p, start in starts.items()), starts
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        ports_before, leaders = brokers_and_leaders(proxy.bootstrap, topic)
        assert len(ports_before) == 3
        leaving = cluster.node(leaders[0])
        got = read_across_a_change(proxy.bootstrap, topic, ends, leaving.stop)
        assert by_partition(got) == expected
        assert len(got) == len(expected)  # each record once

        # Every proxy port, as a client's bootstrap list should be: the first one fronts a
        # broker that may be the one stopped.
        bootstrap = ",".join(ports_before.values())
        _ports, new_leaders = brokers_and_leaders(bootstrap, topic)
        assert new_leaders[0] != leaving.node_id
        direct, _leaders = brokers_and_leaders(cluster.nodes[new_leaders[0] - 1].bootstrap, topic)
        for epoch in (0, 1, 2):
            kafka = asyncio.run(
                end_offset_for_epoch(direct[new_leaders[0]], topic, epoch, PARTITIONS)
            )
            through = asyncio.run(
                end_offset_for_epoch(ports_before[new_leaders[0]], topic, epoch, PARTITIONS)
            )
            assert through[0] == kafka[0], (epoch, kafka, through)

        cluster.start()  # the stopped broker comes back, on its old port and data
        deadline = time.monotonic() + 60
        while len(ports := brokers_and_leaders(bootstrap, topic)[0]) < 3:
            assert time.monotonic() < deadline, ports
            time.sleep(0.5)
        assert ports == ports_before
        again = consume_confluent(bootstrap, topic, ends)
        assert by_partition(again) == expected
