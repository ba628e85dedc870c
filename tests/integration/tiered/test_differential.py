"""Kafka's native tiered storage as the oracle: tierproxy answers as Kafka does.

The same records (same keys, values, headers, timestamps and transactions, so the same
offsets) go to a topic on a broker with Kafka's own tiered storage (``LocalTieredStorage``,
every closed segment copied and then dropped locally) and to a topic on a plain broker that
``tierproxy tier`` tiered and the broker then really deleted. Then, for both partitions,
Fetch at random offsets of the tiered range (read uncommitted and read committed),
ListOffsets for every sentinel and for timestamps inside the tiered range, and
OffsetForLeaderEpoch are asked of Kafka directly and of the proxy in front of the plain
broker. Every difference is reported; the only ones allowed are listed in
``docs/differences.md`` with the reason (:data:`INTENDED`).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from protocol.errors import KafkaError
from protocol.messages import ApiKey
from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.kafka_node import NATIVE_TIERED_TOPIC_CONFIGS
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.fakes.kafka_requests import fetch_request
from tests.integration.tiered.support import (
    running,
    tier_topic,
)
from tests.integration.tiered.wire import (
    LIST_OFFSETS_VERSION,
    ask,
    end_offset_for_epoch,
    list_offsets,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 2
FETCH_VERSION = 12
SAMPLES = 12
SENTINELS = {
    -1: "LATEST",
    -2: "EARLIEST",
    -3: "MAX_TIMESTAMP",
    -4: "EARLIEST_LOCAL",
    -5: "LATEST_TIERED",
    -6: "EARLIEST_PENDING_UPLOAD",
}
SENTINEL_VERSIONS = {-6: 11}
"""The ListOffsets version that defines a sentinel, where the default (v9) does not."""

INTENDED = {
    "ListOffsets EARLIEST_LOCAL": "each tier ends where its own tiering closed segments: Kafka "
    "at the broker's segment rolls, tierproxy at the pipeline's segment.bytes/segment.ms",
    "ListOffsets LATEST_TIERED": "the same boundary, seen from the remote side",
    "ListOffsets EARLIEST_PENDING_UPLOAD": "the same boundary, one offset on (-1 where a tier "
    "holds everything below the high watermark)",
    "ListOffsets MAX_TIMESTAMP": "both answer -3 from the broker's local log only (Kafka's "
    "RemoteLogManager does not search remote segments for it), and the local logs differ "
    "by the boundary above",
}
"""Differences that are the design's, by kind; docs/differences.md says the same."""

MARKER_CLOCK_AFTER_S = 600
"""Data records carry the workload's timestamps, an hour in the past; a transaction marker
carries the clock of the broker that wrote it, so the two brokers' markers differ in
timestamp only. A ListOffsets answer later than the workload is a marker's."""


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    with KafkaBroker(
        ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("oracle"), native_tiered=True
    ) as server:
        yield server.start()


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1", **configs})
    for future in admin.create_topics([new]).values():
        future.result(30)


def produce_workload(bootstrap: str, topic: str, base_timestamp: int) -> None:
    """Plain batches (gzip, then lz4; null keys, headers), then committed, aborted and
    committed transactions: the same calls in the same order give the same offsets."""
    clock = iter(range(base_timestamp, base_timestamp + 10_000_000, 7))

    def plain(codec: str, count: int) -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 2,
                "enable.idempotence": True,  # no retry may reorder or repeat a record
            }
        )
        for i in range(count):
            producer.produce(
                topic,
                key=None if i % 5 == 0 else b"key-%d" % i,
                value=bytes([i % 251]) * 150 + b"value-%d" % i,
                headers=[("h", b"%d" % i)] if i % 3 == 0 else None,
                partition=i % PARTITIONS,
                timestamp=next(clock),
            )
        assert producer.flush(30) == 0

    plain("gzip", 300)
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"oracle-{uuid.uuid4().hex}"}
    )
    transactional.init_transactions(30)
    for count, commit in ((40, True), (40, False), (20, True)):
        transactional.begin_transaction()
        for i in range(count):
            transactional.produce(
                topic, value=b"txn-%d" % i, partition=i % PARTITIONS, timestamp=next(clock)
            )
        if commit:
            transactional.commit_transaction(30)
        else:
            transactional.abort_transaction(30)
    plain("lz4", 300)
    time.sleep(1.2)  # older than segment.ms: the next append rolls the oracle's segment
    plain("none", PARTITIONS)


async def fetch(
    bootstrap: str, topic: str, partition: int, offset: int, isolation: int
) -> dict[str, Any]:
    """One Fetch, answered as comparable facts: records (offset, timestamp, key, value,
    headers) from ``offset`` on, watermarks, log start and the aborted transactions' first
    offsets (producer ids differ between the two brokers)."""
    body = fetch_request(
        FETCH_VERSION,
        [(topic, partition, offset, 64 * 1024)],
        max_wait_ms=2000,
        isolation_level=isolation,
    )
    for _attempt in range(20):  # Kafka answers a remote read it has not finished with nothing
        response = await ask(bootstrap, ApiKey.FETCH, FETCH_VERSION, body)
        part = response.responses[0].partitions[0]
        if part.records or int(part.error_code):
            break
        await asyncio.sleep(0.2)
    records = []
    batches = MemoryRecords(bytes(part.records or b""))
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None or batch.is_control_batch:
            continue
        records += [
            (r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for r in batch
            if r.offset >= offset
        ]
    return {
        "error": int(part.error_code),
        "high_watermark": int(part.high_watermark),
        "last_stable_offset": int(part.last_stable_offset),
        "log_start_offset": int(part.log_start_offset),
        "aborted": sorted(int(a.first_offset) for a in part.aborted_transactions or ()),
        "records": records,
    }


def compare_fetches(where: str, kafka: dict[str, Any], proxy: dict[str, Any]) -> list[str]:
    differences = [
        f"Fetch {key} {where}: kafka {kafka[key]} tierproxy {proxy[key]}"
        for key in ("error", "high_watermark", "last_stable_offset", "log_start_offset")
        if kafka[key] != proxy[key]
    ]
    # Each side returns whole batches of one segment: compare the records both returned, and
    # the aborted transactions that start within them.
    common = min(len(kafka["records"]), len(proxy["records"]))
    if common == 0 and (kafka["records"] or proxy["records"]):
        differences.append(f"Fetch records {where}: only one side returned records")
    pairs = zip(kafka["records"][:common], proxy["records"][:common], strict=True)
    for mine, theirs in pairs:
        if mine != theirs:
            differences.append(
                f"Fetch records {where}: kafka {mine[:2]} tierproxy {theirs[:2]} differ first"
            )
            break
    if common:
        last = kafka["records"][common - 1][0]
        aborted = [[a for a in side["aborted"] if a <= last] for side in (kafka, proxy)]
        if aborted[0] != aborted[1]:
            differences.append(f"Fetch aborted {where}: kafka {aborted[0]} tierproxy {aborted[1]}")
    return differences


async def wait_until_tiered_by_kafka(bootstrap: str, topic: str, tail: list[int]) -> None:
    """Kafka copied every closed segment and dropped it locally: its local log starts at
    the tail batch (the active segment) or after it (the tail rolled too)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        local = await list_offsets(bootstrap, topic, -4, PARTITIONS)
        if all(offset >= end for (_e, offset, _t, _l), end in zip(local, tail, strict=True)):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"Kafka's tiered storage did not drop {topic} locally: {local}")


def same_offset_answer(kafka: tuple[int, ...], proxy: tuple[int, ...], markers_after: int) -> bool:
    """Equal, or the same transaction marker (error, offset and epoch equal, both stamped
    by their own broker's clock)."""
    if kafka == proxy:
        return True
    (error, offset, stamp, epoch), (p_error, p_offset, p_stamp, p_epoch) = kafka, proxy
    same_record = (error, offset, epoch) == (p_error, p_offset, p_epoch)
    return same_record and min(stamp, p_stamp) > markers_after


RETRIABLE = frozenset({KafkaError.REQUEST_TIMED_OUT, KafkaError.KAFKA_STORAGE_ERROR})
"""What a remote timestamp lookup that ran out of time answers on a busy machine: Kafka's
native tiered storage REQUEST_TIMED_OUT, tierproxy KAFKA_STORAGE_ERROR; clients retry both."""


async def offsets_of(bootstrap: str, topic: str, timestamp: int) -> list[tuple[int, ...]]:
    """A ListOffsets answer, asked again while a partition answers a retriable error, as
    Kafka's own clients do."""
    version = SENTINEL_VERSIONS.get(timestamp, LIST_OFFSETS_VERSION)
    for _ in range(5):
        answer = await list_offsets(bootstrap, topic, timestamp, PARTITIONS, version)
        if all(error not in RETRIABLE for error, *_ in answer):
            break
    return answer


async def differences(
    kafka: str, proxy: str, topic: str, timestamps: list[int], markers_after: int
) -> list[str]:
    found: list[str] = []
    latest = await list_offsets(kafka, topic, -5, PARTITIONS)
    for timestamp in [*SENTINELS, *timestamps]:
        name = SENTINELS.get(timestamp, f"timestamp {timestamp}")
        expected = await offsets_of(kafka, topic, timestamp)
        got = await offsets_of(proxy, topic, timestamp)
        found += [
            f"ListOffsets {name} partition {p}: kafka {e} tierproxy {g}"
            for p, (e, g) in enumerate(zip(expected, got, strict=True))
            if not same_offset_answer(e, g, markers_after)
        ]
    for epoch in (0, 1):
        expected = await end_offset_for_epoch(kafka, topic, epoch, PARTITIONS)
        got = await end_offset_for_epoch(proxy, topic, epoch, PARTITIONS)
        if expected != got:
            found.append(f"OffsetForLeaderEpoch epoch {epoch}: kafka {expected} tierproxy {got}")
    sample = random.Random(405)
    for partition in range(PARTITIONS):
        tiered_end = latest[partition][1]
        offsets = {0, tiered_end, *(sample.randint(0, tiered_end) for _ in range(SAMPLES))}
        for offset in sorted(offsets):
            for isolation in (0, 1):
                where = f"partition {partition} offset {offset} isolation {isolation}"
                found += compare_fetches(
                    where,
                    await fetch(kafka, topic, partition, offset, isolation),
                    await fetch(proxy, topic, partition, offset, isolation),
                )
    return found


def test_tierproxy_answers_as_kafkas_native_tiered_storage(
    native: BrokerInfo, broker: BrokerInfo, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    topic = f"oracle-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    base_timestamp = int(time.time() * 1000) - 3_600_000
    create(native.bootstrap, topic, {**NATIVE_TIERED_TOPIC_CONFIGS, "segment.ms": "1000"})
    create(broker.bootstrap, topic, {})
    for bootstrap in (native.bootstrap, broker.bootstrap):
        produce_workload(bootstrap, topic, base_timestamp)
    kafka_latest = asyncio.run(list_offsets(native.bootstrap, topic, -1, PARTITIONS))
    tail = [offset - 1 for _e, offset, _t, _l in kafka_latest]
    asyncio.run(wait_until_tiered_by_kafka(native.bootstrap, topic, tail))
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1, "segment.bytes": 4096},
        )
    )
    broker_starts = asyncio.run(list_offsets(broker.bootstrap, topic, -2, PARTITIONS))
    assert all(offset > 0 for _e, offset, _t, _l in broker_starts), broker_starts
    timestamps = [base_timestamp + delta for delta in (0, 1, 700, 2101, 3500, 4199)]
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        markers_after = base_timestamp + MARKER_CLOCK_AFTER_S * 1000
        found = asyncio.run(
            differences(native.bootstrap, proxy.bootstrap, topic, timestamps, markers_after)
        )
    print("differences from Kafka's native tiered storage:", *(found or ["none"]), sep="\n  ")
    unexplained = [d for d in found if not any(d.startswith(kind) for kind in INTENDED)]
    assert unexplained == [], "\n".join(unexplained)
