"""Real clients read a tiered topic through ``tierproxy serve`` after the broker deleted the
tiered range (each Apache Kafka line; SeaweedFS as the remote tier; no offload policy), and get
exactly the records the broker gave before the deletion: every codec, idempotent batches, and
transactions read committed and uncommitted; offsets_for_times lands where the broker said
before the deletion.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest

from proxy.embedded.tierproxy import TierproxyServer
from tests.conftest import missing_server
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    TieredTopic,
    by_partition,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.brokers("kafka", "kafka3")]

Expected = tuple[str, list[Record]]


@pytest.fixture(params=[READ_UNCOMMITTED, READ_COMMITTED])
def expected(request: pytest.FixtureRequest, tiered_topic: TieredTopic) -> Expected:
    """What a reader at each isolation level must get."""
    isolation: str = request.param
    return isolation, tiered_topic.expected[isolation]


def test_confluent_kafka(
    expected: Expected, shared_proxy: TierproxyServer, tiered_topic: TieredTopic
) -> None:
    isolation, records = expected
    before = shared_proxy.metric("tierproxy_remote_fetch_bytes_total")
    got = consume_confluent(
        shared_proxy.bootstrap,
        tiered_topic.topic,
        tiered_topic.high_watermarks,
        isolation=isolation,
    )
    assert by_partition(got) == records
    assert shared_proxy.metric("tierproxy_remote_fetch_bytes_total") > before


def test_kafka_python(
    expected: Expected, shared_proxy: TierproxyServer, tiered_topic: TieredTopic
) -> None:
    isolation, records = expected
    got = consume_kafka_python(
        shared_proxy.bootstrap,
        tiered_topic.topic,
        tiered_topic.high_watermarks,
        isolation=isolation,
    )
    assert by_partition(got) == records


def test_aiokafka(
    expected: Expected, shared_proxy: TierproxyServer, tiered_topic: TieredTopic
) -> None:
    isolation, records = expected
    got = asyncio.run(
        consume_aiokafka(
            shared_proxy.bootstrap,
            tiered_topic.topic,
            tiered_topic.high_watermarks,
            isolation=isolation,
        )
    )
    assert by_partition(got) == records


def test_kcat(expected: Expected, shared_proxy: TierproxyServer, tiered_topic: TieredTopic) -> None:
    if shutil.which("kcat") is None and shutil.which("kafkacat") is None:
        missing_server("kcat is not installed")
    isolation, records = expected
    got = consume_kcat(shared_proxy.bootstrap, tiered_topic.topic, isolation=isolation)
    assert got == [(p, o, len(v or b"")) for p, o, _k, v in records]


def test_offsets_for_times_land_where_the_broker_said(
    shared_proxy: TierproxyServer, tiered_topic: TieredTopic
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    through = Consumer({"bootstrap.servers": shared_proxy.bootstrap, "group.id": "times"})
    try:
        for target, want in tiered_topic.offsets_for_times.items():
            query = [TopicPartition(tiered_topic.topic, p, target) for p, _offset in want]
            got = [(tp.partition, tp.offset) for tp in through.offsets_for_times(query, 10)]
            assert got == want, f"offsets_for_times({target})"
    finally:
        through.close()
