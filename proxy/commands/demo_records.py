"""The demo's records: written to every partition, then read back and checked one by one.

Record ``i`` goes to partition ``i mod partitions`` and its value derives from its key, so a
record read back at the wrong offset or with the wrong bytes shows as a mismatch.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from proxy.commands.demo_run import DemoRun
from storage.kafka_client import KafkaClient
from storage.kafka_client.consumer import AssignedConsumer
from storage.kafka_client.producer import TopicProducer

__all__ = ["consume_and_verify", "demo_record", "produce"]

_CONSUME_TIMEOUT_S = 60.0
_BATCH_BYTES = 16 * 1024
"""Bytes of keys and values per produced batch: Kafka's producer ``batch.size`` default. The
batches must stay well below the demo's segment size, or every segment would be closed and
nothing left to read from the broker."""


def demo_record(index: int, value_bytes: int) -> tuple[bytes, bytes]:
    """Record ``index``: key ``k<index>`` and a value derived from it, so any mix-up shows."""
    key = f"k{index:09d}".encode()
    seed = hashlib.sha256(key).digest()
    value = (seed * (value_bytes // len(seed) + 1))[:value_bytes]
    return key, value


async def produce(demo: DemoRun, bootstrap: str) -> None:
    """Record ``i`` to partition ``i mod partitions``, in batches, every partition at once."""
    options = demo.options
    started = time.monotonic()

    async def fill(producer: TopicProducer, partition: int) -> None:
        indexes = range(partition, options.records, options.partitions)
        per_batch = max(1, _BATCH_BYTES // (options.value_bytes + len(demo_record(0, 0)[0])))
        for first in range(0, len(indexes), per_batch):
            batch = [
                demo_record(i, options.value_bytes) for i in indexes[first : first + per_batch]
            ]
            await producer.send_batch(partition, batch)
            demo.produced_bytes += sum(len(key) + len(value) for key, value in batch)

    try:
        async with KafkaClient(bootstrap) as client:
            producer = TopicProducer(client, options.topic)
            await asyncio.gather(*(fill(producer, p) for p in range(options.partitions)))
    finally:
        demo.produce_seconds = time.monotonic() - started


async def consume_and_verify(demo: DemoRun, bootstrap: str) -> None:
    """Read every partition from the start; each must hold its records in order, exactly."""
    options = demo.options
    expected_next = {p: p for p in range(options.partitions)}  # record index due next
    started = time.monotonic()
    client = KafkaClient(bootstrap)
    try:
        consumer = AssignedConsumer(client, options.topic, options.partitions)
        async with asyncio.timeout(_CONSUME_TIMEOUT_S):
            while demo.consumed < options.records:
                for partition, records in (await consumer.poll()).items():
                    for record in records:
                        index = expected_next[partition]
                        if (record.key, record.value) != demo_record(index, options.value_bytes):
                            demo.mismatches.append(
                                f"partition {partition} offset {record.offset}: "
                                f"expected record {index}, got key {record.key!r}"
                            )
                        expected_next[partition] = index + options.partitions
                        demo.records_by_offset.setdefault(partition, []).append(record.offset)
                        demo.consumed += 1
    except TimeoutError:
        demo.mismatches.append(
            f"only {demo.consumed} of {options.records} records came back "
            f"within {_CONSUME_TIMEOUT_S:.0f} s"
        )
    finally:
        demo.consume_seconds = time.monotonic() - started
        await client.close()
