"""The copy of a cycle as one Spark job: each task fetches, plans, announces and uploads.

:func:`tier_partitions` runs under ``mapPartitions``, one item per partition: its windows are
read into spill files (:func:`.fetch_stage.fetch_window`), its segments are cut and their
inherited state folded (:func:`plan_partition`, pure), and then, one segment after the other,
COPY_SEGMENT_STARTED is produced to the metadata topic (``acks=all``, to the partition the
RLMM would choose, so the driver's COPY_SEGMENT_FINISHED follows it in order) and only once
it is acknowledged are the segment's objects written (:func:`.copy_stage.copy_segment`). The
driver publishes COPY_SEGMENT_FINISHED for what comes back.

Why one job instead of a fetch job followed by a copy job: the fetch is CPU-bound (broker,
Python workers and the Spark JVM share the cores) and the upload to a local directory is
disk-bound; in two jobs they would run one after the other, with Spark's fixed cost per job
paid twice. In one job a partition's upload overlaps the next partition's fetch in the same
task, and the other task's (the A/B:
``docs/decisions/0011-spark-workers-tasks-and-reads.md``).

A task that dies or is retried leaves COPY_SEGMENT_STARTED segments with ids nobody will
finish: the next cycle's clean-up deletes them (:mod:`.cleanup`).

Only the pipeline that holds the cluster's transactional id (:mod:`.lease`) may copy, and its
tasks run on executors that Kafka's fence does not reach. So, before each segment, a task
asks the transaction coordinator whether the job's holder still holds it (same producer id
and epoch, :func:`.holding.holds`) and announces nothing once it does not; and every job has
a deadline (``tiering.copy.timeout.ms`` after the cycle's start, which is each STARTED
record's event time): past it a task announces and uploads nothing more, and removes the
objects of a segment whose upload ended after it. A pipeline that takes over leaves another
holder's STARTED copies alone until their deadline has passed (:mod:`.cleanup`), so a
paused or fenced task can neither upload under a copy already cleaned up nor leave objects
behind that nobody would find.

Each Python worker keeps one metadata producer (and its producer id) for all the tasks it
runs (:func:`.worker.worker_runtime`), rather than one InitProducerId per task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from protocol.indexes import CorruptIndexError
from protocol.metadata_records import encode_metadata_record
from protocol.murmur2 import metadata_partition_for
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import KafkaClient
from storage.kafka_client.leaders import TopicAuthorizationError
from storage.kafka_client.producer import RecordWriter, TopicProducer
from storage.kafka_client.transactional import TransactionalProducer
from storage.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.records import segment_record, validate_segment
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.chain import ChainError, ChainState, ProducerEvent, fold_chain, metadata_epochs
from storage.tiering.copy_stage import (
    CopyJob,
    CopyResult,
    SpillPiece,
    copy_segment,
    failed_copy,
    remove_uploaded,
    task_storage,
)
from storage.tiering.cycle import ScanMemory, wall_clock_ms
from storage.tiering.fetch_stage import (
    BrokerSettings,
    FetchWindow,
    WindowResult,
    broker_client,
    fetch_window,
)
from storage.tiering.holding import holds
from storage.tiering.lease import HolderToken
from storage.tiering.planner import BatchSpan, PlannedSegment, cut_segments
from storage.tiering.scan import spans_from_array
from storage.tiering.worker import StorageFactory, worker_runtime

__all__ = [
    "MetadataSink",
    "PartitionOutcome",
    "PartitionPlan",
    "PartitionTask",
    "PartitionWork",
    "plan_partition",
    "task_upload_limit",
    "tier_partitions",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataSink:
    """Where tasks publish COPY_SEGMENT_STARTED: the RLMM's topic, as its producer does."""

    topic: str
    partition_count: int
    timeout_ms: int
    """How long a task waits for the record's acknowledgement before its copy fails."""
    holder: HolderToken | None = None
    """The hold the job was started under, checked before each segment (``None``: the
    pipeline runs unfenced)."""
    deadline_ms: int | None = None
    """Wall-clock milliseconds after which the job's tasks announce and upload nothing
    (``None``: no deadline)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionWork:
    """The input of one item: a partition's windows and what planning its segments needs."""

    tp: TopicIdPartition
    windows: tuple[FetchWindow, ...]
    copy_start: int
    segment_bytes: int
    segment_ms: int
    now_ms: int
    leader_epoch: int
    prior: ChainState
    """The state after the partition's last remote segment (the driver reads it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlan:
    """The segments cut from a partition's windows, and what the driver remembers of them."""

    jobs: tuple[CopyJob, ...]
    scan: ScanMemory | None
    """What the windows read, from the copy start (``None``: nothing)."""
    tail: ScanMemory | None
    """What follows the last segment (``None``: no segment was cut)."""
    final: ChainState | None
    """The state after the last segment."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOutcome:
    """The output of one item."""

    tp: TopicIdPartition
    windows: tuple[WindowResult, ...]
    """Without their spans (the plan holds what the driver needs of them)."""
    plan: PartitionPlan
    copies: tuple[CopyResult, ...]
    """One per job copied, in order; a job without one was never announced."""
    error: str | None = None
    """Why no segment was planned (the windows' own failures are in ``windows``)."""


_PAST_DEADLINE = "the copy job's deadline (tiering.copy.timeout.ms) has passed"

FETCHES_AT_ONCE = 1
"""Partitions a task reads from the broker at once; the others' segments are uploaded
meanwhile. A task reads one partition after the other and uploads each as soon as it is
read, so that its upload (disk) overlaps the next read (CPU); with two reads at once both
tasks would read two partitions in step and then upload them in step."""

_NO_CAP = 2**63 - 1
"""Kafka's Long.MAX_VALUE: a rate setting's "no cap"."""

_NOTHING = PartitionPlan(jobs=(), scan=None, tail=None, final=None)


def plan_partition(work: PartitionWork, results: Sequence[WindowResult]) -> PartitionPlan:
    """Cut segments from the windows read without a gap from the copy start.

    :raises ChainError: the batches break the leader-epoch or producer-state chain.
    """
    spans: list[BatchSpan] = []
    events: list[ProducerEvent] = []
    paths: dict[int, str] = {}
    complete_to = work.copy_start
    for window, result in zip(work.windows, results, strict=True):
        if result.error is not None:
            break
        spans += spans_from_array(window.window, result.spans)
        events += result.events
        paths[window.window] = result.spill_path
        complete_to = window.end_offset
    if not spans:
        return _NOTHING
    scan = ScanMemory(
        start=work.copy_start,
        end=complete_to,
        size=sum(s.size for s in spans),
        first_max_timestamp=spans[0].first_max_timestamp,
    )
    segments = cut_segments(
        spans,
        copy_start=work.copy_start,
        segment_bytes=work.segment_bytes,
        segment_ms=work.segment_ms,
        now_ms=work.now_ms,
    )
    if not segments:
        return PartitionPlan(jobs=(), scan=scan, tail=None, final=None)
    rest = spans[segments[-1].end_span :]
    tail = ScanMemory(
        start=segments[-1].end_offset + 1,
        end=complete_to,
        size=sum(s.size for s in rest),
        first_max_timestamp=rest[0].first_max_timestamp if rest else None,
    )
    chains, final = fold_chain(work.prior, spans, segments, events)
    jobs = tuple(
        CopyJob(
            metadata=RemoteLogSegmentMetadata(
                segment_id=RemoteLogSegmentId.generate(work.tp),
                start_offset=segment.start_offset,
                end_offset=segment.end_offset,
                max_timestamp=segment.max_timestamp,
                leader_epoch=work.leader_epoch,
                event_timestamp=work.now_ms,
                segment_leader_epochs=metadata_epochs(
                    chain.segment_leader_epochs, segment.start_offset
                ),
                segment_size_in_bytes=segment.size,
                state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            ),
            pieces=_pieces(spans, segment, paths),
            prior=chain.prior,
        )
        for segment, chain in zip(segments, chains, strict=True)
    )
    return PartitionPlan(jobs=jobs, scan=scan, tail=tail, final=final)


class HoldCheck(Protocol):
    """Whether the pipeline that started the job still holds its transactional id."""

    async def __call__(self) -> bool: ...


class CoordinatorCheck:
    """Asks the transaction coordinator (DescribeTransactions) whether ``token`` still holds."""

    def __init__(self, client: KafkaClient, sink: MetadataSink) -> None:
        self._token = sink.holder
        self._timeout = sink.timeout_ms / 1000
        self._describer = (
            None
            if sink.holder is None
            else TransactionalProducer(
                client, sink.holder.transactional_id, sink.topic, transaction_timeout_ms=1
            )
        )

    async def __call__(self) -> bool:
        if self._token is None or self._describer is None:
            return True
        try:
            async with asyncio.timeout(self._timeout):
                answer = await self._describer.describe()
        except Exception:
            return False  # cannot tell: announce nothing
        return holds(answer, self._token.producer_id, self._token.epoch)


class PartitionTask:
    """One task's clients: the broker's (fetches and the metadata producer) and the storage.

    :param holds: asked before each segment is announced.
    :param clock: wall-clock milliseconds, against the sink's deadline.
    """

    def __init__(
        self,
        broker: BrokerSettings,
        sink: MetadataSink,
        producer: RecordWriter,
        rsm: RemoteStorageManager,
        *,
        holds: HoldCheck,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._broker = broker
        self._sink = sink
        self._producer = producer
        self._rsm = rsm
        self._holds = holds
        self._clock = clock
        self._fetching = asyncio.Semaphore(FETCHES_AT_ONCE)

    async def tier(self, work: PartitionWork) -> PartitionOutcome:
        async with self._fetching:
            results = [await fetch_window(w, self._broker) for w in work.windows]
        windows = tuple(replace(r, spans=b"") for r in results)  # the plan has them
        try:
            plan = plan_partition(work, results)
        except (ChainError, CorruptIndexError) as err:
            return PartitionOutcome(
                tp=work.tp, windows=windows, plan=_NOTHING, copies=(), error=str(err)
            )
        copies = await self.copy_in_order(plan.jobs)
        return PartitionOutcome(tp=work.tp, windows=windows, plan=plan, copies=copies)

    async def copy_in_order(self, jobs: Sequence[CopyJob]) -> tuple[CopyResult, ...]:
        """Announce and upload a partition's segments one after the other, up to the first
        failure: the driver finishes only an unbroken run from the remote log end, so what
        follows a failure is neither announced nor uploaded. Once the job's deadline has
        passed the rest is left unannounced, without a result: it is copied next cycle."""
        copies: list[CopyResult] = []
        for job in jobs:
            if self._past_deadline():
                break
            copies.append(await self._announce_and_copy(job))
            if copies[-1].error is not None:
                break
        return tuple(copies)

    def _past_deadline(self) -> bool:
        deadline = self._sink.deadline_ms
        return deadline is not None and self._clock() >= deadline

    async def _announce_and_copy(self, job: CopyJob) -> CopyResult:
        metadata = job.metadata
        tp = metadata.topic_id_partition
        partition = metadata_partition_for(f"{tp.topic}-{tp.partition}", self._sink.partition_count)
        if not await self._holds():
            return failed_copy(
                job,
                "not announced: the pipeline no longer holds its transactional id",
                announced=False,
            )
        try:
            validate_segment(metadata)
            record = encode_metadata_record(segment_record(metadata))
            async with asyncio.timeout(self._sink.timeout_ms / 1000):
                await self._producer.send(partition, record)  # returns once acks=all holds
        except TopicAuthorizationError as err:
            why = denied(err.request, err.topic, principal_of(self._broker.security))
            return failed_copy(job, f"COPY_SEGMENT_STARTED not published: {why}", announced=False)
        except Exception as err:
            return failed_copy(
                job,
                f"COPY_SEGMENT_STARTED not published: {type(err).__name__}: {err}",
                announced=False,
            )
        if self._past_deadline():
            return failed_copy(job, f"announced, not uploaded: {_PAST_DEADLINE}")
        copied = await copy_segment(job, self._rsm)
        if copied.error is None and self._past_deadline():
            # Another holder may already have cleaned this copy up: leave nothing behind.
            await remove_uploaded(job, self._rsm)
            return failed_copy(job, f"uploaded, then removed: {_PAST_DEADLINE}")
        return copied


def task_upload_limit(
    storage: RemoteStorageConfig, *, total: int, tasks: int
) -> RemoteStorageConfig:
    """``storage`` with each task's upload rate limit: its own
    (``remote.log.storage.upload.rate.limit.bytes.per.second``, 0 for none) or its share of
    the cycle's ``total`` (``tiering.upload.max.bytes.per.second``; Long.MAX_VALUE for
    none) among the ``tasks`` that run at once, whichever is lower."""
    if total >= _NO_CAP:
        return storage
    share = max(1, total // max(tasks, 1))
    own = storage.upload_rate_bytes_per_second
    return replace(storage, upload_rate_bytes_per_second=share if own == 0 else min(own, share))


def tier_partitions(
    works: Iterable[PartitionWork],
    broker: BrokerSettings,
    sink: MetadataSink,
    storage: RemoteStorageConfig,
    storage_factory: StorageFactory | None = None,
) -> Iterator[PartitionOutcome]:
    """The job (``mapPartitions``): fetch, plan, announce and copy each partition's segments."""
    runtime = worker_runtime()
    rsm = task_storage(storage, storage_factory)
    client, producer = runtime.shared(
        ("metadata producer", broker, sink.topic), lambda: _metadata_producer(broker, sink.topic)
    )

    async def run() -> list[PartitionOutcome]:
        task = PartitionTask(broker, sink, producer, rsm, holds=CoordinatorCheck(client, sink))
        return list(await asyncio.gather(*(task.tier(w) for w in works)))

    yield from runtime.run(run())


def _metadata_producer(broker: BrokerSettings, topic: str) -> tuple[KafkaClient, TopicProducer]:
    """The worker's client and idempotent producer of the metadata topic (kept across tasks)."""
    client = broker_client(broker)
    return client, TopicProducer(client, topic, request_timeout_ms=broker.request_timeout_ms)


def _pieces(
    spans: Sequence[BatchSpan], segment: PlannedSegment, paths: Mapping[int, str]
) -> tuple[SpillPiece, ...]:
    pieces: list[SpillPiece] = []
    for span in spans[segment.first_span : segment.end_span]:
        last = pieces[-1] if pieces else None
        path = paths[span.window]
        if last is not None and last.path == path and last.position + last.size == span.position:
            pieces[-1] = SpillPiece(path=path, position=last.position, size=last.size + span.size)
        else:
            pieces.append(SpillPiece(path=path, position=span.position, size=span.size))
    return tuple(pieces)
