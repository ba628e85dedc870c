"""Records as every client library sees them, in one comparable shape, plus direct reads.

A test writes through the proxy with one client and reads back both through the proxy and
directly from the broker; the two lists must be equal field by field.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

BASE_TIMESTAMP = (int(time.time()) - 3600) * 1000
"""The first sample record's timestamp: an hour ago, so that Apache Kafka's retention (7 days
by default, checked every second by the harness broker) never deletes the samples, as it
would records stamped in a past year."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Seen:
    """One record: where it is and everything a client can read of it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Outgoing:
    """One record to produce."""

    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def sample_records(count: int, *, partitions: int, tag: str) -> list[Outgoing]:
    """Records with keys (some null), headers (some none) and explicit timestamps."""
    base = BASE_TIMESTAMP
    return [
        Outgoing(
            partition=i % partitions,
            key=None if i % 10 == 0 else f"{tag}-key-{i}".encode(),
            value=f"{tag}-value-{i}-".encode() * (1 + i % 7),
            headers=() if i % 4 == 0 else ((f"h{i % 3}", f"hv{i}".encode()), ("tag", b"x")),
            timestamp=base + i * 1000,
        )
        for i in range(count)
    ]


async def read_aiokafka(
    bootstrap: str, topic: str, partitions: int, count: int, **options: object
) -> list[Seen]:
    """Read ``count`` records of every partition from the beginning (assign, no group).

    Reads to a record count rather than to ListOffsets LATEST, which Tansu may answer with
    the last batch's base offset.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **options,
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen: list[Seen] = []
        async with asyncio.timeout(60):
            while len(seen) < count:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    seen.extend(
                        Seen(
                            partition=r.partition,
                            offset=r.offset,
                            key=r.key,
                            value=r.value,
                            headers=tuple((k, bytes(v)) for k, v in r.headers),
                            timestamp=r.timestamp,
                        )
                        for r in records
                    )
        return sorted(seen)
    finally:
        await consumer.stop()
