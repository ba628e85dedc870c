"""The consumers the benchmarks read with, shared by :mod:`bench.passthrough` (direct vs
through the proxy), :mod:`bench.catchup`, :mod:`bench.tail` and :mod:`bench.native` (local
log vs remote tiers): a raw Fetch loop (records left as bytes: the client's own cost is
small, so the path's shows), librdkafka through confluent-kafka, and Kafka's Java consumer
(``ConsumerPerformance`` from the broker's jars); and the preload that writes their data.

Each reads a topic from the start of every partition up to given end offsets, and counts the
Fetch requests it sent (reported per GiB: native tiered storage serves one partition's
remote data per Fetch, so a consumer of 8 partitions needs several times more).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from bench.common import KIB, MIB, produce_retrying
from protocol.frames import FrameDecoder, encode_frame
from protocol.headers import (
    encode_request_header,
    parse_response_header,
    response_header_version,
)
from protocol.messages import ApiKey, decode_response, encode_request, nested_class, request_class
from protocol.records import iter_batches
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_tools import run_tool
from storage.kafka_client import KafkaClient

__all__ = [
    "READ_COMMITTED",
    "RECORD_BYTES",
    "Consumed",
    "Endpoint",
    "FetchTally",
    "RawConnection",
    "build",
    "confluent_consume",
    "fetch_request",
    "fetch_request_for",
    "java_consume",
    "parse_consumer_performance",
    "preload",
    "raw_fetch_all",
    "raw_fetch_partitions",
    "topic_id_and_end",
]

RECORD_BYTES = KIB
READ_COMMITTED = 1
"""Fetch's ``isolation_level`` of a READ_COMMITTED consumer (librdkafka's default)."""
MAX_EMPTY_RESPONSES = 20
"""A raw loop gives up after this many answers in a row without records (an error it does
not handle, or an end offset past the data): 10 s of 500 ms long polls."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """Where a round connects, and the process whose CPU it charges to the path."""

    name: str
    host: str
    port: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


# -- raw protocol --------------------------------------------------------------------------


def build(body_class: type[Any], **candidates: Any) -> Any:
    """A kio body with the candidate fields its version has."""
    names = set(body_class.__dataclass_fields__)
    return body_class(**{name: value for name, value in candidates.items() if name in names})


class RawConnection:
    """One connection that sends requests and reads whole response frames, nothing else."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(1 << 30)
        self._correlation = 0

    @classmethod
    async def open(cls, endpoint: Endpoint) -> RawConnection:
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port, limit=MIB)
        return cls(reader, writer)

    def send(self, api_key: ApiKey, version: int, body: Any) -> None:
        self._correlation += 1
        header = encode_request_header(api_key, version, self._correlation, "bench")
        self._writer.write(encode_frame(header + encode_request(body)))

    async def receive(self) -> bytes:
        while True:
            frame = self._decoder.next_frame()
            if isinstance(frame, bytes):
                return frame
            if frame is not None:
                raise ConnectionError(f"bad frame {frame}")
            data = await self._reader.read(4 * MIB)
            if not data:
                raise ConnectionError("closed")
            self._decoder.feed(data)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


def fetch_request(
    version: int, topic: str, topic_id: uuid.UUID, offset: int, partition_max_bytes: int
) -> Any:
    """A Fetch of partition 0 from ``offset``."""
    return fetch_request_for(version, topic, topic_id, {0: offset}, partition_max_bytes)


def fetch_request_for(
    version: int,
    topic: str,
    topic_id: uuid.UUID,
    offsets: Mapping[int, int],
    partition_max_bytes: int,
    *,
    isolation_level: int = 0,
) -> Any:
    """A Fetch of each partition in ``offsets`` from its offset, as a consumer of several
    partitions sends it: one request, ``partition_max_bytes`` per partition, 64 MiB in all;
    READ_UNCOMMITTED (``isolation_level`` 0) unless told."""
    body_class = request_class(ApiKey.FETCH, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=64 * MIB,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(
            build(
                topic_class,
                topic=topic,
                topic_id=topic_id,
                partitions=tuple(
                    build(
                        partition_class,
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for partition, offset in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


class FetchTally:
    """How many Fetch requests the raw loops sent (reported per GiB: a remote tier that
    answers in small pieces costs round trips), and the record bytes they
    received so far (a loop stopped midway has read them too)."""

    __slots__ = ("bytes", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0


async def raw_fetch_all(
    endpoint: Endpoint,
    *,
    version: int,
    topic: str,
    topic_id: uuid.UUID,
    end_offset: int,
    partition_max_bytes: int,
    tally: FetchTally | None = None,
    pace: Callable[[int], Awaitable[None]] | None = None,
) -> int:
    """Fetch offsets [0, end_offset) of partition 0 one request at a time; bytes received.
    ``pace``, given each response's record bytes, may hold the next request back."""
    return await raw_fetch_partitions(
        endpoint,
        version=version,
        topic=topic,
        topic_id=topic_id,
        ends={0: end_offset},
        partition_max_bytes=partition_max_bytes,
        tally=tally,
        pace=pace,
    )


async def raw_fetch_partitions(
    endpoint: Endpoint,
    *,
    version: int,
    topic: str,
    topic_id: uuid.UUID,
    ends: Mapping[int, int],
    partition_max_bytes: int,
    tally: FetchTally | None = None,
    pace: Callable[[int], Awaitable[None]] | None = None,
    isolation_level: int = 0,
) -> int:
    """Fetch offsets [0, ends[p]) of each partition p, one request at a time for all the
    partitions not read to their end yet (as a consumer fetches from one broker); bytes
    received. ``pace``, given each response's record bytes, may hold the next request back."""
    connection = await RawConnection.open(endpoint)
    header_version = response_header_version(ApiKey.FETCH, version)
    assert header_version is not None
    total = empty = 0
    offsets = {partition: 0 for partition, end in ends.items() if end > 0}
    try:
        while offsets:
            connection.send(
                ApiKey.FETCH,
                version,
                fetch_request_for(
                    version,
                    topic,
                    topic_id,
                    offsets,
                    partition_max_bytes,
                    isolation_level=isolation_level,
                ),
            )
            frame = await connection.receive()
            _, header_size = parse_response_header(frame, header_version)
            response = decode_response(ApiKey.FETCH, version, memoryview(frame)[header_size:])
            received = 0
            for partition in response.responses[0].partitions:
                records = partition.records or b""
                received += len(records)
                for _, batch in iter_batches(records):
                    offsets[partition.partition_index] = batch.next_offset
            empty = 0 if received else empty + 1
            if empty > MAX_EMPTY_RESPONSES:
                errors = {p.partition_index: p.error_code for p in response.responses[0].partitions}
                raise RuntimeError(f"{endpoint.name}: no records at {offsets}; errors {errors}")
            total += received
            if tally is not None:
                tally.requests += 1
                tally.bytes += received
            if pace is not None:
                await pace(received)
            offsets = {p: offset for p, offset in offsets.items() if offset < ends[p]}
    finally:
        await connection.close()
    return total


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    """What a client library's read took."""

    bytes: int
    fetches: int | None
    """Fetch requests it sent, by its own count (librdkafka's statistics, the Java
    consumer's ``fetch-total`` metric); None when not counted."""
    seconds: float | None = None
    """Its own timing of the reads, start-up left out (the Java consumer's JVM start and
    group join); None: the caller times the call."""


STATISTICS_INTERVAL_MS = 100


def confluent_consume(
    endpoint: Endpoint,
    topic: str,
    ends: Mapping[int, int],
    fetch_bytes: int,
    *,
    count_fetches: bool = True,
) -> Consumed:
    """librdkafka (confluent-kafka) reading offsets [0, ends[p]) of each partition p, with
    ``fetch.queue.backoff.ms`` 0 (without it a consumer ahead of its application pauses a
    second at a time); it stops once every partition has reached its end. Timed from the
    first message to the last, like the Java consumer's ``fetch.time.ms`` (its start-up, the
    bootstrap and the offset lookups, are left out on every path). Each ``consume`` asks for
    no more records than the ranges still hold: it returns when it has as many as it asked
    for or after its timeout, so a last call asking for more than are left would wait up to
    its timeout for records that are not coming.
    With ``count_fetches`` its Fetch requests are counted from its statistics
    (``brokers.*.req.Fetch``), taken after the last read (which costs a caller that times
    the call two statistics intervals, 0.2 s)."""
    latest: list[dict[str, Any]] = []
    statistics: dict[str, Any] = {
        "statistics.interval.ms": STATISTICS_INTERVAL_MS,
        "stats_cb": lambda text: latest.append(json.loads(text)),
    }
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": endpoint.bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            "max.partition.fetch.bytes": fetch_bytes,
            "fetch.max.bytes": 64 * MIB,
            **(statistics if count_fetches else {}),
        }
    )
    total = 0
    first: float | None = None
    remaining = {partition: end for partition, end in ends.items() if end > 0}
    wanted = sum(remaining.values())
    """Records of the ranges not consumed yet: a call never waits for more than these."""
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
                for partition in remaining
            ]
        )
        while remaining:
            for message in consumer.consume(num_messages=max(1, min(10_000, wanted)), timeout=1.0):
                if first is None:
                    first = time.perf_counter()
                if message.error() is None:
                    total += len(message.value() or b"")
                    partition, offset = message.partition(), message.offset() or 0
                    if partition in remaining:
                        if offset < remaining[partition]:
                            wanted -= 1
                        if offset + 1 >= remaining[partition]:
                            del remaining[partition]
        seconds = time.perf_counter() - (first or 0.0)
        seen = len(latest)
        while count_fetches and len(latest) < seen + 2:  # a report wholly after the last read
            consumer.poll(STATISTICS_INTERVAL_MS / 1000)
    finally:
        consumer.close()
    if not count_fetches:
        return Consumed(bytes=total, fetches=None, seconds=seconds)
    fetches = sum(broker["req"].get("Fetch", 0) for broker in latest[-1]["brokers"].values())
    return Consumed(bytes=total, fetches=fetches, seconds=seconds)


def java_consume(
    distribution: KafkaDistribution, endpoint: Endpoint, topic: str, count: int, fetch_bytes: int
) -> Consumed:
    """Kafka's own consumer perf test reading ``count`` records of ``topic`` (every
    partition, a fresh group, from the earliest offsets); bytes are ``count`` records."""
    run = run_tool(
        distribution,
        distribution.consumer_perf_test,
        "--bootstrap-server", endpoint.bootstrap,
        "--topic", topic,
        "--messages", str(count),
        "--fetch-size", str(fetch_bytes),
        "--group", f"bench-java-{uuid.uuid4().hex[:8]}",
        "--timeout", "60000",
        "--print-metrics",
        timeout_s=600,
        heap="-Xmx512m",
    )  # fmt: skip
    seconds, fetches = parse_consumer_performance(run.stdout)
    return Consumed(bytes=count * RECORD_BYTES, fetches=fetches, seconds=seconds)


_FETCH_TOTAL = re.compile(r"^consumer-fetch-manager-metrics:fetch-total:\{[^}]*\}\s*:\s*([\d.]+)")


def parse_consumer_performance(stdout: str) -> tuple[float, int]:
    """``ConsumerPerformance``'s fetch time in seconds (``fetch.time.ms``: its reads, without
    the JVM start or the group join) and its Fetch requests (``fetch-total``, printed by
    ``--print-metrics``).

    :raises ValueError: the output lacks either.
    """
    lines = stdout.splitlines()
    seconds = None
    for index, line in enumerate(lines[:-1]):
        columns = [name.strip() for name in line.split(",")]
        if "fetch.time.ms" in columns:
            values = lines[index + 1].split(",")
            seconds = float(values[columns.index("fetch.time.ms")]) / 1000
            break
    fetches = None
    for line in lines:
        found = _FETCH_TOTAL.match(line.strip())
        if found is not None:
            fetches = round(float(found.group(1)))
    if seconds is None or fetches is None:
        raise ValueError(
            f"no fetch.time.ms or fetch-total in ConsumerPerformance's output:\n{stdout[-2000:]}"
        )
    return seconds, fetches


def preload(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    """``count`` records of ``RECORD_BYTES`` keyed ``%08d`` in 1 MiB batches, split into
    ``partitions`` runs of consecutive keys, one per partition (record i of a one-partition
    topic is at offset i)."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": MIB,
            "compression.type": "none",
            "acks": 1,
        }
    )
    value = os.urandom(RECORD_BYTES)
    for i in range(count):
        partition = i * partitions // count
        produce_retrying(producer, topic, key=b"%08d" % i, value=value, partition=partition)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("preload did not finish")


async def topic_id_and_end(broker: Endpoint, topic: str) -> tuple[uuid.UUID, int]:
    """The topic's id (Metadata) and partition 0's high watermark (a Fetch v12)."""
    async with KafkaClient(broker.bootstrap) as client:
        topic_id = (await client.metadata([topic])).topics[topic].topic_id
    connection = await RawConnection.open(broker)
    try:
        connection.send(ApiKey.FETCH, 12, fetch_request(12, topic, topic_id, 0, 1))
        frame = await connection.receive()
    finally:
        await connection.close()
    _, header_size = parse_response_header(frame, 1)
    response = decode_response(ApiKey.FETCH, 12, memoryview(frame)[header_size:])
    return topic_id, int(response.responses[0].partitions[0].high_watermark)
