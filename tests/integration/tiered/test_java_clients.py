"""Kafka's own Java clients read the tiered range through the proxy after the broker
deleted it: the Java ``KafkaConsumer`` (both group protocols, with commits, a member restart
and a rebalance in the middle of the remote range), the console consumer and the consumer
performance tool.

What the Java consumer reads through the proxy is compared with what the same program read
directly from the broker before the deletion, record by record (partition, offset and a
digest of key, value and headers): compressed batches in every codec, transactions read
committed and uncommitted, null keys and headers included.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_tools import run_tool
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    earliest_offsets,
    running,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.brokers("kafka", "kafka3")]

PARTITIONS = 3
RECORD_DIGEST = Path(__file__).parents[2] / "java" / "RecordDigest.java"
_RECORD_LINE = re.compile(r"^(\d+) (\d+) ([0-9a-f]{64})$")


class JavaRead:
    """What ``RecordDigest.java`` printed: each record once, and whether a commit failed
    (then a record may have been delivered twice, which Kafka allows)."""

    def __init__(self, stdout: str) -> None:
        lines = stdout.splitlines()
        self.delivered = [match.groups() for line in lines if (match := _RECORD_LINE.match(line))]
        self.records = sorted(set(self.delivered), key=lambda r: (int(r[0]), int(r[1])))
        self.commit_failed = any(line.startswith("commit-failed") for line in lines)

    @property
    def duplicates(self) -> int:
        return len(self.delivered) - len(self.records)


def read_with_java(
    distribution: KafkaDistribution,
    bootstrap: str,
    topic: str,
    *,
    isolation: str,
    mode: str,
    records: int = 0,
) -> JavaRead:
    run = run_tool(
        distribution,
        str(RECORD_DIGEST),
        bootstrap,
        topic,
        str(records),
        isolation,
        mode,
        timeout_s=180,
    )
    return JavaRead(run.stdout)


def produce_headers_and_null_keys(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(60):
        producer.produce(
            topic,
            key=None if i % 2 else b"key-%d" % i,
            value=None if i % 7 == 0 else b"value-%d" % i,
            headers=[("trace", b"t-%d" % i), ("empty", b""), ("null", None)],
            partition=i % PARTITIONS,
        )
    assert producer.flush(30) == 0


def test_kafkas_java_clients_read_every_record_through_the_proxy(
    broker: BrokerInfo,
    kafka_distribution: KafkaDistribution,
    s3: S3Info,
    spark: Any,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    topic = f"java-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_headers_and_null_keys(broker.bootstrap, topic)
    produce_mixed(broker.bootstrap, topic, PARTITIONS, records=150)
    produce_headers_and_null_keys(broker.bootstrap, topic)
    direct = {
        isolation: read_with_java(
            kafka_distribution, broker.bootstrap, topic, isolation=isolation, mode="assign"
        )
        for isolation in (READ_COMMITTED, READ_UNCOMMITTED)
    }
    assert len(direct[READ_COMMITTED].records) < len(direct[READ_UNCOMMITTED].records)
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1},
        )
    )
    assert all(
        start > 0 for start in earliest_offsets(broker.bootstrap, topic, PARTITIONS).values()
    )
    # KIP-848's protocol is Kafka 4's default; 3.9 has it only as early access.
    uncommitted_protocol = "consumer" if kafka_distribution.major >= 4 else "classic"
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        for isolation, protocol in (
            (READ_COMMITTED, "classic"),
            (READ_UNCOMMITTED, uncommitted_protocol),
        ):
            expected = direct[isolation].records
            through = read_with_java(
                kafka_distribution,
                proxy.bootstrap,
                topic,
                isolation=isolation,
                mode=protocol,
                records=len(expected),
            )
            assert through.records == expected, (isolation, protocol)
            assert through.duplicates == 0 or through.commit_failed, (isolation, protocol)
        every_offset = {(int(p), int(o)) for p, o, _digest in direct[READ_UNCOMMITTED].records}
        assert (
            console_consumer_offsets(kafka_distribution, proxy.bootstrap, topic, len(every_offset))
            == every_offset
        )
        assert consumer_perf_test_messages(
            kafka_distribution, proxy.bootstrap, topic, len(every_offset)
        ) == len(every_offset)


def console_consumer_offsets(
    distribution: KafkaDistribution, bootstrap: str, topic: str, messages: int
) -> set[tuple[int, int]]:
    """``kafka-console-consumer --from-beginning``: the partition and offset of each record
    it printed."""
    run = run_tool(
        distribution,
        distribution.console_consumer,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(messages),
        "--timeout-ms",
        "60000",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.value=false",
        timeout_s=180,
    )
    found = re.findall(r"Partition:(\d+)\s+Offset:(\d+)", run.stdout)
    return {(int(partition), int(offset)) for partition, offset in found}


def consumer_perf_test_messages(
    distribution: KafkaDistribution, bootstrap: str, topic: str, messages: int
) -> int:
    """``kafka-consumer-perf-test``: how many messages it says it consumed."""
    run = run_tool(
        distribution,
        distribution.consumer_perf_test,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--timeout",
        "60000",
        timeout_s=180,
    )
    header, values = run.stdout.strip().splitlines()[-2:]
    columns = dict(zip((c.strip() for c in header.split(",")), values.split(","), strict=True))
    return int(columns["data.consumed.in.nMsg"].strip())
