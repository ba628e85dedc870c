"""Real clients read a partly tiered topic through ``tierproxy serve`` (the harness broker,
SeaweedFS as the remote tier, the offload policy on, so the tiered range is served from the
remote tier although the broker still has it) and get exactly the records a direct read of
the broker gives: every codec, idempotent batches, and transactions read committed and
uncommitted; offsets_for_times lands on the same offsets.

READ_COMMITTED is compared with the truth derived from the log's own transaction markers:
Tansu answers READ_COMMITTED fetches without aborted transactions (it delivers aborted
records), so a direct read of Tansu is not a reference there; the proxy, serving the tiered
range from the remote transaction indexes, must still drop them.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest

from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    TieredTopic,
    aborted_offsets,
    by_partition,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Expected = tuple[str, list[Record]]


@pytest.fixture(scope="module")
def uncommitted(broker: BrokerInfo, tiered_topic: TieredTopic) -> list[Record]:
    return by_partition(
        consume_confluent(broker.bootstrap, tiered_topic.topic, tiered_topic.high_watermarks)
    )


@pytest.fixture(scope="module", params=[READ_UNCOMMITTED, READ_COMMITTED])
def expected(
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tiered_topic: TieredTopic,
    uncommitted: list[Record],
) -> Expected:
    """What a reader at each isolation level must get."""
    if request.param == READ_UNCOMMITTED:
        return READ_UNCOMMITTED, uncommitted
    aborted = asyncio.run(
        aborted_offsets(broker.bootstrap, tiered_topic.topic, tiered_topic.partitions)
    )
    assert aborted, "the workload has aborted transactions"
    return READ_COMMITTED, [r for r in uncommitted if (r[0], r[1]) not in aborted]


def test_confluent_kafka(
    expected: Expected, shared_proxy: TierproxyServer, tiered_topic: TieredTopic
) -> None:
    isolation, records = expected
    before = shared_proxy.metric("tierproxy_RemoteFetchBytesPerSec_total")
    got = consume_confluent(
        shared_proxy.bootstrap,
        tiered_topic.topic,
        tiered_topic.high_watermarks,
        isolation=isolation,
    )
    assert by_partition(got) == records
    assert shared_proxy.metric("tierproxy_RemoteFetchBytesPerSec_total") > before


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
        pytest.skip("kcat is not installed")
    isolation, records = expected
    got = consume_kcat(shared_proxy.bootstrap, tiered_topic.topic, isolation=isolation)
    assert got == [(p, o, len(v or b"")) for p, o, _k, v in records]


def test_offsets_for_times_land_where_the_broker_says(
    shared_proxy: TierproxyServer, broker: BrokerInfo, tiered_topic: TieredTopic
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    topic = tiered_topic.topic
    stamped: list[tuple[int, int, int]] = []
    reader = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "stamps", "enable.auto.commit": False}
    )
    try:
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        while len(stamped) < sum(tiered_topic.high_watermarks.values()) // 2:
            message = reader.poll(2)
            if message is None:
                break
            partition, offset = message.partition(), message.offset()
            if message.error() is None and partition is not None and offset is not None:
                stamped.append((partition, offset, message.timestamp()[1]))
    finally:
        reader.close()
    stamps = sorted({t for _p, _o, t in stamped})
    targets = [0, *stamps[:: max(1, len(stamps) // 8)], stamps[-1] + 1]
    direct = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
    through = Consumer({"bootstrap.servers": shared_proxy.bootstrap, "group.id": "times"})
    try:
        for target in targets:
            query = [TopicPartition(topic, p, target) for p in range(2)]
            want = [(tp.partition, tp.offset) for tp in direct.offsets_for_times(query, 10)]
            got = [(tp.partition, tp.offset) for tp in through.offsets_for_times(query, 10)]
            assert got == want, f"offsets_for_times({target})"
    finally:
        direct.close()
        through.close()
