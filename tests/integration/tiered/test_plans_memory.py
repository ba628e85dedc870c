"""Fetches of 1,000-partition sessions, more of them in flight than the proxy's bound on
request plans holds: every consumer still reads every record exactly once (issue 27).

A Fetch's plan (which partitions the remote tier serves, where the client asked, the probe
positions sent to the broker) must live until its answer: forgotten, the broker's answer to
the probes would reach the client as it is, a batch at the probe's position. Each
partition's first records are tiered and gone from the broker, the next ones are on the
broker only, where a probe just after the remote tier finds them. With
``request.plans.max.bytes`` far below one plan, the proxy reads no new request while one
is outstanding, so Kafka's Java consumers (in fetch sessions of all 1,000 partitions),
librdkafka and a raw sessionless Fetch loop take turns, and none is served a wrong offset.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import struct
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, decode_response, encode_request
from protocol.records import iter_batches
from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.fakes.kafka_requests import fetch_request
from tests.integration.tiered.support import (
    consume_confluent,
    earliest_offsets,
    high_watermarks,
    running,
    tier_topic,
    watermarks,
)
from tests.integration.tiered.test_java_clients import JavaRead, read_with_java
from tests.integration.tiered.wire import ask
from tests.integration.tiering.workload import create_topic

# Tiering 1,000 partitions and reading them four times over takes minutes on two cores.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1500)]

PARTITIONS = 1000
RECORDS_PER_PARTITION = 4
PLANS_MAX_BYTES = 100_000
"""Below one plan of a 1,000-partition Fetch (about 600 kB): the bound is always reached."""

STORAGE_ERROR = 56
"""KAFKA_STORAGE_ERROR: a remote read the reader pool refused for now; asked again."""

Delivered = list[tuple[int, int]]


def produce(bootstrap: str, topic: str, first: int = 0) -> None:
    """``RECORDS_PER_PARTITION`` records to every partition, numbered from ``first``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(first, first + RECORDS_PER_PARTITION):
        for partition in range(PARTITIONS):
            producer.produce(
                topic, key=b"%d-%d" % (partition, i), value=bytes(100), partition=partition
            )
    assert producer.flush(300) == 0  # a new 1,000-partition topic: slow on a busy machine


async def raw_fetch_loop(bootstrap: str, topic: str, ends: Mapping[int, int]) -> Delivered:
    """Sessionless Fetch v12 of every partition from offset 0 until each reaches its end;
    the (partition, offset) of every record received at or after the position asked."""
    positions = dict.fromkeys(ends, 0)
    delivered: Delivered = []
    for _ in range(200):
        todo = [
            (topic, p, offset, 64 * 1024) for p, offset in positions.items() if offset < ends[p]
        ]
        if not todo:
            return delivered
        body = fetch_request(12, todo, max_wait_ms=100, max_bytes=16 << 20)
        response = await ask(bootstrap, ApiKey.FETCH, 12, body)
        for part in response.responses[0].partitions:
            assert part.error_code in {0, STORAGE_ERROR}, part
            position = positions[part.partition_index]
            for _offset, header in iter_batches(bytes(part.records or b"")):
                delivered += [
                    (part.partition_index, o)
                    for o in range(max(header.base_offset, position), header.next_offset)
                ]
                position = header.next_offset
            positions[part.partition_index] = position
    raise AssertionError(f"the raw loop did not reach the end: {positions}")


def first_offsets(response: Any) -> dict[int, int]:
    """Each partition's first record offset in a Fetch v12 response (-1: none)."""
    first = {}
    for part in response.responses[0].partitions:
        headers = [header for _offset, header in iter_batches(bytes(part.records or b""))]
        first[part.partition_index] = headers[0].base_offset if headers else -1
    return first


async def behind_a_long_poll(bootstrap: str, topic: str, ends: Mapping[int, int]) -> Any:
    """Fetch every partition from offset 0, queued at the broker behind a long-polled Fetch
    on the same connection (the broker answers one request of a connection at a time), while
    another connection asks too; the answer to the queued Fetch.

    Neither connection asked Metadata, so the proxy does not know the broker's offsets yet:
    its probes go just after the remote tier, where the broker holds records.
    """
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        waiting = fetch_request(12, [(topic, 0, ends[0], 1024)], max_wait_ms=3000)
        everything = fetch_request(
            12, [(topic, p, 0, 64 * 1024) for p in ends], max_wait_ms=100, max_bytes=16 << 20
        )
        for correlation_id, body in ((1, waiting), (2, everything)):
            payload = encode_request_header(ApiKey.FETCH, 12, correlation_id, "queued")
            payload += encode_request(body)
            writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        other = fetch_request(12, [(topic, p, 0, 1024) for p in ends], max_wait_ms=100)
        await ask(bootstrap, ApiKey.FETCH, 12, other)
        answers = []
        for _ in range(2):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            answers.append(await reader.readexactly(size))
    finally:
        writer.close()
    header_version = response_header_version(ApiKey.FETCH, 12)
    assert header_version is not None
    _correlation, header_size = parse_response_header(answers[1], header_version)
    return decode_response(ApiKey.FETCH, 12, memoryview(answers[1])[header_size:])


def exactly_once(delivered: Delivered, ends: Mapping[int, int]) -> None:
    assert sorted(delivered) == [(p, o) for p in sorted(ends) for o in range(ends[p])]


def test_every_record_once_when_fetch_plans_exceed_the_bound(
    broker: BrokerInfo,
    kafka_distribution: KafkaDistribution,
    s3: S3Info,
    spark: Any,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    topic = f"plans-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic)
    ends = high_watermarks(broker.bootstrap, topic, PARTITIONS)
    tiered = read_with_java(
        kafka_distribution, broker.bootstrap, topic, isolation="read_uncommitted", mode="assign"
    )
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1, "segment.ms": 1},
        )
    )
    assert earliest_offsets(broker.bootstrap, topic, PARTITIONS) == ends  # all remote now
    # Records after the tiered range, on the broker only: a probe's answer would hold them.
    produce(broker.bootstrap, topic, RECORDS_PER_PARTITION)
    local = read_with_java(
        kafka_distribution, broker.bootstrap, topic, isolation="read_uncommitted", mode="assign"
    )
    expected = sorted(
        set(tiered.records) | set(local.records), key=lambda r: (int(r[0]), int(r[1]))
    )
    assert len(expected) == 2 * PARTITIONS * RECORDS_PER_PARTITION
    ends = {p: end for p, (_start, end) in watermarks(broker.bootstrap, topic, PARTITIONS).items()}
    proxy = proxy_process(
        broker,
        tmp_path,
        {
            **storage_settings(s3, s3_bucket, metadata_topic),
            "request.plans.max.bytes": PLANS_MAX_BYTES,
            "remote.log.reader.max.pending.tasks": 4 * PARTITIONS,
        },
    )
    with running(proxy), concurrent.futures.ThreadPoolExecutor(4) as pool:
        queued = asyncio.run(behind_a_long_poll(proxy.bootstrap, topic, ends))
        # Remote reads not done within remote.fetch.max.wait.ms leave a partition empty.
        firsts = set(first_offsets(queued).values())
        assert firsts <= {0, -1} and 0 in firsts, f"a probe's records were relayed: {firsts}"
        java = [
            pool.submit(
                read_with_java,
                kafka_distribution,
                proxy.bootstrap,
                topic,
                isolation="read_uncommitted",
                mode="assign",
            )
            for _ in range(2)
        ]
        librdkafka = pool.submit(consume_confluent, proxy.bootstrap, topic, ends, timeout_s=600)
        raw = pool.submit(asyncio.run, raw_fetch_loop(proxy.bootstrap, topic, ends))
        reads: list[JavaRead] = [future.result() for future in java]
        for read in reads:
            assert read.duplicates == 0
            assert read.records == expected
        exactly_once([(p, o) for p, o, _k, _v in librdkafka.result()], ends)
        exactly_once(raw.result(), ends)
    log = Path(proxy.process.log_path).read_text()
    assert "request.plans.full" in log, "the bound was never reached"
