"""The remote read path under the clients Kafka users run, against Apache Kafka.

- A consumer that never waits (``fetch.wait.max.ms=0``) still gets cold remote reads: the
  proxy waits for them up to ``remote.fetch.max.wait.ms`` as Kafka's DelayedRemoteFetch
  does, instead of answering empty at once and being asked again (issue 11, item 9).
- Remote partitions are not starved by local ones that fill ``fetch.max.bytes``: a consumer
  of a busy local topic and a tiered one makes progress on both (item 8).
- Connection churn does not evict the fetch sessions of live consumers: closed connections
  release theirs at once (item 11).
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from protocol.headers import encode_request_header
from protocol.messages import ApiKey, encode_request
from proxy.embedded import BrokerInfo
from tests.fakes.kafka_requests import fetch_request
from tests.integration.tiered.conftest import MakeProxy
from tests.integration.tiered.support import (
    READ_UNCOMMITTED,
    TieredTopic,
    by_partition,
    consume_confluent,
)
from tests.integration.tiering.workload import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BUSY_RECORDS = 8000


def test_a_consumer_that_never_waits_gets_cold_remote_reads(
    tiered_topic: TieredTopic, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    ends = tiered_topic.high_watermarks
    got = consume_confluent(
        proxy.bootstrap, tiered_topic.topic, ends, extra={"fetch.wait.max.ms": 0}
    )
    assert by_partition(got) == tiered_topic.expected[READ_UNCOMMITTED]
    requests = proxy.metric("tierproxy_requests_total")
    remote_reads = proxy.metric("tierproxy_remote_fetch_requests_total")
    # Spinning (an empty answer at once, asked again at once) costs thousands of requests;
    # waiting for the reads costs about one Fetch per read, plus the local tail's.
    assert requests < 50 * max(remote_reads, 1) + 200, (requests, remote_reads)


def test_remote_partitions_make_progress_beside_busy_local_ones(
    broker: BrokerInfo, tiered_topic: TieredTopic, make_proxy: MakeProxy
) -> None:
    busy = f"busy-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, busy, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i in range(BUSY_RECORDS):
        producer.produce(busy, value=bytes(1000), key=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    proxy = make_proxy()
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"starve-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": READ_UNCOMMITTED,  # librdkafka's default is read_committed
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
            "max.partition.fetch.bytes": 65536,
            "queued.max.messages.kbytes": 256,
        }
    )
    remote_ends = tiered_topic.high_watermarks
    tiered: set[tuple[int, int]] = set()
    busy_read = 0
    tiered_at_half = -1
    try:
        consumer.assign(
            [TopicPartition(busy, 0, OFFSET_BEGINNING)]
            + [TopicPartition(tiered_topic.topic, p, OFFSET_BEGINNING) for p in remote_ends]
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            if message.topic() == busy:
                busy_read += 1
                if busy_read == BUSY_RECORDS // 2:
                    tiered_at_half = len(tiered)
                continue
            tiered.add((message.partition() or 0, message.offset() or 0))
            positions = consumer.position(
                [TopicPartition(tiered_topic.topic, p) for p in remote_ends]
            )
            if all(tp.offset >= remote_ends[tp.partition] for tp in positions):
                break
    finally:
        consumer.close()
    expected = {(p, o) for p, o, _k, _v in tiered_topic.expected[READ_UNCOMMITTED]}
    assert tiered == expected
    if busy_read < BUSY_RECORDS // 2:  # the tiered topic was read before half the busy one
        tiered_at_half = len(tiered)
    # Starved, the tiered topic would wait for the busy one to drain; taking turns, it has
    # read a good part of its records by the time the busy topic is half read.
    assert tiered_at_half >= len(expected) // 4, (tiered_at_half, len(expected))


async def open_session_and_leave(bootstrap: str, topic: str) -> None:
    """A client that opens a fetch session (epoch 0) and disconnects."""
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        body = fetch_request(12, [(topic, 0, 0, 1024)], max_wait_ms=0, session_epoch=0)
        payload = encode_request_header(ApiKey.FETCH, 12, 1, "churn") + encode_request(body)
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
    finally:
        writer.close()


def test_connection_churn_keeps_live_consumers_sessions(
    tiered_topic: TieredTopic, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(remote_fetch_session_cache_slots=8)
    live = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"live-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": READ_UNCOMMITTED,
            "max.partition.fetch.bytes": 4096,
            "fetch.max.bytes": 8192,
            "message.max.bytes": 8192,
            "queued.max.messages.kbytes": 16,
        }
    )
    ends = tiered_topic.high_watermarks
    got: list[Any] = []
    try:
        live.assign([TopicPartition(tiered_topic.topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for _ in range(5):  # churn between polls: 5 short-lived sessions each time
                asyncio.run(open_session_and_leave(proxy.bootstrap, tiered_topic.topic))
            message = live.poll(0.05)
            if message is not None and message.error() is None:
                got.append((message.partition(), message.offset()))
            positions = live.position([TopicPartition(tiered_topic.topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
    finally:
        live.close()
    expected = [(p, o) for p, o, _k, _v in tiered_topic.expected[READ_UNCOMMITTED]]
    assert sorted(got) == sorted(expected)
    log = proxy.process.log_path.read_text()
    assert "fetch.session.unknown" not in log, "a live consumer's session was evicted"
