"""Copying: steps 5 and 6 of a cycle (:mod:`.pipeline`), and what they remember.

5. one Spark job (:mod:`.tier_stage`): the driver plans windows of the untiered ranges and
   hands each task whole partitions, with the state after each partition's last remote
   segment; a task reads a partition's windows into spill files, cuts its segments
   (:mod:`.planner`), folds the state each inherits (:mod:`.chain`), and for each segment
   in turn publishes COPY_SEGMENT_STARTED under a fresh segment id, acknowledged by every
   in-sync replica *before* anything of it is uploaded, then builds and uploads it
   (:mod:`.copy_stage`); the task stops a partition at its first failure. The job starts
   only while the pipeline holds its transactional id, and its tasks check that hold and
   the job's deadline before each segment (:mod:`.tier_stage`);
6. the driver waits until its cache holds the tasks' records and publishes
   COPY_SEGMENT_FINISHED for every segment that came back uploaded: each partition's run
   from its remote log end, unbroken, so the remote log never has a hole that later copies
   would skip. A failed segment, and every segment of a task that died or was retried,
   stays STARTED and is deleted next cycle.

Between cycles the driver remembers, per partition, what the last read found of the
untiered tail (so a tail still open is not read again until enough new data can close a
segment) and the state after its last remote segment (so the next copy does not download
that segment's leader-epoch checkpoint and producer snapshot again).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from protocol.indexes import CorruptIndexError
from protocol.indexes.leader_epoch_checkpoint import parse_leader_epoch_checkpoint
from protocol.indexes.producer_snapshot import parse_producer_snapshot
from protocol.metadata_records import MetadataRecord
from storage.log_event import event
from storage.model import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.records import segment_update_record
from storage.rsm.base import RemoteStorageError, RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.chain import ChainState
from storage.tiering.config import TieringConfig
from storage.tiering.copy_stage import CopyJob, CopyResult
from storage.tiering.cycle import (
    EndedJobs,
    MetadataManager,
    ScanMemory,
    TieredPartition,
    first_line,
)
from storage.tiering.fetch_stage import BrokerSettings, FetchWindow
from storage.tiering.lease import Fence
from storage.tiering.planner import (
    estimate_bytes,
    may_close,
    plan_windows,
)
from storage.tiering.report import Failure, Stage, TopicStats, describe_runs
from storage.tiering.stages import StageRunner, UnsettledJobError
from storage.tiering.tier_stage import (
    FETCHES_AT_ONCE,
    MetadataSink,
    PartitionOutcome,
    PartitionWork,
    task_upload_limit,
    tier_partitions,
)
from storage.tiering.worker import StorageFactory

__all__ = ["CopyDriver"]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
_SPANS_PER_SEGMENT = 64
"""Spans are at most 1/64 of ``segment.bytes`` (and 64 KiB): cut precision versus plan size."""
_MAX_SPAN_BYTES = 64 * 1024


class CopyDriver:
    """Plans, runs and publishes the copies of a cycle, remembering scans and chain states.

    :param storage_factory: how tasks build their remote storage manager (default:
        :func:`storage.rsm.factory.create_remote_storage`); the driver uses ``rsm``.
    :param ended: where the start time of each job whose tasks all ended is noted.
    """

    def __init__(
        self,
        *,
        config: TieringConfig,
        storage: RemoteStorageConfig,
        broker: BrokerSettings,
        rlmm: MetadataManager,
        rsm: RemoteStorageManager,
        runner: StageRunner,
        sink: MetadataSink,
        storage_factory: StorageFactory | None,
        fence: Fence,
        ended: EndedJobs,
        clock: Callable[[], int],
    ) -> None:
        self._config = config
        self._fence = fence
        self._ended = ended
        self._sink = sink
        self._storage = storage
        self._broker = broker
        self._rlmm = rlmm
        self._rsm = rsm
        self._runner = runner
        self._storage_factory = storage_factory
        self._clock = clock
        self._scans: dict[TopicIdPartition, ScanMemory] = {}
        self._chains: dict[TopicIdPartition, tuple[uuid.UUID, ChainState]] = {}
        self._final_states: dict[TopicIdPartition, ChainState] = {}

    @property
    def _readers(self) -> int:
        """How many windows may be read from the broker at once, to share the copy quota
        between: every task reads up to ``FETCHES_AT_ONCE`` of them."""
        return self._runner.parallelism * FETCHES_AT_ONCE

    @property
    def _cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    def chain_state(self, tp: TopicIdPartition, tip: RemoteLogSegmentMetadata) -> ChainState | None:
        """The remembered state after ``tip``, if ``tip`` is the segment it was taken after."""
        cached = self._chains.get(tp)
        if cached is not None and cached[0] == tip.segment_id.id:
            return cached[1]
        return None

    async def copy(
        self,
        partitions: list[TieredPartition],
        run_id: str,
        now: int,
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """Fetch, plan, publish COPY_SEGMENT_STARTED, build and upload (one Spark job), and
        publish COPY_SEGMENT_FINISHED for what made it; every failure goes to ``failures``."""
        if not self._plan_windows(partitions, run_id, now):
            return
        owners = {p.tp: p for p in partitions if p.windows}
        works = await self._works(list(owners.values()), now, failures)
        if not works:
            return
        owners = {w.tp: owners[w.tp] for w in works}
        total = sum(self.estimate(p, p.last_stable)[0] for p in owners.values())
        started = time.monotonic()
        results = await self._run_job(works, now, total, failures)
        if results is None:
            return
        jobs: list[CopyJob] = []
        copies: list[CopyResult] = []
        segment_owners: dict[uuid.UUID, TieredPartition] = {}
        for outcome in results:
            p = owners[outcome.tp]
            self._remember(p, outcome, failures)
            for job in outcome.plan.jobs:
                segment_owners[job.metadata.segment_id.id] = p
            jobs += outcome.plan.jobs
            copies += outcome.copies
        windows = sum(len(w.windows) for w in works)
        fetched_bytes = sum(w.size for o in results for w in o.windows)
        announced = sum(c.announced for c in copies)
        uploaded = sum(c.error is None for c in copies)
        task_s = sum(w.seconds for o in results for w in o.windows) + sum(c.seconds for c in copies)
        event(
            log,
            logging.INFO,
            "tiering.copy.uploaded",
            msg=f"fetched {windows} windows ({fetched_bytes} bytes) in "
            f"{time.monotonic() - started:.2f} s (task time {task_s:.2f} s): of {len(jobs)} "
            f"segments cut, {announced} announced (COPY_SEGMENT_STARTED) and {uploaded} uploaded",
            windows=windows,
            segments=len(jobs),
            announced=announced,
            uploaded=uploaded,
        )
        if not jobs:
            return
        started = time.monotonic()
        if copies:
            # The tasks' COPY_SEGMENT_STARTED must be in the cache before FINISHED is checked
            # against it; if it cannot be read, the cycle fails and they stay leftovers.
            await self._rlmm.wait_until_caught_up(self._sink.timeout_ms / 1000)
        sorted_out = _sort_out(jobs, copies, stats, failures)
        await self._finish(sorted_out.finished, segment_owners, sorted_out.broken)
        _log_finished(sorted_out, len(jobs), time.monotonic() - started)

    async def _works(
        self, partitions: list[TieredPartition], now: int, failures: list[Failure]
    ) -> list[PartitionWork]:
        """What the job gets of each partition with windows to read; one whose state after
        its last remote segment cannot be read is left out (a planning failure)."""
        works: list[PartitionWork] = []
        for p in partitions:
            try:
                prior = await self._prior_state(p)
            except (RemoteStorageError, CorruptIndexError) as err:
                failures.append(
                    Failure.of_partition(
                        Stage.PLANNING,
                        p.tp,
                        f"cannot read the state after its last remote segment: {err}",
                    )
                )
                continue
            works.append(
                PartitionWork(
                    tp=p.tp,
                    windows=tuple(p.windows),
                    copy_start=p.copy_start,
                    segment_bytes=p.policy.segment_bytes,
                    segment_ms=p.policy.segment_ms,
                    now_ms=now,
                    leader_epoch=p.leader_epoch,
                    prior=prior,
                )
            )
        return works

    async def _run_job(
        self, works: list[PartitionWork], now: int, total: int, failures: list[Failure]
    ) -> list[PartitionOutcome] | None:
        """The copy job's outcomes (``None``: it failed, said in ``failures`` for each of its
        partitions), started only
        while the pipeline holds its transactional id, with the hold and the deadline its
        tasks check.

        :raises NotHoldingError: the pipeline does not hold its transactional id.
        """
        self._fence.ensure_held()
        sink = replace(
            self._sink,
            holder=self._fence.token,
            deadline_ms=now + self._config.copy_timeout_ms,
        )
        try:
            results: list[PartitionOutcome] = await self._runner.run(
                "copy",
                works,
                functools.partial(
                    tier_partitions,
                    broker=self._broker,
                    sink=sink,
                    storage=task_upload_limit(
                        self._storage,
                        total=self._config.upload_max_bytes_per_second,
                        tasks=self._runner.parallelism,
                    ),
                    storage_factory=self._storage_factory,
                ),
                total_bytes=total,
            )
        except UnsettledJobError as err:
            # Some task may still run: what the job announced waits for its deadline.
            failures += _job_failed(works, err)
            return None
        except Exception as err:
            # Spark gave up on a task (an executor died, say): what its tasks announced stays
            # COPY_SEGMENT_STARTED, and the next cycle deletes it.
            self._ended.ended(now)
            failures += _job_failed(works, err)
            return None
        self._ended.ended(now)
        return results

    def _remember(
        self, p: TieredPartition, outcome: PartitionOutcome, failures: list[Failure]
    ) -> None:
        """Count a failed read or plan and keep what the partition's read found for the next
        cycle."""
        for window, result in zip(p.windows, outcome.windows, strict=True):
            if result.error is not None:
                failures.append(
                    Failure.of_partition(
                        Stage.READ,
                        p.tp,
                        f"offsets {window.start_offset}..{window.end_offset - 1}: {result.error}",
                    )
                )
                break
        if outcome.error is not None:
            failures.append(
                Failure.of_partition(Stage.PLANNING, p.tp, f"cannot cut segments: {outcome.error}")
            )
            return
        plan = outcome.plan
        if plan.scan is not None:
            self._scans[p.tp] = plan.scan
        p.tail = plan.tail
        if plan.final is not None:
            self._final_states[p.tp] = plan.final

    def estimate(self, p: TieredPartition, end: int) -> tuple[int, int | None]:
        """Estimated bytes in ``[copy start, end)`` and the first batch's max timestamp."""
        start = p.copy_start
        memory = self._scans.get(p.tp)
        if memory is not None and memory.start == start and memory.end <= end:
            rest = estimate_bytes(start=memory.end, end=end, bytes_per_offset=p.bytes_per_offset)
            return memory.size + rest, memory.first_max_timestamp
        return estimate_bytes(start=start, end=end, bytes_per_offset=p.bytes_per_offset), (
            p.first_max_timestamp
        )

    def _plan_windows(
        self, partitions: list[TieredPartition], run_id: str, now: int
    ) -> list[FetchWindow]:
        windows: list[FetchWindow] = []
        for p in partitions:
            if p.error is not None or not p.policy.copies or p.copy_start >= p.last_stable:
                continue
            estimated, first_ts = self.estimate(p, p.last_stable)
            if not may_close(
                estimated_bytes=estimated,
                first_max_timestamp=first_ts,
                now_ms=now,
                segment_bytes=p.policy.segment_bytes,
                segment_ms=p.policy.segment_ms,
            ):
                continue
            span_bytes = max(1, min(p.policy.segment_bytes // _SPANS_PER_SEGMENT, _MAX_SPAN_BYTES))
            for start, end in plan_windows(
                start=p.copy_start,
                end=p.last_stable,
                estimated_bytes=estimated,
                max_task_bytes=self._config.task_max_bytes,
            ):
                p.windows.append(
                    FetchWindow(
                        run_id=run_id,
                        window=len(windows) + len(p.windows),
                        topic=p.tp.topic,
                        partition=p.tp.partition,
                        leader_id=p.leader_id,
                        start_offset=start,
                        end_offset=end,
                        owns_straddling_batch=start == p.copy_start,
                        span_max_bytes=span_bytes,
                        span_max_ms=p.policy.segment_ms // _SPANS_PER_SEGMENT,
                        bytes_per_second=0.0,
                        spill_dir=str(self._config.spill_root),
                    )
                )
            windows += p.windows
        if windows:
            share = self._config.copy_max_bytes_per_second / min(len(windows), self._readers)
            paced = [_with_rate(w, share) for w in windows]
            for p in partitions:
                p.windows = [paced[w.window] for w in p.windows]
            return paced
        return windows

    async def _prior_state(self, p: TieredPartition) -> ChainState:
        """The state after the partition's last remote segment (from its files)."""
        if p.remote_end is None or p.copy_start != p.remote_end + 1:
            return ChainState()
        tip = self._cache.segment_for(p.tp, p.remote_end, self._cache.lineage(p.tp))
        if tip is None:
            return ChainState()
        cached = self.chain_state(p.tp, tip)
        if cached is not None:
            return cached
        checkpoint, snapshot = await asyncio.gather(
            self._rsm.fetch_index(tip, IndexType.LEADER_EPOCH),
            self._rsm.fetch_index(tip, IndexType.PRODUCER_SNAPSHOT),
        )
        state = ChainState(
            lineage=parse_leader_epoch_checkpoint(checkpoint),
            producers=parse_producer_snapshot(snapshot),
        )
        self._chains[p.tp] = (tip.segment_id.id, state)
        return state

    async def _finish(
        self,
        finished: Sequence[RemoteLogSegmentMetadata],
        owners: Mapping[uuid.UUID, TieredPartition],
        broken: frozenset[TopicIdPartition],
    ) -> None:
        """Publish COPY_SEGMENT_FINISHED for ``finished``, and carry what the copied
        partitions' reads found over to the next cycle."""
        now = self._clock()
        await self._publish(
            segment_update_record(m, _S.COPY_SEGMENT_FINISHED, now) for m in finished
        )
        last: dict[TopicIdPartition, RemoteLogSegmentMetadata] = {}
        for metadata in finished:
            last[metadata.topic_id_partition] = metadata
        for tp, metadata in last.items():
            owner = owners[metadata.segment_id.id]
            owner.remote_end = metadata.end_offset
            self._scans.pop(tp, None)
            final = self._final_states.pop(tp, None)
            if tp not in broken:
                # All of the partition's segments made it: carry the state and the tail over.
                if final is not None:
                    self._chains[tp] = (metadata.segment_id.id, final)
                if owner.tail is not None:
                    self._scans[tp] = owner.tail
        for tp in broken:
            self._final_states.pop(tp, None)

    async def _publish(self, records: Iterable[MetadataRecord]) -> None:
        await asyncio.gather(*(self._rlmm.publish(r) for r in records))


def _with_rate(window: FetchWindow, rate: float) -> FetchWindow:
    return replace(window, bytes_per_second=rate)


@dataclass(frozen=True, slots=True, kw_only=True)
class _SortedOut:
    """The segments of a copy job, sorted by what becomes of them."""

    finished: tuple[RemoteLogSegmentMetadata, ...]
    """Uploaded, in unbroken runs: COPY_SEGMENT_FINISHED is published for these only."""
    left_started: tuple[RemoteLogSegmentMetadata, ...]
    """Announced and not finished: they stay COPY_SEGMENT_STARTED until a cycle deletes them."""
    unannounced: int
    """Neither announced nor uploaded: copied again by a later cycle."""
    broken: frozenset[TopicIdPartition]
    """Partitions with a segment that was not finished."""


def _sort_out(
    jobs: Sequence[CopyJob],
    outcomes: Sequence[CopyResult],
    stats: dict[str, TopicStats],
    failures: list[Failure],
) -> _SortedOut:
    """Which segments are finished: each partition's uploaded run up to its first
    segment that was not (the remote log never has a hole that later copies would
    skip); the others are counted as lag, their failures go to ``failures``."""
    by_id = {o.segment_id: o for o in outcomes}
    finished: list[RemoteLogSegmentMetadata] = []
    left_started: list[RemoteLogSegmentMetadata] = []
    unannounced = 0
    broken: set[TopicIdPartition] = set()
    for job in jobs:
        metadata = job.metadata
        tp = metadata.topic_id_partition
        outcome = by_id.get(metadata.segment_id.id)
        if outcome is not None and outcome.error is None and tp not in broken:
            finished.append(metadata)
            stats[tp.topic].segments_copied += 1
            stats[tp.topic].bytes_copied += metadata.segment_size_in_bytes
            continue
        broken.add(tp)
        stats[tp.topic].lag_segments += 1
        if outcome is not None and outcome.error is not None:
            stage = Stage.COPY if outcome.announced else Stage.PUBLISH
            failures.append(Failure.of_segment(stage, metadata, outcome.error))
        if outcome is not None and outcome.announced:
            left_started.append(metadata)
        else:
            # Never announced: its task stops a partition at its first failure.
            unannounced += 1
    return _SortedOut(
        finished=tuple(finished),
        left_started=tuple(left_started),
        unannounced=unannounced,
        broken=frozenset(broken),
    )


def _job_failed(works: Sequence[PartitionWork], err: Exception) -> list[Failure]:
    reason = f"the copy job failed: {first_line(err)}"
    return [Failure.of_partition(Stage.COPY, w.tp, reason) for w in works]


def _log_finished(sorted_out: _SortedOut, segments: int, seconds: float) -> None:
    """Say which segments got COPY_SEGMENT_FINISHED, and what becomes of the others."""
    left = len(sorted_out.left_started)
    rest = ""
    if left:
        rest += (
            f"; {left} announced and not uploaded stay COPY_SEGMENT_STARTED and are deleted as "
            "leftovers by the next cycle (by another process once tiering.copy.timeout.ms and "
            "a minute have passed)"
        )
    if sorted_out.unannounced:
        rest += (
            f"; {sorted_out.unannounced} not announced (after a failure in their partition) "
            "are copied by a later cycle"
        )
    fields = {
        "segments": segments,
        "finished": len(sorted_out.finished),
        "left_started": left,
        "not_announced": sorted_out.unannounced,
    }
    if sorted_out.finished:
        event(
            log,
            logging.INFO,
            "tiering.copy.finished_published",
            msg=f"published COPY_SEGMENT_FINISHED for {len(sorted_out.finished)} of {segments} "
            f"segments in {seconds:.2f} s ({describe_runs(sorted_out.finished)}){rest}",
            **fields,
        )
    else:
        event(
            log,
            logging.WARNING,
            "tiering.copy.none_finished",
            msg=f"no COPY_SEGMENT_FINISHED published: none of the {segments} segments was "
            f"uploaded{rest}",
            **fields,
        )
