"""One topic for the data source's tests: every codec, committed and aborted transactions,
records with headers; read by a direct consumer (both isolation levels) and by Spark's own
Kafka source while the broker still had it all, then tiered to SeaweedFS by the real
pipeline, after which the broker deletes the tiered range. The data source must give back
exactly what was read before the deletion.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from proxy.embedded import BrokerInfo, S3Info, create_bucket, delete_bucket
from proxy.embedded.tierproxy import storage_settings
from storage.spark_source import register
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    earliest_offsets,
    high_watermarks,
    offsets_for_times,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

PARTITIONS = 2

Row = tuple[Any, ...]
"""``(key, value, topic, partition, offset, timestamp ms, timestampType, headers)``."""

KAFKA_SOURCE_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13"


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceTopic:
    topic: str
    settings: Mapping[str, Any]
    """The data source's options for the remote tier and the broker."""
    config: Mapping[str, Any]
    """The same settings as a ``tierproxy.toml`` holds them (flat, typed)."""
    high_watermarks: dict[int, int]
    broker_log_starts: dict[int, int]
    rows: dict[str, list[Row]]
    """What a direct consumer read, per isolation level, before the deletion."""
    offsets_for_times: dict[int, list[tuple[int, int]]]
    kafka_source_rows: list[Row]
    """What Spark's own Kafka source read through the broker, before the deletion."""


def produce_with_headers(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 2, "compression.type": "snappy"}
    )
    for i in range(records):
        headers: list[tuple[str, str | bytes | None]] = (
            [("n", str(i).encode()), ("empty", None)] if i % 3 else []
        )
        producer.produce(
            topic, value=b"h" * (i % 50), key=None, partition=i % PARTITIONS, headers=headers
        )
    producer.flush(30)


def consume_rows(bootstrap: str, topic: str, ends: Mapping[int, int], isolation: str) -> list[Row]:
    """Every record from the beginning to ``ends``, as Spark's Kafka source would show it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rows-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    rows: list[Row] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF or error.retriable(), error
                    continue
                kind, stamp = message.timestamp()
                headers = message.headers()
                rows.append(
                    (
                        message.key(),
                        message.value(),
                        topic,
                        message.partition(),
                        message.offset(),
                        stamp,
                        kind - 1,  # librdkafka counts from 1 (0: not available)
                        list(headers) if headers else None,
                    )
                )
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return sorted(rows, key=lambda r: (r[3], r[4]))
        raise TimeoutError(f"read {len(rows)} records, not all")
    finally:
        consumer.close()


def kafka_source_rows(spark: Any, bootstrap: str, topic: str) -> list[Row]:
    """What ``format("kafka")`` reads through the broker (headers included)."""
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    return [tuple(row) for row in comparable(frame).collect()]


def comparable(frame: Any) -> Any:
    """The Kafka schema with the timestamp as epoch milliseconds (time-zone free)."""
    return frame.selectExpr(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "unix_millis(timestamp) AS timestamp",
        "timestampType",
        *(["headers"] if "headers" in frame.columns else []),
    ).orderBy("partition", "offset")


@pytest.fixture(scope="session")
def source_topic(
    brokers: Any, s3: S3Info, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SourceTopic]:
    register(spark)
    broker: BrokerInfo = brokers.get("kafka")
    topic = f"spark-source-{uuid.uuid4().hex[:8]}"
    bucket = f"spark-source-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=200)
        produce_with_headers(broker.bootstrap, topic, 300)
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=50)
        ends = high_watermarks(broker.bootstrap, topic, PARTITIONS)
        rows = {
            isolation: consume_rows(broker.bootstrap, topic, ends, isolation)
            for isolation in (READ_UNCOMMITTED, READ_COMMITTED)
        }
        times = offsets_for_times(broker.bootstrap, topic, ends)
        through_kafka = kafka_source_rows(spark, broker.bootstrap, topic)
        metadata_topic = f"__rlm-{topic}"
        report = asyncio.run(
            tier_topic(
                broker,
                s3,
                spark,
                topic=topic,
                bucket=bucket,
                metadata_topic=metadata_topic,
                spill=Path(tmp_path_factory.mktemp("spill")),
                **{"local.retention.ms": 1, "retention.ms": -1},
            )
        )
        assert report.segments_copied >= PARTITIONS * 3, report
        log_starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
        assert all(start > 0 for start in log_starts.values()), log_starts
        storage = storage_settings(s3, bucket, metadata_topic)
        yield SourceTopic(
            topic=topic,
            settings={
                "kafka.bootstrap.servers": broker.bootstrap,
                **{
                    f"tierproxy.{key}": str(value).lower()
                    if isinstance(value, bool)
                    else str(value)
                    for key, value in storage.items()
                },
            },
            config={"bootstrap.servers": broker.bootstrap, **storage},
            high_watermarks=ends,
            broker_log_starts=log_starts,
            rows=rows,
            offsets_for_times=times,
            kafka_source_rows=through_kafka,
        )
    finally:
        delete_bucket(s3, bucket)
