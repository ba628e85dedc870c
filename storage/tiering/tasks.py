"""The work Spark executors do: fetch windows of a partition, then build and upload segments.

Both stages are plain functions over picklable descriptors, run by ``mapPartitions``; each
Spark task runs its own asyncio loop and opens its own broker connection and remote storage
client, imported inside the task so that nothing heavy is shipped from the driver.

Stage 1, :func:`fetch_windows`: each window ``[start, end)`` of offsets is read from the
partition leader with raw Fetch requests (READ_UNCOMMITTED, bounded by
``tiering.fetch.max.bytes``, paced by the task's share of the copy quota). The window's own
batches are written unchanged to a spill file on the executor's disk, and the task returns
what the planner and the chain fold need (:mod:`.scan`).

Stage 2, :func:`copy_segments`: each planned segment is rebuilt from the spill pieces that
hold it (or fetched again from the broker when they are not on this executor), checked
against its plan, and uploaded under the segment id the driver has already published as
COPY_SEGMENT_STARTED. A failure is returned, never raised, so that one bad segment does not
cost the results of the others; the driver publishes COPY_SEGMENT_FINISHED only for
segments that come back without error.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import random
import shutil
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from protocol.errors import KafkaError
from storage.kafka_client import FetchedPartition, FetchTarget, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.model import RemoteLogSegmentMetadata
from storage.retry import RetryPolicy, call_with_retry
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.segment.builder import SegmentBuilder
from storage.tiering.chain import ChainState, ProducerEvent, metadata_epochs
from storage.tiering.scan import WindowScanner

__all__ = [
    "BrokerSettings",
    "CopyJob",
    "CopyResult",
    "FetchWindow",
    "SpillPiece",
    "StorageFactory",
    "WindowResult",
    "copy_segments",
    "fetch_windows",
    "prune_spill",
]

StorageFactory = Callable[[RemoteStorageConfig], RemoteStorageManager]
T = TypeVar("T")

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
_STALE_SPILL_SECONDS = 6 * 3600


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
    """Stage 1 input: one window of one partition."""

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
    """Stage 1 output for one window."""

    window: int
    spill_path: str
    size: int
    spans: bytes
    """Packed spans (:data:`.scan.SPAN_FIELDS` int64 values each)."""
    events: tuple[ProducerEvent, ...]
    batches: int
    seconds: float
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SpillPiece:
    """Bytes ``[position, position + size)`` of a spill file."""

    path: str
    position: int
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyJob:
    """Stage 2 input: one segment, already published as COPY_SEGMENT_STARTED."""

    metadata: RemoteLogSegmentMetadata
    pieces: tuple[SpillPiece, ...]
    prior: ChainState
    leader_id: int
    bytes_per_second: float = field(default=float("inf"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """Stage 2 output for one segment."""

    segment_id: uuid.UUID
    size: int
    seconds: float
    refetched: bool
    error: str | None = None


class _WorkerRuntime:
    """One event loop per Python worker process, and the storage clients built on it.

    Spark reuses its Python worker processes from task to task. Building an S3 client costs
    about 0.2 s of CPU (botocore loads its service model), so copy tasks share one remote
    storage manager per worker and configuration instead of building one each; that needs
    the event loop it is bound to to outlive the task. Clients are never closed explicitly:
    Spark ends idle workers, and the operating system releases their sockets.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._storage: dict[tuple[object, RemoteStorageConfig], RemoteStorageManager] = {}

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def storage(self, factory: StorageFactory, config: RemoteStorageConfig) -> RemoteStorageManager:
        try:
            key = (factory, config)
            hash(key)
        except TypeError:
            return factory(config)
        if key not in self._storage:
            self._storage[key] = factory(config)
        return self._storage[key]


_runtime: _WorkerRuntime | None = None


def _worker_runtime() -> _WorkerRuntime:
    """This process's runtime (a forked child gets its own)."""
    global _runtime  # noqa: PLW0603 (one runtime per worker process, by design)
    if _runtime is None or _runtime.pid != os.getpid():
        _runtime = _WorkerRuntime()
    return _runtime


class _Pace:
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


async def _read_range(
    client: KafkaClient,
    *,
    topic: str,
    partition: int,
    leader_id: int,
    scanner: WindowScanner,
    max_bytes: int,
    pace: _Pace,
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
    path.parent.mkdir(parents=True, exist_ok=True)
    scanner = WindowScanner(
        start=window.start_offset,
        end=window.end_offset,
        owns_straddling_batch=window.owns_straddling_batch,
        span_max_bytes=window.span_max_bytes,
        span_max_ms=window.span_max_ms,
    )
    async with KafkaClient(
        broker.bootstrap_servers,
        client_id=broker.client_id,
        request_timeout_ms=broker.request_timeout_ms,
        security=broker.security,
    ) as client:
        with path.open("wb") as spill:
            await _read_range(
                client,
                topic=window.topic,
                partition=window.partition,
                leader_id=window.leader_id,
                scanner=scanner,
                max_bytes=broker.fetch_max_bytes,
                pace=_Pace(window.bytes_per_second),
                sink=spill.write,
            )
    spans, events = scanner.finish()
    return WindowResult(
        window=window.window,
        spill_path=str(path),
        size=scanner.size,
        spans=spans,
        events=events,
        batches=scanner.batches,
        seconds=time.monotonic() - started,
    )


def fetch_windows(windows: Iterable[FetchWindow], broker: BrokerSettings) -> Iterator[WindowResult]:
    """Stage 1 (``mapPartitions``): read each window into a spill file; errors are returned."""

    async def run_all() -> list[WindowResult]:
        results = []
        for window in windows:
            prune_spill(Path(window.spill_dir), keep=window.run_id)
            try:
                results.append(await _fetch_window(window, broker))
            except Exception as err:
                results.append(
                    WindowResult(
                        window=window.window,
                        spill_path="",
                        size=0,
                        spans=b"",
                        events=(),
                        batches=0,
                        seconds=0.0,
                        error=f"{type(err).__name__}: {err}",
                    )
                )
        return results

    yield from _worker_runtime().run(run_all())


def prune_spill(root: Path, *, keep: str) -> None:
    """Remove spill directories of earlier cycles that nobody cleaned (a killed driver)."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return
    cutoff = time.time() - _STALE_SPILL_SECONDS
    for entry in entries:
        if entry.name != keep and entry.is_dir() and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry.path, ignore_errors=True)


def _spilled_here(pieces: Iterable[SpillPiece]) -> bool:
    """Whether this executor holds every piece (a copy task may run elsewhere than the fetch)."""
    try:
        return all(os.stat(p.path).st_size >= p.position + p.size for p in pieces)
    except FileNotFoundError:
        return False


def _append_spilled(builder: SegmentBuilder, pieces: Iterable[SpillPiece]) -> None:
    """Feed the pieces to the builder straight from the mapped spill files (no extra copy)."""
    for piece in pieces:
        with (
            open(piece.path, "rb") as spill,
            mmap.mmap(spill.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            memoryview(mapped) as view,
            view[piece.position : piece.position + piece.size] as chunk,
        ):
            builder.append(chunk)


async def _copy_one(job: CopyJob, broker: BrokerSettings, rsm: RemoteStorageManager) -> CopyResult:
    started = time.monotonic()
    metadata = job.metadata
    builder = SegmentBuilder(
        base_offset=metadata.start_offset,
        prior_epochs=job.prior.lineage,
        prior_producers=job.prior.producers,
    )
    refetched = not _spilled_here(job.pieces)
    if refetched:
        scanner = WindowScanner(
            start=metadata.start_offset,
            end=metadata.end_offset + 1,
            owns_straddling_batch=True,
            span_max_bytes=1,
            span_max_ms=0,
        )
        async with KafkaClient(
            broker.bootstrap_servers,
            client_id=broker.client_id,
            request_timeout_ms=broker.request_timeout_ms,
            security=broker.security,
        ) as client:
            await _read_range(
                client,
                topic=metadata.topic_id_partition.topic,
                partition=metadata.topic_id_partition.partition,
                leader_id=job.leader_id,
                scanner=scanner,
                max_bytes=broker.fetch_max_bytes,
                pace=_Pace(job.bytes_per_second),
                sink=builder.append,
            )
    else:
        _append_spilled(builder, job.pieces)
    built = builder.finish()
    planned = (
        metadata.end_offset,
        metadata.segment_size_in_bytes,
        metadata.max_timestamp,
        metadata.segment_leader_epochs,
    )
    got = (
        built.end_offset,
        built.size_in_bytes,
        built.max_timestamp,
        metadata_epochs(built.segment_leader_epochs, built.start_offset),
    )
    if got != planned:
        raise FetchFailedError(f"segment data differs from its plan: planned {planned}, got {got}")
    await rsm.copy_log_segment(metadata, built.data)
    return CopyResult(
        segment_id=metadata.segment_id.id,
        size=built.size_in_bytes,
        seconds=time.monotonic() - started,
        refetched=refetched,
    )


def copy_segments(
    jobs: Iterable[CopyJob],
    broker: BrokerSettings,
    storage: RemoteStorageConfig,
    storage_factory: StorageFactory | None = None,
) -> Iterator[CopyResult]:
    """Stage 2 (``mapPartitions``): build and upload each segment; errors are returned.

    :param storage_factory: builds the remote storage manager inside the task
        (:func:`storage.rsm.factory.create_remote_storage` by default); a seam for other
        storage plugins and for fault injection in tests.
    """
    if storage_factory is None:
        # Imported in the task: the S3 client stack is heavy and not needed by the driver.
        from storage.rsm.factory import create_remote_storage  # noqa: PLC0415

        storage_factory = create_remote_storage
    factory = storage_factory

    runtime = _worker_runtime()
    rsm = runtime.storage(factory, storage)

    async def run_all() -> list[CopyResult]:
        results = []
        for job in jobs:
            try:
                results.append(await _copy_one(job, broker, rsm))
            except Exception as err:
                results.append(
                    CopyResult(
                        segment_id=job.metadata.segment_id.id,
                        size=0,
                        seconds=0.0,
                        refetched=False,
                        error=f"{type(err).__name__}: {err}",
                    )
                )
        return results

    yield from runtime.run(run_all())
