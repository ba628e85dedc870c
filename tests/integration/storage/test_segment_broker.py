"""Segments built from a real broker's batches: what librdkafka writes, the builder indexes.

confluent-kafka (librdkafka) produces plain batches, gzip/lz4/zstd/snappy batches, an
idempotent producer and two interleaved transactional producers that commit and abort to the
``broker`` fixture (Tansu by default, Apache Kafka with ``KAFKA_HOME``). The partition is then
fetched as raw batches with the pipeline's Fetch client, asking for small responses (a
broker that honours the limit, like Apache Kafka, ends many in a partial batch; Tansu 0.6
answers with everything), and fed to :class:`SegmentBuilder`. Every index is checked
against brute force over the fetched batches; where the broker reports aborted transactions
in READ_COMMITTED fetches, our transaction index must list exactly those.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import confluent_kafka
import pytest

from protocol.indexes.offset_index import OffsetIndex
from protocol.indexes.producer_snapshot import parse_producer_snapshot
from protocol.indexes.time_index import TimeIndex
from protocol.indexes.transaction_index import AbortedTxn, parse_transaction_index
from protocol.records import Compression, ControlType
from proxy.embedded import BrokerInfo
from storage.kafka_client import FetchTarget, KafkaClient
from storage.segment.builder import BuiltSegment, SegmentBuilder
from storage.segment.reader import read_batches
from tests.fakes.synthetic_partition import Batch, parsed_batches
from tests.unit.storage.test_segment_builder import (
    brute_aborted,
    brute_lineage,
    check_offset_index,
    check_time_index,
)
from tests.unit.storage.test_segment_reader import brute_read

pytestmark = pytest.mark.integration

NewTopic = Callable[..., Awaitable[str]]
READ_COMMITTED = 1
FETCH_BYTES = 3_000
"""Per-partition Fetch limit: small, so that responses end in partial batches."""
FETCH_WAIT_MS = 10
"""Tansu answers a Fetch with ``max_wait_ms=0`` with no partitions at all."""
MARKERS = 5
"""Transaction markers the producers below cause (two aborts, three commits)."""


def produce(bootstrap: str, topic: str) -> None:
    """Plain, compressed, idempotent and interleaved transactional batches to partition 0."""
    common = {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"}

    def send(producer: confluent_kafka.Producer, count: int, tag: str) -> None:
        for i in range(count):
            producer.produce(topic, value=f"{tag}-{i}-".encode() * (1 + i % 9), partition=0)
        producer.flush(30)

    plain = confluent_kafka.Producer({**common, "enable.idempotence": False})
    send(plain, 300, "plain")
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        compressed = confluent_kafka.Producer(
            {**common, "enable.idempotence": False, "compression.type": codec}
        )
        send(compressed, 150, codec)
    send(confluent_kafka.Producer({**common, "enable.idempotence": True}), 100, "idempotent")

    first, second = (
        confluent_kafka.Producer({**common, "transactional.id": f"segment-test-{uuid.uuid4()}"})
        for _ in range(2)
    )
    for producer in (first, second):
        producer.init_transactions(30)
        producer.begin_transaction()
    send(first, 20, "txn-a1")
    send(second, 20, "txn-b1")
    send(first, 20, "txn-a1-more")
    first.abort_transaction(30)
    send(second, 10, "txn-b1-more")
    send(plain, 50, "plain-between")
    second.commit_transaction(30)
    first.begin_transaction()
    send(first, 30, "txn-a2")
    first.commit_transaction(30)
    second.begin_transaction()
    send(second, 30, "txn-b2")
    first.begin_transaction()
    send(first, 5, "txn-a3")
    second.abort_transaction(30)
    first.commit_transaction(30)


async def fetch_segment(client: KafkaClient, topic: str, interval: int) -> BuiltSegment:
    """Build a segment from offset 0 with many small Fetches, until every marker arrived."""
    builder = SegmentBuilder(base_offset=0, index_interval_bytes=interval)
    markers = 0
    async with asyncio.timeout(60):
        while True:
            (part,) = await client.fetch(
                None,
                [
                    FetchTarget(
                        topic=topic, partition=0, offset=builder.next_offset, max_bytes=FETCH_BYTES
                    )
                ],
                max_wait_ms=FETCH_WAIT_MS,
            )
            assert part.error == 0, part.error
            before = builder.size_in_bytes
            builder.append(part.records)
            markers += sum(
                1
                for b in parsed_batches(part.records[: builder.size_in_bytes - before])
                if b.header.is_control
            )
            if markers >= MARKERS and builder.next_offset >= part.high_watermark:
                return builder.finish()
            if builder.size_in_bytes == before:
                await asyncio.sleep(0.1)


async def test_segment_from_real_batches(broker: BrokerInfo, new_topic: NewTopic) -> None:
    topic = await new_topic(1)
    await asyncio.to_thread(produce, broker.bootstrap, topic)
    async with KafkaClient(broker.bootstrap) as client:
        built = await fetch_segment(client, topic, interval=4096)
        dense = await fetch_segment(client, topic, interval=0)
        (whole,) = await client.fetch(
            None,
            [FetchTarget(topic=topic, partition=0, offset=0, max_bytes=64 * 1024 * 1024)],
            max_wait_ms=FETCH_WAIT_MS,
        )
        committed = None
        if broker.supports_aborted_transactions:
            (committed,) = await client.fetch(
                None,
                [FetchTarget(topic=topic, partition=0, offset=0, max_bytes=64 * 1024 * 1024)],
                isolation_level=READ_COMMITTED,
                max_wait_ms=FETCH_WAIT_MS,
            )

    batches = parsed_batches(bytes(built.data.log))
    assert built.data.log == whole.records[: len(built.data.log)]
    assert dense.data.log == built.data.log
    kinds = {b.header.compression for b in batches}
    assert kinds >= {Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD}
    controls = [b for b in batches if b.control is not None]
    assert (
        sorted(b.control for b in controls if b.control is not None)
        == [ControlType.ABORT] * 2 + [ControlType.COMMIT] * 3
    )

    for segment, interval in ((built, 4096), (dense, 0)):
        check_offset_index(OffsetIndex(segment.data.offset_index, base_offset=0), batches, interval)
        check_time_index(TimeIndex(segment.data.time_index, base_offset=0), batches)
    assert len(dense.data.offset_index) // 8 == len(batches) - 1

    aborted = brute_aborted(batches)
    assert len(aborted) == 2
    assert list(parse_transaction_index(built.data.transaction_index)) == aborted
    assert [(t.producer_id, t.first_offset) for t in aborted] == [
        (b.header.producer_id, b.header.base_offset) for b in first_txn_batches(batches, aborted)
    ]
    if committed is not None:
        assert sorted(committed.aborted_transactions) == sorted(
            (t.producer_id, t.first_offset) for t in aborted
        )

    assert [(e.epoch, e.start_offset) for e in built.lineage] == [
        (e.epoch, e.start_offset) for e in brute_lineage(batches, [])
    ]
    snapshot = parse_producer_snapshot(built.data.producer_snapshot)
    producer_ids = {b.header.producer_id for b in batches if b.header.producer_id >= 0}
    assert {e.producer_id for e in snapshot} == producer_ids
    assert all(e.current_txn_first_offset == -1 for e in snapshot)

    index = OffsetIndex(built.data.offset_index, base_offset=0)

    async def fetch_log(start: int, end: int) -> bytes:
        return bytes(built.data.log[start:end])

    for target in range(0, built.end_offset + 1, 37):
        got = await read_batches(
            fetch=fetch_log,
            offset_index=index,
            target_offset=target,
            max_bytes=5_000,
            segment_size=built.size_in_bytes,
        )
        assert bytes(got) == brute_read(batches, target, 5_000)


def first_txn_batches(batches: list[Batch], aborted: list[AbortedTxn]) -> list[Batch]:
    """The batch at each aborted transaction's first offset: a transactional data batch of
    the aborting producer, written before its marker."""
    by_offset = {b.header.base_offset: b for b in batches}
    found = []
    for txn in aborted:
        batch = by_offset[txn.first_offset]
        assert batch.header.is_transactional and not batch.header.is_control
        assert batch.header.base_offset < txn.last_offset
        found.append(batch)
    return found
