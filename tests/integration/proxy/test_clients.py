"""Real clients through ``tierproxy serve`` see exactly what they see at the broker.

aiokafka, kafka-python, confluent-kafka (librdkafka) and kcat each produce, consume (assign,
and group subscribe with commits), list offsets and run admin calls through the proxy. What
they read through the proxy equals, record by record, what aiokafka reads directly from the
broker. Every broker address a client learns is a proxy address.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import Awaitable, Callable

import confluent_kafka
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic as ConfluentNewTopic

from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from tests.integration.proxy.records import BASE_TIMESTAMP, Seen, read_aiokafka, sample_records

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka", "kafka3", "tansu")]

NewTopicFactory = Callable[..., Awaitable[str]]
PARTITIONS = 3
COUNT = 300
# Tansu holds a JoinGroup for about half the session timeout; 6 s is the smallest session
# Apache Kafka accepts by default (group.min.session.timeout.ms).
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


async def test_aiokafka_produce_and_consume_through_the_proxy(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=PARTITIONS)
    records = sample_records(COUNT, partitions=PARTITIONS, tag="aio")
    producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
    await producer.start()
    try:
        written = await asyncio.gather(
            *[
                await producer.send(
                    topic,
                    r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                )
                for r in records
            ]
        )
        brokers = producer.client.cluster.brokers()
        assert {(b.host, b.port) for b in brokers} <= {(proxy.host, proxy.port)}
    finally:
        await producer.stop()
    through_proxy = await read_aiokafka(proxy.bootstrap, topic, PARTITIONS, COUNT)
    direct = await read_aiokafka(broker.bootstrap, topic, PARTITIONS, COUNT)
    assert through_proxy == direct
    assert len(direct) == COUNT
    assert sorted((m.partition, m.offset) for m in written) == [
        (s.partition, s.offset) for s in direct
    ]


async def test_aiokafka_group_subscribe_with_commits(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap)
    await producer.start()
    try:
        for i in range(40):
            await producer.send(topic, b"v%d" % i, partition=i % 2)
        await producer.flush()
    finally:
        await producer.stop()
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def consume(limit: int) -> list[tuple[int, int]]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=proxy.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **GROUP_TIMEOUTS,
        )
        await consumer.start()
        got: list[tuple[int, int]] = []
        try:
            async with asyncio.timeout(60):
                while len(got) < limit:
                    for records in (await consumer.getmany(timeout_ms=500, max_records=5)).values():
                        got.extend((r.partition, r.offset) for r in records)
            assert consumer._coordinator.coordinator_id is not None
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    first = await consume(10)
    second = await consume(40 - len(first))
    assert not set(first) & set(second)
    assert len(set(first) | set(second)) == 40

    checker = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    await checker.start()
    try:
        committed = {p: await checker.committed(TopicPartition(topic, p)) for p in range(2)}
    finally:
        await checker.stop()
    assert committed == {0: 20, 1: 20}


async def test_aiokafka_admin_through_the_proxy(proxy: TierproxyServer, unique_topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(unique_topic, num_partitions=2, replication_factor=1)])
        async with asyncio.timeout(30):
            while True:
                (described,) = await admin.describe_topics([unique_topic])
                if len(described.get("partitions") or ()) == 2:
                    break
                await asyncio.sleep(0.1)
        cluster = await admin.describe_cluster()
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [(proxy.host, proxy.port)]
    finally:
        await admin.close()


def test_kafka_python_produce_consume_list_offsets_admin(
    proxy: TierproxyServer, broker: BrokerInfo, unique_topic: str
) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic(unique_topic, 2, 1)])
        described = admin.describe_topics([unique_topic])
        assert len(described[0]["partitions"]) == 2
    finally:
        admin.close()
    records = sample_records(60, partitions=2, tag="kp")
    producer = kafka.KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
    try:
        for r in records:
            producer.send(
                unique_topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
        producer.flush()
    finally:
        producer.close()
    partitions = [kafka.TopicPartition(unique_topic, p) for p in range(2)]
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=proxy.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        consumer.assign(partitions)
        seen = []
        for r in consumer:
            seen.append(
                Seen(
                    partition=r.partition,
                    offset=r.offset,
                    key=r.key,
                    value=r.value,
                    headers=tuple((k, bytes(v)) for k, v in r.headers),
                    timestamp=r.timestamp,
                )
            )
            if len(seen) == 60:
                break
        through_proxy_offsets = (
            consumer.beginning_offsets(partitions),
            consumer.offsets_for_times({tp: BASE_TIMESTAMP + 30_000 for tp in partitions}),
        )
        assert {(b.host, b.port) for b in consumer._client.cluster.brokers()} == {
            (proxy.host, proxy.port)
        }
    finally:
        consumer.close()
    direct_consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        direct_offsets = (
            direct_consumer.beginning_offsets(partitions),
            direct_consumer.offsets_for_times({tp: BASE_TIMESTAMP + 30_000 for tp in partitions}),
        )
    finally:
        direct_consumer.close()
    assert through_proxy_offsets == direct_offsets
    direct = asyncio.run(read_aiokafka(broker.bootstrap, unique_topic, 2, 60))
    assert sorted(seen) == direct


async def test_kafka_python_group_commits(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=1)
    await asyncio.to_thread(kafka_python_group_round, proxy, broker, topic)


def kafka_python_group_round(proxy: TierproxyServer, broker: BrokerInfo, topic: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=proxy.bootstrap)
    try:
        for i in range(20):
            producer.send(topic, b"v%d" % i)
        producer.flush()
    finally:
        producer.close()
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=proxy.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    try:
        got = [r.offset for _, r in zip(range(20), consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    assert got == list(range(20))
    checker = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    try:
        assert checker.committed(kafka.TopicPartition(topic, 0)) == 20
    finally:
        checker.close()


ConfluentConfig = dict[str, str | int | float | bool]


def confluent_config(bootstrap: str, extra: ConfluentConfig | None = None) -> ConfluentConfig:
    return {"bootstrap.servers": bootstrap, "fetch.queue.backoff.ms": 0, **(extra or {})}


def headers_of(message: confluent_kafka.Message) -> tuple[tuple[str, bytes], ...]:
    headers = message.headers() or []
    assert isinstance(headers, list)
    pairs = []
    for key, value in headers:
        assert isinstance(key, str) and isinstance(value, bytes)
        pairs.append((key, value))
    return tuple(pairs)


def seen_of(message: confluent_kafka.Message) -> Seen:
    assert message.error() is None, message.error()
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    value, key = message.value(), message.key()
    assert not isinstance(value, str) and not isinstance(key, str)
    return Seen(
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=headers_of(message),
        timestamp=message.timestamp()[1],
    )


def confluent_read(bootstrap: str, topic: str, partitions: int, count: int) -> list[Seen]:
    consumer = confluent_kafka.Consumer(
        confluent_config(bootstrap, {"group.id": "unused", "enable.auto.commit": False})
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        seen: list[Seen] = []
        for _ in range(200):
            seen.extend(
                seen_of(message) for message in consumer.consume(num_messages=1000, timeout=0.5)
            )
            if len(seen) >= count:
                break
        return sorted(seen)
    finally:
        consumer.close()


def test_confluent_kafka_produce_consume_offsets_admin(
    proxy: TierproxyServer, broker: BrokerInfo, unique_topic: str
) -> None:
    admin = AdminClient(confluent_config(proxy.bootstrap))
    futures = admin.create_topics([ConfluentNewTopic(unique_topic, 3, 1)])
    futures[unique_topic].result(30)
    metadata = admin.list_topics(timeout=30)
    assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {proxy.bootstrap}
    records = sample_records(COUNT, partitions=3, tag="ck")
    producer = confluent_kafka.Producer(confluent_config(proxy.bootstrap, {"acks": "all"}))
    for r in records:
        producer.produce(
            unique_topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            headers=list(r.headers),
            timestamp=r.timestamp,
        )
    assert producer.flush(30) == 0
    through_proxy = confluent_read(proxy.bootstrap, unique_topic, 3, COUNT)
    direct = asyncio.run(read_aiokafka(broker.bootstrap, unique_topic, 3, COUNT))
    assert through_proxy == direct

    def offsets(bootstrap: str) -> list[tuple[int, int, int]]:
        consumer = confluent_kafka.Consumer(confluent_config(bootstrap, {"group.id": "x"}))
        try:
            low_high = [
                consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(unique_topic, p), timeout=10
                )
                for p in range(3)
            ]
            by_time = consumer.offsets_for_times(
                [
                    confluent_kafka.TopicPartition(unique_topic, p, BASE_TIMESTAMP + 100_000)
                    for p in range(3)
                ],
                timeout=10,
            )
            return [(lo, hi, t.offset) for (lo, hi), t in zip(low_high, by_time, strict=True)]
        finally:
            consumer.close()

    assert offsets(proxy.bootstrap) == offsets(broker.bootstrap)


async def test_confluent_kafka_group_subscribe_with_commits(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=1)
    await asyncio.to_thread(confluent_group_round, proxy, broker, topic)


def confluent_group_round(proxy: TierproxyServer, broker: BrokerInfo, topic: str) -> None:
    producer = confluent_kafka.Producer(confluent_config(proxy.bootstrap))
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer(
        confluent_config(
            proxy.bootstrap,
            {
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            },
        )
    )
    try:
        consumer.subscribe([topic])
        got: list[int] = []
        for _ in range(120):
            got.extend(seen_of(m).offset for m in consumer.consume(num_messages=100, timeout=0.5))
            if len(got) >= 30:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == list(range(30))
    checker = confluent_kafka.Consumer(confluent_config(broker.bootstrap, {"group.id": group}))
    try:
        (committed,) = checker.committed([confluent_kafka.TopicPartition(topic, 0)], 10)
    finally:
        checker.close()
    assert committed.offset == 30


def test_confluent_kafka_pipelines_many_produce_requests(
    proxy: TierproxyServer, broker: BrokerInfo, unique_topic: str
) -> None:
    # One record per request and up to a thousand requests in flight on one connection.
    producer = confluent_kafka.Producer(
        confluent_config(
            proxy.bootstrap,
            {
                "linger.ms": 0,
                "batch.num.messages": 1,
                "max.in.flight.requests.per.connection": 1000,
                "enable.idempotence": False,
                "acks": 1,
            },
        )
    )
    count = 3000
    for i in range(count):
        producer.produce(unique_topic, value=b"p%06d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    direct = asyncio.run(read_aiokafka(broker.bootstrap, unique_topic, 1, count))
    assert [s.value for s in direct] == [b"p%06d" % i for i in range(count)]


KCAT = shutil.which("kcat")


def kcat_round(kcat: str, bootstrap: str, topic: str) -> tuple[list[Seen], set[str]]:
    """Produce 100 keyed records with headers through kcat, read them back with -J, and list
    the brokers kcat learns."""
    lines = "".join(
        f"{'' if i % 5 == 0 else f'k{i}'}\t{'v' * (1 + i % 9)}{i}\n" for i in range(100)
    )
    subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-H", "h1=x", "-H", "h2=yz"],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    consumed = subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J"],
        check=True,
        timeout=60,
        capture_output=True,
    )
    seen = sorted(
        Seen(
            partition=m["partition"],
            offset=m["offset"],
            key=None if m["key"] is None else m["key"].encode(),
            value=m["payload"].encode(),
            headers=tuple(
                (m["headers"][i], m["headers"][i + 1].encode())
                for i in range(0, len(m.get("headers") or ()), 2)
            ),
            timestamp=m["ts"],
        )
        for m in map(json.loads, consumed.stdout.decode().splitlines())
    )
    listing = subprocess.run(
        [kcat, "-b", bootstrap, "-L", "-J"], check=True, timeout=30, capture_output=True
    )
    return seen, {b["name"] for b in json.loads(listing.stdout)["brokers"]}


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat)")
async def test_kcat_produce_consume_and_metadata(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    assert KCAT is not None
    topic = await new_topic(partitions=2)
    seen, brokers = await asyncio.to_thread(kcat_round, KCAT, proxy.bootstrap, topic)
    # kcat 1.7 (librdkafka 2.0) cannot parse Tansu's own ApiVersions answer, so the direct
    # reference read is aiokafka's.
    assert seen == await read_aiokafka(broker.bootstrap, topic, 2, 100)
    assert brokers == {f"{proxy.host}:{proxy.port}"}


async def test_multi_mib_records_through_the_proxy(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopicFactory
) -> None:
    # Apache Kafka refuses a batch larger than the topic's segment (RECORD_LIST_TOO_LARGE),
    # and the harness broker's segments are 1 MiB: this topic gets room for 4 MiB records.
    topic = await new_topic(
        partitions=1,
        configs={
            "max.message.bytes": str(16 * 1024 * 1024),
            "segment.bytes": str(32 * 1024 * 1024),
        },
    )
    values = [bytes([i]) * (4 * 1024 * 1024 + i) for i in range(4)]
    producer = AIOKafkaProducer(
        bootstrap_servers=proxy.bootstrap, max_request_size=16 * 1024 * 1024
    )
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
    options = {"max_partition_fetch_bytes": 16 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024}
    through_proxy = await read_aiokafka(proxy.bootstrap, topic, 1, 4, **options)
    direct = await read_aiokafka(broker.bootstrap, topic, 1, 4, **options)
    assert through_proxy == direct
    assert [s.value for s in through_proxy] == values
