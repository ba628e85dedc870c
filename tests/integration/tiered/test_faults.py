"""Faults on the tiered read path, with real servers: SeaweedFS stopped mid-read, slow remote
storage (a latency relay in front of SeaweedFS), a full reader queue, and the proxy
restarted under a consumer group. Each test runs its own ``tierproxy serve`` over the
session's tiered topic (on Apache Kafka, its tiered range deleted by the broker), with caches
small enough that reads really reach remote storage."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from protocol.errors import KafkaError
from proxy.embedded import S3Info, SeaweedFS
from proxy.embedded.tierproxy import storage_settings
from tests.integration.tiered.conftest import MakeProxy
from tests.integration.tiered.support import (
    READ_UNCOMMITTED,
    LatencyRelay,
    Record,
    TieredTopic,
    by_partition,
    fetch_once,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

UNCACHED: dict[str, Any] = {
    "remote_fetch_chunk_cache_size_bytes": 0,
    "remote_fetch_chunk_prefetch_chunks": 0,
}
"""Every read goes to remote storage (index files stay cached: they are small)."""
SMALL_FETCHES = {
    "max.partition.fetch.bytes": 8192,
    "fetch.max.bytes": 16384,
    "message.max.bytes": 16384,
    "queued.max.messages.kbytes": 32,
    "isolation.level": "read_uncommitted",
}


@pytest.fixture
def everything(tiered_topic: TieredTopic) -> list[Record]:
    return tiered_topic.expected[READ_UNCOMMITTED]


def test_seaweedfs_stopped_mid_read_then_back(
    make_proxy: MakeProxy,
    seaweedfs: SeaweedFS,
    tiered_topic: TieredTopic,
    everything: list[Record],
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    proxy = make_proxy(**UNCACHED)
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": "fault",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            "fetch.error.backoff.ms": 100,
            **SMALL_FETCHES,
        }
    )
    got: list[Record] = []
    ends = tiered_topic.high_watermarks

    def poll_for(seconds: float, until: int | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or len(got) < until):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                got.append((partition, offset, message.key(), message.value()))

    try:
        consumer.assign([TopicPartition(tiered_topic.topic, p, OFFSET_BEGINNING) for p in ends])
        poll_for(30, until=100)
        assert len(got) >= 100
        seaweedfs.stop()
        errors_before = proxy.metric("tierproxy_remote_fetch_errors_total")
        poll_for(4)
        stalled_at = len(got)
        poll_for(2)
        assert len(got) == stalled_at, "records arrived while remote storage was down"
        assert proxy.metric("tierproxy_remote_fetch_errors_total") > errors_before
        seaweedfs.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            poll_for(1)
            positions = consumer.position([TopicPartition(tiered_topic.topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
    finally:
        consumer.close()
    assert by_partition(got) == everything  # nothing lost, nothing twice


@pytest.fixture
def relay(s3: S3Info) -> Any:
    host, port = s3.endpoint_url.split("//", 1)[1].rsplit(":", 1)
    relay = LatencyRelay(host, int(port), delay=0.0)
    yield relay
    relay.close()


def slow_storage(s3: S3Info, relay: LatencyRelay, tiered: TieredTopic) -> dict[str, Any]:
    settings = storage_settings(s3, tiered.bucket, tiered.metadata_topic)
    settings["remote.log.storage.s3.endpoint"] = f"http://127.0.0.1:{relay.port}"
    settings["remote.log.storage.s3.read.timeout.ms"] = 20_000
    return {key.replace(".", "_"): value for key, value in settings.items()}


def test_slow_remote_storage_answers_within_max_wait(
    make_proxy: MakeProxy, s3: S3Info, relay: LatencyRelay, tiered_topic: TieredTopic
) -> None:
    proxy = make_proxy(
        **slow_storage(s3, relay, tiered_topic), remote_fetch_max_wait_ms=300, **UNCACHED
    )
    relay.delay = 1.5

    async def run() -> None:
        started = time.monotonic()
        error, _hw, records = await fetch_once(
            proxy.bootstrap, tiered_topic.topic, 0, 0, max_wait_ms=10_000
        )
        elapsed = time.monotonic() - started
        assert error == KafkaError.NONE
        assert not records  # the read goes on; Kafka answers empty on expiry
        assert elapsed < 1.2, elapsed
        relay.delay = 0
        for _ in range(50):
            error, _hw, records = await fetch_once(
                proxy.bootstrap, tiered_topic.topic, 0, 0, max_wait_ms=500
            )
            if records:
                return
            await asyncio.sleep(0.2)
        raise AssertionError("the remote data never arrived")

    asyncio.run(run())
    assert proxy.metric("tierproxy_remote_fetch_expires_total") >= 1


def test_a_full_reader_queue_answers_retriable_errors_without_hanging(
    make_proxy: MakeProxy, s3: S3Info, relay: LatencyRelay, tiered_topic: TieredTopic
) -> None:
    proxy = make_proxy(
        **slow_storage(s3, relay, tiered_topic),
        remote_log_reader_threads=1,
        remote_log_reader_max_pending_tasks=0,
        remote_fetch_max_wait_ms=5000,
        **UNCACHED,
    )
    relay.delay = 1.0

    async def run() -> tuple[tuple[int, float], tuple[int, float]]:
        async def timed(partition: int, delay: float) -> tuple[int, float]:
            await asyncio.sleep(delay)
            started = time.monotonic()
            error, _hw, _records = await fetch_once(
                proxy.bootstrap, tiered_topic.topic, partition, 0, max_wait_ms=5000
            )
            return error, time.monotonic() - started

        return await asyncio.gather(timed(0, 0), timed(1, 0.3))

    (first, first_s), (second, second_s) = asyncio.run(run())
    assert first == KafkaError.NONE
    assert second == KafkaError.KAFKA_STORAGE_ERROR
    assert second_s < 1.0  # refused at once, not queued behind the slow read
    assert first_s < 10
    assert proxy.metric("tierproxy_remote_log_reader_rejected_total") >= 1


def test_proxy_restart_mid_consumption_resumes_from_the_committed_offset(
    make_proxy: MakeProxy, tiered_topic: TieredTopic, everything: list[Record]
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    proxy = make_proxy(**UNCACHED)
    group = f"restart-{time.monotonic_ns()}"
    config = {
        "bootstrap.servers": proxy.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 0,
        **SMALL_FETCHES,
    }
    first = Consumer(config)
    got: list[Record] = []
    try:
        first.subscribe([tiered_topic.topic])
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            message = first.poll(0.2)
            if message is not None and message.error() is None:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                got.append((partition, offset, message.key(), message.value()))
                first.commit(message=message, asynchronous=False)
    finally:
        first.close()
    assert len(got) >= 300
    proxy.stop()
    proxy.start()
    second = Consumer(config)
    ends = tiered_topic.high_watermarks
    try:
        second.subscribe([tiered_topic.topic])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            message = second.poll(0.2)
            if message is not None and message.error() is None:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                got.append((partition, offset, message.key(), message.value()))
            assignment = second.assignment()
            if len(assignment) == len(ends):
                positions = second.position([TopicPartition(tiered_topic.topic, p) for p in ends])
                if all(tp.offset >= ends[tp.partition] for tp in positions):
                    break
    finally:
        second.close()
    assert by_partition(got) == everything
