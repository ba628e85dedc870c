"""The harness's servers work with real clients: broker, S3, Spark, and the supervisor itself.

Brokers: Apache Kafka 4.x (the default, or ``KAFKA_HOME``/``KAFKA_BOOTSTRAP``), Apache Kafka
3.9 and Tansu with aiokafka and confluent-kafka, a few thousand records compared exactly; the
Kafka launcher from a ``KAFKA_HOME`` layout, restarted on its port with its data. S3: SeaweedFS
(or ``S3_ENDPOINT``) with aiobotocore: put,
ranged get, delete, and an outage made by stopping SeaweedFS and starting it again. Spark: a
trivial job on the session's ``local[2]``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from aiobotocore.session import get_session
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from proxy.embedded import (
    KAFKA_3,
    BrokerInfo,
    KafkaBroker,
    ManagedProcess,
    S3Info,
    SeaweedFS,
    ServerStartError,
    TansuBroker,
    create_topic,
    ensure_jars,
)
from proxy.embedded.kafka_jars import distribution_from_home

pytestmark = pytest.mark.integration

NewTopic = Callable[..., Awaitable[str]]
Record = tuple[bytes | None, bytes, list[tuple[str, bytes]]]

RECORDS = 3_000
PARTITIONS = 3


def expected_records(count: int, partitions: int) -> dict[int, list[Record]]:
    """Deterministic records spread over partitions: key, value of varied size, one header."""
    per_partition: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for i in range(count):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        value = f"value-{i}-".encode() * (1 + i % 7)
        per_partition[i % partitions].append((key, value, [("n", str(i).encode())]))
    return per_partition


async def consume_all(
    bootstrap: str, topic: str, partitions: int, wanted: int
) -> dict[int, list[Record]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        async with asyncio.timeout(60):
            while sum(map(len, got.values())) < wanted:
                batches = await consumer.getmany(timeout_ms=1_000)
                for tp, messages in batches.items():
                    got[tp.partition].extend(
                        (m.key, m.value, [(k, bytes(v)) for k, v in m.headers]) for m in messages
                    )
        for tp in tps:
            assert consumer.highwater(tp) == len(got[tp.partition])
        return got
    finally:
        await consumer.stop()


def test_apache_kafka_is_the_default_broker(broker: BrokerInfo) -> None:
    if broker.kind == "external":
        return  # KAFKA_BOOTSTRAP: the user's broker, whatever it is
    assert broker.kind == "kafka"
    assert broker.version.startswith("Apache Kafka 4.")
    assert broker.supports_delete_records
    assert broker.supports_retention
    assert broker.supports(2, 9)  # ListOffsets v9: -4 EARLIEST_LOCAL and -5 LATEST_TIERED


@pytest.mark.brokers("kafka", "kafka3", "tansu")
def test_broker_reports_what_it_supports(broker: BrokerInfo, broker_kind: str) -> None:
    assert broker.supports(18, 0)  # ApiVersions
    assert broker.supports(1, 4)  # Fetch v4, the oldest version the proxy intercepts
    assert broker.node_id >= 0
    if broker.kind == "tansu":
        assert not broker.supports_delete_records
        assert not broker.supports_retention
        assert "no DeleteRecords" in broker.limitations()
    if broker_kind == "kafka3":
        assert broker.version == f"Apache Kafka {KAFKA_3}"
        # 3.9 still serves Fetch v0-v3, which 4.0 removed; it already has ListOffsets v9.
        assert broker.supports(1, 0)
        assert broker.supports(2, 9)


@pytest.mark.brokers("kafka", "kafka3", "tansu")
async def test_new_topic_has_the_partitions_asked_for(
    broker: BrokerInfo, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=4)
    # A producer, not a consumer: aiokafka 0.14's consumer can raise CancelledError from a
    # stop() that closely follows start().
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        assert await producer.partitions_for(topic) == {0, 1, 2, 3}
    finally:
        await producer.stop()


@pytest.mark.brokers("kafka", "kafka3", "tansu")
async def test_aiokafka_round_trip_is_exact(broker: BrokerInfo, new_topic: NewTopic) -> None:
    topic = await new_topic(partitions=PARTITIONS)
    expected = expected_records(RECORDS, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value, key=key, headers=headers, partition=partition)
            for partition, records in expected.items()
            for key, value, headers in records
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()

    assert await consume_all(broker.bootstrap, topic, PARTITIONS, RECORDS) == expected


def confluent_round_trip(bootstrap: str, topic: str, expected: dict[int, list[Record]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, records in expected.items():
        for key, value, headers in records:
            producer.produce(topic, value, key=key, headers=list(headers), partition=partition)
            producer.poll(0)
    assert producer.flush(30) == 0

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in expected
            ]
        )
        got: dict[int, list[Record]] = {p: [] for p in expected}
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < len(expected) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            read_from, error = message.partition(), message.error()
            assert read_from is not None
            if error is not None:
                assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                at_end.add(read_from)
                continue
            payload, read_headers = message.value(), message.headers() or []
            assert isinstance(payload, bytes)
            assert isinstance(read_headers, list)
            got[read_from].append(
                (message.key(), payload, [(k, v) for k, v in read_headers if isinstance(v, bytes)])
            )
        assert got == expected
    finally:
        consumer.close()


@pytest.mark.brokers("kafka", "kafka3", "tansu")
async def test_confluent_kafka_round_trip_is_exact(broker: BrokerInfo, new_topic: NewTopic) -> None:
    topic = await new_topic(partitions=PARTITIONS)
    expected = expected_records(RECORDS, PARTITIONS)
    await asyncio.to_thread(confluent_round_trip, broker.bootstrap, topic, expected)
    # ... and aiokafka reads exactly what librdkafka wrote.
    assert await consume_all(broker.bootstrap, topic, PARTITIONS, RECORDS) == expected


@pytest.fixture
async def s3_client(s3: S3Info) -> AsyncIterator[Any]:
    config = Config(
        connect_timeout=1,
        read_timeout=2,
        retries={"max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    async with get_session().create_client(
        "s3",
        endpoint_url=s3.endpoint_url,
        region_name=s3.region,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
        config=config,
    ) as client:
        yield client


async def test_s3_put_ranged_get_delete(s3_client: Any, s3_bucket: str) -> None:
    data = os.urandom(1_000_000)
    await s3_client.put_object(Bucket=s3_bucket, Key="dir/object.log", Body=data)

    head = await s3_client.head_object(Bucket=s3_bucket, Key="dir/object.log")
    assert head["ContentLength"] == len(data)
    whole = await s3_client.get_object(Bucket=s3_bucket, Key="dir/object.log")
    assert await whole["Body"].read() == data
    for header, expected in [
        ("bytes=0-0", data[:1]),
        ("bytes=4096-8191", data[4096:8192]),
        ("bytes=999990-", data[999_990:]),
        ("bytes=-17", data[-17:]),
        ("bytes=999000-2000000", data[999_000:]),  # an end past the object is clamped
    ]:
        ranged = await s3_client.get_object(Bucket=s3_bucket, Key="dir/object.log", Range=header)
        assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206, header
        assert await ranged["Body"].read() == expected, header

    listing = await s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="dir/")
    assert [item["Key"] for item in listing["Contents"]] == ["dir/object.log"]

    await s3_client.delete_object(Bucket=s3_bucket, Key="dir/object.log")
    with pytest.raises(ClientError) as missing:
        await s3_client.get_object(Bucket=s3_bucket, Key="dir/object.log")
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"


async def test_seaweedfs_outage_and_recovery_keep_data(
    seaweedfs: SeaweedFS, s3_client: Any, s3_bucket: str
) -> None:
    data = os.urandom(100_000)
    await s3_client.put_object(Bucket=s3_bucket, Key="kept", Body=data)

    await asyncio.to_thread(seaweedfs.stop)
    assert not seaweedfs.running
    with pytest.raises((BotoCoreError, ClientError)):
        await s3_client.get_object(Bucket=s3_bucket, Key="kept")

    started = time.monotonic()
    info = seaweedfs.start()
    assert time.monotonic() - started < 30
    assert info.endpoint_url == seaweedfs.info.endpoint_url  # same ports after the restart
    restored = await s3_client.get_object(Bucket=s3_bucket, Key="kept", Range="bytes=10-19")
    assert await restored["Body"].read() == data[10:20]


@pytest.mark.spark
def test_spark_runs_a_trivial_job(spark: Any) -> None:
    assert spark.range(10_000).count() == 10_000
    squares = spark.sparkContext.parallelize(range(1_000), 2).map(lambda x: x * x).sum()
    assert squares == sum(x * x for x in range(1_000))  # Python workers run this interpreter
    counts = spark.range(99).selectExpr("id % 3 AS k").groupBy("k").count().collect()
    assert sorted((row["k"], row["count"]) for row in counts) == [(0, 33), (1, 33), (2, 33)]


def test_tansu_is_gone_after_close() -> None:
    with TansuBroker() as tansu:
        info = tansu.start()
        pid = tansu.pid
        assert pid is not None
        assert info.kind == "tansu"
    assert not tansu.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_supervisor_reports_an_early_exit_with_the_log_tail(tmp_path: Any) -> None:
    process = ManagedProcess(
        "doomed",
        [sys.executable, "-c", "print('cannot bind port', flush=True); raise SystemExit(3)"],
        log_path=tmp_path / "doomed.log",
    )
    process.start()
    with pytest.raises(ServerStartError) as failure:
        process.wait_ready(lambda: False, timeout_s=30)
    assert failure.value.exited_early
    assert "code 3" in str(failure.value)
    assert "cannot bind port" in str(failure.value)


def test_supervisor_stops_a_server_that_never_gets_ready(tmp_path: Any) -> None:
    process = ManagedProcess(
        "sleeper",
        [sys.executable, "-c", "import time; time.sleep(600)"],
        log_path=tmp_path / "sleeper.log",
        stop_grace_s=1.0,
    )
    process.start()
    pid = process.pid
    assert pid is not None

    def probe() -> bool:
        raise ConnectionRefusedError("nothing listens yet")

    with pytest.raises(ServerStartError) as failure:
        process.wait_ready(probe, timeout_s=0.3)
    assert not failure.value.exited_early
    assert "ConnectionRefusedError" in str(failure.value)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_kafka_from_a_kafka_home_restarts_on_its_port_with_its_data(tmp_path: Path) -> None:
    """A user's unpacked release (``KAFKA_HOME``) runs like the Maven jars: same ``libs/``."""
    home = tmp_path / f"kafka_2.13-{KAFKA_3}"
    home.mkdir()
    (home / "libs").symlink_to(ensure_jars(KAFKA_3).libs)
    distribution = distribution_from_home(home)
    assert distribution.version == KAFKA_3
    with KafkaBroker(distribution, work_dir=tmp_path / "work") as kafka:
        info = kafka.start()
        assert (info.kind, info.version) == ("kafka", f"Apache Kafka {KAFKA_3}")
        settings = dict(
            line.split("=", 1)
            for line in next((tmp_path / "work").glob("node-*/server-1.properties"))
            .read_text()
            .splitlines()
        )
        assert settings["listeners"].startswith(f"PLAINTEXT://{info.bootstrap},CONTROLLER://")
        assert settings["controller.quorum.voters"].startswith("1@127.0.0.1:")
        assert int(settings["log.segment.bytes"]) == 1024 * 1024
        asyncio.run(create_topic(info.bootstrap, "kept", partitions=2))
        kafka.stop()
        assert kafka.start().bootstrap == info.bootstrap
        assert sorted(metadata_topics(info.bootstrap)) == ["kept"]
        pid = kafka.pid
        assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def metadata_topics(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return [name for name in admin.list_topics(timeout=10).topics if not name.startswith("__")]
