"""Reading windows of a partition into spill files, on the executors (:mod:`.tier_stage`).

:func:`fetch_window` reads one window: its offsets ``[start, end)`` are
read from the partition leader with raw Fetch requests (READ_UNCOMMITTED, bounded by
``tiering.fetch.max.bytes``, paced by the task's share of the copy quota). The window's own
batches are written unchanged to a spill file on the executor's disk, and what the planner
and the chain fold need is returned (:mod:`.scan`).

The reading itself is :func:`read_range`: the leader, its retries, the pace.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import KafkaError
from storage.kafka_client import FetchedPartition, FetchTarget, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.retry import RetryPolicy, call_with_retry
from storage.tiering.chain import ProducerEvent
from storage.tiering.scan import WindowScanner
from storage.tiering.spill import open_spill, prune_spill

__all__ = [
    "BrokerSettings",
    "FetchFailedError",
    "FetchWindow",
    "WindowResult",
    "broker_client",
    "fetch_window",
]

_BROKER_RETRY = RetryPolicy(
    backoff_ms=100, backoff_max_ms=1_000, jitter=0.2, max_attempts=5, deadline_ms=None
)
"""A Kafka consumer's back-off (``retry.backoff.ms`` 100, ``retry.backoff.max.ms`` 1000,
jitter 0.2): a leader election or a broker that returns nothing new is worth a few quick
tries; each request is bounded by the client's own timeout, so no deadline on top."""
_FETCH_MAX_WAIT_MS = 100
"""Windows end below the high watermark, so a fetch only waits when the broker is slow;
Tansu answers nothing at all to a zero wait."""
_RETRIABLE_FETCH_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_OR_FOLLOWER,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.KAFKA_STORAGE_ERROR,
    }
)


class FetchFailedError(Exception):
    """A window or segment could not be read from the broker."""


class _LeaderMovedError(FetchFailedError):
    """A leadership change or a transient broker error: worth asking the leader again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSettings:
    """How tasks reach the broker."""

    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int
    fetch_max_bytes: int
    security: KafkaSecurityConfig
    """With secrets resolved on the driver: executors need neither the file nor the variable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchWindow:
    """One window of one partition, to read into a spill file (:mod:`.tier_stage`)."""

    run_id: str
    window: int
    topic: str
    partition: int
    leader_id: int
    start_offset: int
    end_offset: int
    """Exclusive; at most the partition's last stable offset."""
    owns_straddling_batch: bool
    span_max_bytes: int
    span_max_ms: int
    bytes_per_second: float
    spill_dir: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowResult:
    """What reading one window found: its spill file, spans and producer events."""

    window: int
    spill_path: str
    size: int
    spans: bytes
    """Packed spans (:data:`.scan.SPAN_FIELDS` int64 values each)."""
    events: tuple[ProducerEvent, ...]
    batches: int
    seconds: float
    error: str | None = None

    @classmethod
    def scanned(
        cls, window: int, spill_path: str, scanner: WindowScanner, seconds: float
    ) -> WindowResult:
        """A window read to its end through ``scanner``, its owned bytes in ``spill_path``."""
        spans, events = scanner.finish()
        return cls(
            window=window,
            spill_path=spill_path,
            size=scanner.size,
            spans=spans,
            events=events,
            batches=scanner.batches,
            seconds=seconds,
        )

    @classmethod
    def failed(cls, window: int, error: str) -> WindowResult:
        """A window that could not be read: nothing spilled, why in ``error``."""
        return cls(
            window=window,
            spill_path="",
            size=0,
            spans=b"",
            events=(),
            batches=0,
            seconds=0.0,
            error=error,
        )


def broker_client(broker: BrokerSettings) -> KafkaClient:
    """A client of its own for one task, to be entered with ``async with``."""
    return KafkaClient(
        broker.bootstrap_servers,
        client_id=broker.client_id,
        request_timeout_ms=broker.request_timeout_ms,
        security=broker.security,
    )


class Pace:
    """Keeps a task's reads at or below ``bytes_per_second`` on average (the copy quota)."""

    def __init__(self, bytes_per_second: float) -> None:
        self._rate = bytes_per_second
        self._start = time.monotonic()
        self._bytes = 0

    async def consumed(self, count: int) -> None:
        if self._rate == float("inf") or self._rate <= 0:
            return
        self._bytes += count
        ahead = self._bytes / self._rate - (time.monotonic() - self._start)
        if ahead > 0:
            await asyncio.sleep(ahead)


async def _fetch_from_leader(
    client: KafkaClient,
    *,
    leader_id: int,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
) -> tuple[FetchedPartition, int]:
    """One Fetch; after a leadership error the leader is looked up again.

    :raises FetchFailedError: for a non-retriable error or when retries run out.
    """
    target = FetchTarget(topic=topic, partition=partition, offset=offset, max_bytes=max_bytes)
    attempts = 0

    async def attempt() -> tuple[FetchedPartition, int]:
        nonlocal attempts, leader_id
        attempts += 1
        if attempts > 1:
            leader_id = await _leader_of(client, topic, partition, leader_id)
        answers = await client.fetch(
            leader_id, [target], max_wait_ms=_FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=max_bytes
        )
        answer = next((a for a in answers if a.topic == topic and a.partition == partition), None)
        if answer is None:
            raise _LeaderMovedError(f"Fetch {topic}-{partition}@{offset}: no answer from a leader")
        if answer.error == KafkaError.NONE:
            return answer, leader_id
        if answer.error not in _RETRIABLE_FETCH_ERRORS:
            raise FetchFailedError(f"Fetch {topic}-{partition}@{offset}: {answer.error.name}")
        raise _LeaderMovedError(f"Fetch {topic}-{partition}@{offset}: {answer.error.name}")

    return await call_with_retry(
        attempt,
        policy=_BROKER_RETRY,
        is_retriable=lambda err: isinstance(err, _LeaderMovedError),
    )


async def _leader_of(client: KafkaClient, topic: str, partition: int, known: int) -> int:
    """The partition's leader as Metadata now says, or ``known`` when it names none."""
    metadata = await client.metadata([topic])
    found = metadata.topics.get(topic)
    if found is None:
        return known
    return next((p.leader_id for p in found.partitions if p.partition == partition), known)


async def read_range(
    client: KafkaClient,
    *,
    topic: str,
    partition: int,
    leader_id: int,
    scanner: WindowScanner,
    max_bytes: int,
    pace: Pace,
    sink: Callable[[memoryview], object],
) -> None:
    """Feed ``scanner`` Fetch answers until its window is complete, passing owned bytes on.

    :raises FetchFailedError: when the log ends or shrinks before the window is complete.
    """
    stalled = 0
    while True:
        before = scanner.next_offset
        answer, leader_id = await _fetch_from_leader(
            client,
            leader_id=leader_id,
            topic=topic,
            partition=partition,
            offset=before,
            max_bytes=max_bytes,
        )
        step = scanner.feed(answer.records)
        sink(step.owned)
        await pace.consumed(len(answer.records))
        if step.done:
            return
        if scanner.next_offset > before:
            stalled = 0
            continue
        if answer.high_watermark <= before:
            raise FetchFailedError(
                f"{topic}-{partition} ends at {answer.high_watermark}, before offset {before}"
            )
        stalled += 1
        if stalled > _BROKER_RETRY.max_attempts:
            raise FetchFailedError(f"{topic}-{partition}@{before}: the broker returns no batch")
        await asyncio.sleep(_BROKER_RETRY.backoff_seconds(stalled - 1, random.uniform))


async def _fetch_window(window: FetchWindow, broker: BrokerSettings) -> WindowResult:
    started = time.monotonic()
    path = Path(window.spill_dir) / window.run_id / f"w{window.window:07d}.bin"
    scanner = WindowScanner(
        start=window.start_offset,
        end=window.end_offset,
        owns_straddling_batch=window.owns_straddling_batch,
        span_max_bytes=window.span_max_bytes,
        span_max_ms=window.span_max_ms,
    )
    async with broker_client(broker) as client:
        with open_spill(path) as spill:
            await read_range(
                client,
                topic=window.topic,
                partition=window.partition,
                leader_id=window.leader_id,
                scanner=scanner,
                max_bytes=broker.fetch_max_bytes,
                pace=Pace(window.bytes_per_second),
                sink=spill.write,
            )
    return WindowResult.scanned(window.window, str(path), scanner, time.monotonic() - started)


async def fetch_window(window: FetchWindow, broker: BrokerSettings) -> WindowResult:
    """Read one window into its spill file; a failure is returned, never raised."""
    prune_spill(Path(window.spill_dir), keep=window.run_id)
    try:
        return await _fetch_window(window, broker)
    except Exception as err:
        return WindowResult.failed(window.window, f"{type(err).__name__}: {err}")
