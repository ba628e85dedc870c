"""Support for the tiered-read integration tests: tier a topic with the real pipeline, run
``tierproxy serve`` with the remote tier as a subprocess, and read partitions with real
clients (confluent-kafka, kafka-python, aiokafka, kcat) into comparable record lists.

Records are compared as ``(partition, offset, key, value)`` (kcat: ``(partition, offset,
value size)``, as its text output cannot carry binary values safely).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, decode_response, encode_request
from protocol.records import ControlType, iter_batches, read_control_record
from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import TierproxyServer, storage_settings
from storage.tiering.job import open_pipeline, settings_from_flat
from storage.tiering.report import CycleReport
from tests.conditions import GENEROUS_S
from tests.fakes.kafka_requests import fetch_request

Record = tuple[int, int, bytes | None, bytes | None]

SEGMENT_BYTES = 32 * 1024
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredTopic:
    """A topic copied to the remote tier up to near its end, then deleted by the broker
    below ``broker_log_starts``; what readers must get was read before the deletion."""

    topic: str
    partitions: int
    metadata_topic: str
    bucket: str
    high_watermarks: dict[int, int]
    broker_log_starts: dict[int, int]
    """The broker's own log start per partition after the deletion (all > 0)."""
    expected: dict[str, list[Record]]
    """Every record a reader at each isolation level gets, by partition and offset."""
    offsets_for_times: dict[int, list[tuple[int, int]]]
    """What the broker answered to offsetsForTimes before the deletion: per target timestamp,
    ``(partition, offset)`` of every partition (a transaction marker counts, as in Kafka)."""


async def tier_topic(
    broker: BrokerInfo,
    s3: S3Info,
    spark: Any,
    *,
    topic: str,
    bucket: str,
    metadata_topic: str,
    spill: Path,
    storage: Any = None,
    **policy: Any,
) -> CycleReport:
    """Run one pipeline cycle over ``topic``; the cycle's report, which had no errors.

    :param storage: the ``remote.log.storage.*`` settings (a mapping) of another remote tier
        than the bucket ``bucket`` of ``s3``."""
    target = CycleTarget(
        topic=topic, bucket=bucket, metadata_topic=metadata_topic, spill=spill, storage=storage
    )
    report = await run_cycle(broker, s3, spark, target, policy)
    assert not report.errors, report.errors
    return report


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleTarget:
    """What one test cycle tiers, and where to."""

    topic: str
    bucket: str
    metadata_topic: str
    spill: Path
    storage: Mapping[str, Any] | None = None
    """Another remote tier's settings than the bucket's (with the metadata topic's)."""


async def run_cycle(
    broker: BrokerInfo,
    s3: S3Info,
    spark: Any,
    target: CycleTarget,
    policy: Mapping[str, Any],
    *,
    settings: Mapping[str, Any] | None = None,
) -> CycleReport:
    """Run one pipeline cycle over ``target.topic`` with more ``settings`` (a login, say;
    they may also replace the storage settings, for a local-directory tier)."""
    topic, bucket, metadata_topic = target.topic, target.bucket, target.metadata_topic
    pipeline_settings = settings_from_flat(
        {
            "bootstrap.servers": broker.bootstrap,
            **storage_settings(s3, bucket, metadata_topic),
            **(settings or {}),
            **(target.storage or {}),
            "tiering.spill.dir": str(target.spill),
            "topics": [
                {
                    "pattern": topic,
                    "remote.storage.enable": True,
                    "segment.bytes": SEGMENT_BYTES,
                    "segment.ms": 86_400_000,
                    **policy,
                }
            ],
        }
    )
    async with open_pipeline(pipeline_settings, spark) as pipeline:
        return await pipeline.run_cycle()


# -- the proxy -----------------------------------------------------------------------------


@contextlib.contextmanager
def running(proxy: TierproxyServer) -> Iterator[TierproxyServer]:
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def client_throttle_seconds(proxy: TierproxyServer) -> dict[str, float]:
    """``tierproxy_remote_fetch_client_throttle_seconds`` by its ``user`` label."""
    url = f"http://{proxy.host}:{proxy.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tierproxy_remote_fetch_client_throttle_seconds_total{"):
            labels, value = line.rsplit(" ", 1)
            user = labels.split('user="', 1)[1].split('"', 1)[0]
            found[user] = found.get(user, 0.0) + float(value)
    return found


# -- status --------------------------------------------------------------------------------


def status_rows(config: Path, topic: str) -> list[dict[str, Any]]:
    """``tierproxy status --json`` of ``topic`` with the file ``config``, one row a partition."""
    command = ["status", "--json", "--config", str(config), "--topic", topic]
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in result.stdout.splitlines()]


# -- clients -------------------------------------------------------------------------------


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, from a Fetch (Tansu's ListOffsets LATEST may answer
    the last batch's base offset instead)."""

    async def probe() -> dict[int, int]:
        return {p: (await fetch_once(bootstrap, topic, p, 0))[1] for p in range(partitions)}

    return asyncio.run(probe())


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Each partition's (log start, end) as ListOffsets EARLIEST (-2) and LATEST answer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        marks = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            marks[p] = (int(low), int(high))
        return marks
    finally:
        consumer.close()


def earliest_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log start as ListOffsets EARLIEST (-2) answers it."""
    return {p: low for p, (low, _high) in watermarks(bootstrap, topic, partitions).items()}


def offsets_for_times(
    bootstrap: str, topic: str, ends: Mapping[int, int]
) -> dict[int, list[tuple[int, int]]]:
    """The broker's offsetsForTimes answers for timestamps spread over the records' own (and
    for 0 and after the last), per target: ``(partition, offset)`` for every partition."""
    from confluent_kafka import Consumer, TopicPartition

    stamps = sorted(
        {
            t
            for records in _record_timestamps(bootstrap, topic, ends).values()
            for _offset, t in records
        }
    )
    targets = [0, *stamps[:: max(1, len(stamps) // 8)], stamps[-1] + 1]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        return {
            target: [
                (tp.partition, tp.offset)
                for tp in consumer.offsets_for_times(
                    [TopicPartition(topic, p, target) for p in ends], 10
                )
            ]
            for target in targets
        }
    finally:
        consumer.close()


def _record_timestamps(
    bootstrap: str, topic: str, ends: Mapping[int, int]
) -> dict[int, list[tuple[int, int]]]:
    """``(offset, timestamp)`` of every record (READ_UNCOMMITTED), per partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"stamps-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
        }
    )
    stamps: dict[int, list[tuple[int, int]]] = {p: [] for p in ends}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + 60
        while True:
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return stamps
            assert time.monotonic() < deadline, "timestamps not all read"
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            stamps[partition].append((offset, message.timestamp()[1]))
    finally:
        consumer.close()


def consume_confluent(
    bootstrap: str,
    topic: str,
    ends: Mapping[int, int],
    *,
    isolation: str = READ_UNCOMMITTED,
    timeout_s: float = 60,
    extra: Mapping[str, Any] | None = None,
    on_record: Callable[[list[Record]], None] | None = None,
) -> list[Record]:
    """Every record of ``topic`` from the earliest offset up to ``ends`` (exclusive);
    ``on_record`` is called with the records so far after each one (a test's hook to
    break something mid-read)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.queue.backoff.ms": 0,
            "fetch.error.backoff.ms": 100,
            **(extra or {}),
        }
    )
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF or error.retriable(), error
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                records.append((partition, offset, message.key(), message.value()))
                if on_record is not None:
                    on_record(records)
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return records
        raise TimeoutError(f"confluent-kafka read {len(records)} records, not all")
    finally:
        consumer.close()


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    ends: Mapping[int, int],
    *,
    isolation: str = READ_UNCOMMITTED,
    timeout_s: float = 60,
    api_version: tuple[int, int] | None = None,
) -> list[Record]:
    """kafka-python reads ``topic``; ``api_version`` makes it speak an older Kafka's
    protocol versions (Metadata without topic ids, Fetch naming topics)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        api_version=api_version,
    )
    records: list[Record] = []
    try:
        partitions = [TopicPartition(topic, p) for p in ends]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records += [(m.partition, m.offset, m.key, m.value) for m in batch]
            if all(consumer.position(tp) >= ends[tp.partition] for tp in partitions):
                return records
        raise TimeoutError(f"kafka-python read {len(records)} records, not all")
    finally:
        consumer.close()


async def consume_aiokafka(
    bootstrap: str,
    topic: str,
    ends: Mapping[int, int],
    *,
    isolation: str = READ_UNCOMMITTED,
    timeout_s: float = 60,
) -> list[Record]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    records: list[Record] = []
    try:
        partitions = [TopicPartition(topic, p) for p in ends]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        async with asyncio.timeout(timeout_s):
            while True:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    records += [(m.partition, m.offset, m.key, m.value) for m in batch]
                positions = [await consumer.position(tp) for tp in partitions]
                if all(
                    pos >= ends[tp.partition] for tp, pos in zip(partitions, positions, strict=True)
                ):
                    return records
    finally:
        await consumer.stop()


def consume_kcat(
    bootstrap: str, topic: str, *, isolation: str = READ_UNCOMMITTED, timeout_s: float = 60
) -> list[tuple[int, int, int]]:
    """``(partition, offset, value size)`` of every record, read by kcat to the end."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None
    result = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            f"isolation.level={isolation}",
            "-f",
            "%p %o %S\\n",
        ],
        capture_output=True,
        timeout=timeout_s,
        check=True,
    )
    out = []
    for line in result.stdout.decode().splitlines():
        partition, offset, size = line.split()
        out.append((int(partition), int(offset), int(size)))
    return sorted(out)


def by_partition(records: Sequence[Record]) -> list[Record]:
    return sorted(records, key=lambda r: (r[0], r[1]))


async def aborted_offsets(bootstrap: str, topic: str, partitions: int) -> set[tuple[int, int]]:
    """``(partition, offset)`` of every record in an aborted transaction, from the raw log.

    A transaction's data batches end with the producer's next control batch; its type says
    whether they count. This is the truth READ_COMMITTED readers must see, whether or not
    the broker reports aborted transactions itself (Tansu does not).
    """
    aborted: set[tuple[int, int]] = set()
    for partition in range(partitions):
        offset = 0
        open_batches: dict[int, list[int]] = {}
        high_watermark = 1
        while offset < high_watermark:
            _error, high_watermark, records = await fetch_once(bootstrap, topic, partition, offset)
            for position, header in iter_batches(records):
                if header.is_control:
                    kind = read_control_record(records, position, header).type
                    pending = open_batches.pop(header.producer_id, [])
                    if kind == ControlType.ABORT:
                        aborted.update((partition, o) for o in pending)
                elif header.is_transactional:
                    open_batches.setdefault(header.producer_id, []).extend(
                        range(header.base_offset, header.last_offset + 1)
                    )
                offset = header.next_offset
    return aborted


# -- fault injection -----------------------------------------------------------------------


Tap = Callable[[int, bool, bytes], None]
"""Sees every chunk a relay passes on: (connection number, from the target?, bytes)."""


class LatencyRelay:
    """A TCP relay on 127.0.0.1 that delays every chunk the target sends back by ``delay``.

    It runs its own event loop on a thread, so blocking clients and the proxy subprocess can
    both go through it; the delay can change while connections are open. ``target`` may be
    set after the relay is made (its port can be handed to a server before the server is
    up), and ``tap`` sees every chunk, in order per connection and direction.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        delay: float,
        tap: Tap | None = None,
    ) -> None:
        self.delay = delay
        self.target = (target_host, target_port)
        self._tap = tap
        self._numbers = itertools.count()
        """Numbers the relayed connections for the tap."""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._run, name="latency-relay", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        assert self._server is not None
        self.port: int = self._server.sockets[0].getsockname()[1]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            await self._relay(reader, writer)
        finally:
            self._connections.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            return
        connection = next(self._numbers)
        self._writers.add(upstream_writer)

        async def pump(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, back: bool
        ) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    if back and self.delay:
                        await asyncio.sleep(self.delay)
                    if self._tap is not None:
                        self._tap(connection, back, data)
                    sink.write(data)
                    await sink.drain()
            sink.close()

        try:
            await asyncio.gather(
                pump(reader, upstream_writer, False), pump(upstream_reader, writer, True)
            )
        finally:
            self._writers.discard(upstream_writer)
            upstream_writer.close()

    def close(self) -> None:
        """Stop accepting, close every relayed connection, and close the loop."""

        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            if self._connections:
                await asyncio.wait(list(self._connections), timeout=GENEROUS_S / 2)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(GENEROUS_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(GENEROUS_S)
        self._loop.close()


async def fetch_once(
    bootstrap: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 100,
    max_bytes: int = 1 << 20,
) -> tuple[int, int, bytes]:
    """One Fetch v12 (READ_UNCOMMITTED) on a new connection to ``bootstrap``: (error code,
    high watermark, records)."""
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        body = fetch_request(
            12,
            [(topic, partition, offset, max_bytes)],
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
        )
        payload = encode_request_header(ApiKey.FETCH, 12, 1, "tiered-tests") + encode_request(body)
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        answer = await reader.readexactly(size)
    finally:
        writer.close()
    version = response_header_version(ApiKey.FETCH, 12)
    assert version is not None
    _correlation, header_size = parse_response_header(answer, version)
    response = decode_response(ApiKey.FETCH, 12, memoryview(answer)[header_size:])
    part = response.responses[0].partitions[0]
    return int(part.error_code), int(part.high_watermark), bytes(part.records or b"")
