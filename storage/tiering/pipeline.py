"""The driver of the tiering pipeline: one cycle of KIP-405's RLM leader task, for a broker
that knows nothing about tiering.

A cycle (:meth:`TieringPipeline.run_cycle`):

1. reads the cluster's topics and each topic's policy (:mod:`.policy`); compacted topics, and
   topics whose broker configs contradict the file (a ``retention.ms`` below the file's
   ``local.retention.ms``, say), are skipped and reported once, with the reason;
2. finishes partitions of topics deleted at the broker (KIP-405 "Topic deletion lifecycle":
   DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, every segment deleted,
   DELETE_PARTITION_FINISHED; each step checks the metadata first, so a crash anywhere is
   resumed by the next cycle), and deletes the remote data of topics whose tiering was
   disabled with ``remote.log.delete.on.disable`` (KIP-950);
3. deletes leftovers: copies stuck in COPY_SEGMENT_STARTED (a task failed or was killed) or
   DELETE_SEGMENT_STARTED, and copies no read can reach;
4. asks each tiered partition's leader, in one Fetch per broker, for its log start, high
   watermark, last stable offset and a sample of the data to be copied, and skips partitions
   where nothing can have closed yet (:func:`.planner.may_close`);
5. stage 1 on Spark: fetch tasks read windows of the remaining ranges into spill files and
   report their batch spans (:mod:`.tasks`); the driver cuts segments (:mod:`.planner`),
   folds the state each segment inherits (:mod:`.chain`), gives each a fresh segment id and
   publishes COPY_SEGMENT_STARTED for all of them *before* anything is uploaded;
6. stage 2 on Spark: copy tasks build and upload the segments; the driver publishes
   COPY_SEGMENT_FINISHED for each partition's unbroken run of successes from its remote log
   end (a success after a failure stays STARTED and is deleted next cycle, so the remote log
   never has a hole that later copies would skip);
7. local retention: where the broker supports DeleteRecords (Apache Kafka), its log start is
   moved to the end of the tiered, locally expired data, never further, and never past the
   first offset of a transaction still open at the remote log end (READ_COMMITTED reads of it
   stay with the broker, which knows how it ends). Other brokers (Tansu) are reported once
   per topic and keep their data;
8. remote retention (:mod:`.retention`): expired segments get DELETE_SEGMENT_STARTED, their
   objects are deleted, then DELETE_SEGMENT_FINISHED. While the broker still holds the
   offsets of the newest remote segment (it cannot delete records), that segment is kept: it
   records how far the partition is tiered, and without it the next cycle would copy the
   whole log again.

Only one pipeline may run against a cluster at a time: a cycle treats every unfinished copy it
did not start itself as a leftover.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from protocol.errors import KafkaError
from protocol.indexes import CorruptIndexError
from protocol.indexes.leader_epoch_checkpoint import (
    epoch_for_offset,
    parse_leader_epoch_checkpoint,
)
from protocol.indexes.producer_snapshot import parse_producer_snapshot
from protocol.metadata_records import (
    MetadataRecord,
)
from storage.config import ConfigError
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import NO_TOPIC_ID, ClusterMetadata, KafkaClient, TopicMetadata
from storage.kafka_security import KafkaSecurityConfig
from storage.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.records import (
    log_start_record,
    partition_delete_record,
    segment_record,
    segment_update_record,
)
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.chain import (
    ChainError,
    ChainState,
    ProducerEvent,
    fold_chain,
    metadata_epochs,
)
from storage.tiering.config import TieringConfig
from storage.tiering.copy_stage import CopyJob, CopyResult, SpillPiece, copy_segments
from storage.tiering.fetch_stage import BrokerSettings, FetchWindow, WindowResult, fetch_windows
from storage.tiering.planner import (
    BatchSpan,
    PlannedSegment,
    cut_segments,
    estimate_bytes,
    may_close,
    plan_windows,
)
from storage.tiering.policy import (
    BrokerConfigValue,
    TopicPolicy,
    TopicRules,
    refusal_reason,
    resolve_policy,
)
from storage.tiering.report import CycleReport, TopicStats
from storage.tiering.retention import expired_segments, local_log_start_target
from storage.tiering.sampling import sample_partitions
from storage.tiering.scan import spans_from_array
from storage.tiering.stages import StageRunner
from storage.tiering.worker import StorageFactory

__all__ = ["MetadataManager", "TieringPipeline", "wall_clock_ms"]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
_P = RemotePartitionDeleteState
_SAMPLE_BYTES = 16 * 1024
"""Bytes of each partition's not-yet-tiered data read by the driver to estimate its size and
age; enough for several batches of a busy producer, small enough for thousands of partitions
in one Fetch."""
_DEFAULT_BYTES_PER_OFFSET = 1024.0
_RATIO_SEGMENTS = 4
"""Recent remote segments whose average size per offset estimates the partition's."""
_SPANS_PER_SEGMENT = 64
"""Spans are at most 1/64 of ``segment.bytes`` (and 64 KiB): cut precision versus plan size."""
_MAX_SPAN_BYTES = 64 * 1024
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: what record timestamps are compared with."""
    return int(time.time() * 1000)


class MetadataManager(Protocol):
    """The parts of the topic-based RLMM the pipeline uses."""

    @property
    def cache(self) -> RemoteLogMetadataCache: ...

    async def publish(self, record: MetadataRecord) -> None:
        """Publish and return once the record is in :attr:`cache`."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class _ScanMemory:
    """What the last read of a partition found, so a partition whose tail is still open is
    not read again until enough new data can close a segment."""

    start: int
    end: int
    size: int
    first_max_timestamp: int | None


@dataclass(slots=True, kw_only=True)
class _Partition:
    """A tiered partition as the driver sees it in this cycle."""

    tp: TopicIdPartition
    policy: TopicPolicy
    leader_id: int
    leader_epoch: int
    remote_end: int | None
    log_start: int = -1
    high_watermark: int = -1
    last_stable: int = -1
    first_max_timestamp: int | None = None
    bytes_per_offset: float = _DEFAULT_BYTES_PER_OFFSET
    windows: list[FetchWindow] = field(default_factory=list)
    tail: _ScanMemory | None = None
    """What stays untiered once this cycle's segments are copied."""
    error: str | None = None

    @property
    def copy_start(self) -> int:
        if self.remote_end is None:
            return self.log_start
        return max(self.remote_end + 1, self.log_start)


class TieringPipeline:
    """Runs tiering cycles with one broker client, one RLMM and one remote storage manager.

    :param storage_factory: how tasks build their remote storage manager (default:
        :func:`storage.rsm.factory.create_remote_storage`); the driver uses ``rsm``.
    :param clock: milliseconds since the epoch (retention and ``segment.ms`` use it).
    """

    def __init__(
        self,
        *,
        config: TieringConfig,
        rules: TopicRules,
        storage: RemoteStorageConfig,
        client: KafkaClient,
        rlmm: MetadataManager,
        rsm: RemoteStorageManager,
        runner: StageRunner,
        metadata_topic: str,
        security: KafkaSecurityConfig | None = None,
        storage_factory: StorageFactory | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._config = config
        self._rules = rules
        self._storage = storage
        self._client = client
        self._rlmm = rlmm
        self._rsm = rsm
        self._runner = runner
        self._metadata_topic = metadata_topic
        self._storage_factory = storage_factory
        self._clock = clock
        self._broker = BrokerSettings(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            fetch_max_bytes=config.fetch_max_bytes,
            security=security or KafkaSecurityConfig(),
        )
        self._principal = principal_of(self._broker.security)
        self._denied: dict[str, None] = {}
        """This cycle's authorisation refusals, each naming the missing ACL (in order)."""
        self._reported: set[tuple[str, str]] = set()
        self._scans: dict[TopicIdPartition, _ScanMemory] = {}
        self._chains: dict[TopicIdPartition, tuple[uuid.UUID, ChainState]] = {}
        self._final_states: dict[TopicIdPartition, ChainState] = {}
        self._samples: dict[TopicIdPartition, tuple[int, int | None, float]] = {}
        """Per partition: the offset sampled, its batch's max timestamp, bytes per offset."""
        self._gaps_found: list[tuple[TopicIdPartition, int, str]] = []
        self._broker_retention: dict[str, tuple[int, int]] = {}
        """Per topic: the broker's own retention.ms and retention.bytes for its local log."""

    @property
    def cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    async def supports_delete_records(self) -> bool:
        """Whether the broker may be sent DeleteRecords (configured or detected kind)."""
        kind = self._config.broker_kind
        if kind == "auto":
            kind = await self._client.detect_broker_kind()
        return kind == "kafka"

    # -- the cycle ----------------------------------------------------------------------

    async def run_cycle(self) -> CycleReport:
        """Run one cycle; problems with single partitions are reported, not raised.

        :raises BrokerConnectionError: when the broker cannot be reached at all.
        """
        started = time.monotonic()
        now = self._clock()
        stats: dict[str, TopicStats] = {}
        errors: list[str] = []
        metadata = await self._client.metadata(None)
        topics = {
            name: topic
            for name, topic in metadata.topics.items()
            if topic.error == KafkaError.NONE and not self._is_internal(topic)
        }
        policies = await self._policies(topics, stats)
        await self._finish_deleted_topics(metadata, stats, errors)
        await self._delete_disabled(topics, policies, stats, errors)
        await self._delete_leftovers(topics, stats, errors)
        partitions = await self._partition_states(topics, policies, stats)
        errors.extend(self._denied)
        self._denied.clear()
        copy_started = time.monotonic()
        run_id = f"{now}-{uuid.uuid4().hex[:8]}"
        try:
            await self._copy(partitions, run_id, now, stats, errors)
        finally:
            shutil.rmtree(self._config.spill_root / run_id, ignore_errors=True)
            if not self._config.spill_dir:  # the default under the system temp directory
                with contextlib.suppress(OSError):  # not empty: another run is using it
                    self._config.spill_root.rmdir()
        copy_seconds = time.monotonic() - copy_started
        # Local retention first: it moves the broker's log start over data that remote
        # retention may then delete, so that the broker never keeps what the remote tier
        # forgot (the next cycle would copy it again).
        await self._local_retention(partitions, now, stats, errors)
        await self._remote_retention(partitions, now, stats, errors)
        self._record_lag(partitions, now, stats)
        return CycleReport(
            started_ms=now,
            seconds=time.monotonic() - started,
            copy_seconds=copy_seconds,
            topics=stats,
            errors=tuple(errors),
        )

    def _is_internal(self, topic: TopicMetadata) -> bool:
        return (
            topic.is_internal
            or topic.name == self._metadata_topic
            or topic.name in _INTERNAL_TOPICS
        )

    def _report_once(self, topic: str, message: str, stats: TopicStats) -> None:
        if (topic, message) not in self._reported:
            self._reported.add((topic, message))
            stats.notes.append(message)

    async def _policies(
        self, topics: Mapping[str, TopicMetadata], stats: dict[str, TopicStats]
    ) -> dict[str, TopicPolicy]:
        broker_configs = await self._client.describe_configs(sorted(topics))
        policies = {}
        for name in sorted(topics):
            configs = broker_configs.get(name)
            if (
                configs == KafkaError.TOPIC_AUTHORIZATION_FAILED
                and self._rules.matching(name) is not None
            ):
                # Only topics the file means to tier need their configs; the principal may
                # see other topics (DESCRIBE) without the right to read their configs.
                self._denied[denied("DescribeConfigs", name, self._principal)] = None
            broker = (
                {
                    key: BrokerConfigValue(value=e.value, is_topic_override=e.is_topic_override)
                    for key, e in configs.items()
                }
                if isinstance(configs, dict)
                else None
            )
            try:
                policy = resolve_policy(name, self._rules, broker)
            except ConfigError as err:
                # One topic's broker configs contradicting the file must not stop the others.
                self._report_once(
                    name,
                    f"not tiered: its settings are invalid ({err}); fix the config file or "
                    "the topic's configs at the broker",
                    stats.setdefault(name, TopicStats()),
                )
                continue
            reason = refusal_reason(name, policy)
            if reason is not None:
                self._report_once(name, reason, stats.setdefault(name, TopicStats()))
                continue
            policies[name] = policy
            self._broker_retention[name] = (
                _broker_int(broker, "retention.ms"),
                _broker_int(broker, "retention.bytes"),
            )
        return policies

    # -- deleted topics, disabled topics, leftovers ---------------------------------------

    async def _publish(self, records: Iterable[MetadataRecord]) -> None:
        await asyncio.gather(*(self._rlmm.publish(r) for r in records))

    async def _delete_segment(self, metadata: RemoteLogSegmentMetadata, now: int) -> None:
        """DELETE_SEGMENT_STARTED, delete the objects, DELETE_SEGMENT_FINISHED (resumable)."""
        if self.cache.segment_state(metadata.segment_id) != _S.DELETE_SEGMENT_STARTED:
            await self._rlmm.publish(
                segment_update_record(metadata, _S.DELETE_SEGMENT_STARTED, now)
            )
        try:
            await self._rsm.delete_log_segment(metadata)
        except RemoteResourceNotFoundError:
            log.debug("segment %s had no objects left", metadata.segment_id.id)
        await self._rlmm.publish(segment_update_record(metadata, _S.DELETE_SEGMENT_FINISHED, now))

    async def _delete_segments(
        self,
        segments: Sequence[RemoteLogSegmentMetadata],
        now: int,
        errors: list[str],
    ) -> int:
        """Delete ``segments`` concurrently; the number deleted (failures go to ``errors``)."""
        outcomes = await asyncio.gather(
            *(self._delete_segment(s, now) for s in segments), return_exceptions=True
        )
        deleted = 0
        for segment, outcome in zip(segments, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                errors.append(
                    f"deleting segment {segment.segment_id.id} of {segment.topic_id_partition}: "
                    f"{outcome}"
                )
            else:
                deleted += 1
        return deleted

    async def _finish_deleted_topics(
        self, metadata: ClusterMetadata, stats: dict[str, TopicStats], errors: list[str]
    ) -> None:
        live_ids = {t.topic_id for t in metadata.topics.values() if t.topic_id != NO_TOPIC_ID}
        candidates = [
            tp
            for tp in self.cache.partitions()
            if tp.topic_id not in live_ids
            and not (
                tp.topic in metadata.topics and metadata.topics[tp.topic].topic_id == NO_TOPIC_ID
            )
        ]
        if not candidates:
            return
        # Ask once more for exactly these names: a topic is only gone if the broker says so.
        confirmed = await self._client.metadata(sorted({tp.topic for tp in candidates}))
        for tp in candidates:
            found = confirmed.topics.get(tp.topic)
            if (
                found is not None
                and found.error == KafkaError.NONE
                and found.topic_id == tp.topic_id
            ):
                continue
            try:
                await self._delete_partition(tp, stats.setdefault(tp.topic, TopicStats()), errors)
            except Exception as err:
                errors.append(f"deleting the remote data of deleted partition {tp}: {err}")

    async def _delete_partition(
        self, tp: TopicIdPartition, stats: TopicStats, errors: list[str]
    ) -> None:
        now = self._clock()
        status = self.cache.delete_status(tp)
        if status is None:
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_MARKED, now))
            status = self.cache.delete_status(tp)
        if status is None or status.state == _P.DELETE_PARTITION_MARKED:
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_STARTED, now))
        segments = self.cache.segments(tp)
        deleted = await self._delete_segments(segments, now, errors)
        stats.leftovers_deleted += deleted
        if deleted == len(segments):
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_FINISHED, now))
            self._report_once(
                tp.topic,
                f"partition {tp.partition} (topic id {tp.topic_id}) was deleted at the broker; "
                "its remote data is gone too",
                stats,
            )

    async def _delete_disabled(
        self,
        topics: Mapping[str, TopicMetadata],
        policies: Mapping[str, TopicPolicy],
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        now = self._clock()
        for name, policy in policies.items():
            if not policy.deletes_remote_data:
                continue
            topic = topics[name]
            segments = [
                s for p in topic.partitions for s in self.cache.segments(_tp(topic, p.partition))
            ]
            if segments:
                deleted = await self._delete_segments(segments, now, errors)
                stats.setdefault(name, TopicStats()).segments_expired += deleted

    async def _delete_leftovers(
        self,
        topics: Mapping[str, TopicMetadata],
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        now = self._clock()
        for name, topic in topics.items():
            leftovers = [
                s
                for p in topic.partitions
                for s in self.cache.unreferenced_segments(_tp(topic, p.partition))
            ]
            if leftovers:
                deleted = await self._delete_segments(leftovers, now, errors)
                stats.setdefault(name, TopicStats()).leftovers_deleted += deleted

    # -- where each partition stands ------------------------------------------------------

    async def _partition_states(
        self,
        topics: Mapping[str, TopicMetadata],
        policies: Mapping[str, TopicPolicy],
        stats: dict[str, TopicStats],
    ) -> list[_Partition]:
        partitions = []
        for name, policy in sorted(policies.items()):
            if not policy.remote_storage_enable:
                continue
            topic = topics[name]
            topic_stats = stats.setdefault(name, TopicStats())
            for p in topic.partitions:
                if p.error != KafkaError.NONE or p.leader_id < 0:
                    self._report_once(
                        name, f"partition {p.partition} has no leader ({p.error.name})", topic_stats
                    )
                    continue
                tp = _tp(topic, p.partition)
                topic_stats.partitions += 1
                partitions.append(
                    _Partition(
                        tp=tp,
                        policy=policy,
                        leader_id=p.leader_id,
                        leader_epoch=max(p.leader_epoch, 0),
                        remote_end=self.cache.remote_log_end_offset(tp),
                    )
                )
        by_leader: dict[int, list[_Partition]] = {}
        for partition in partitions:
            by_leader.setdefault(partition.leader_id, []).append(partition)
        await asyncio.gather(*(self._sample(leader, group) for leader, group in by_leader.items()))
        return partitions

    async def _sample(self, leader_id: int, partitions: list[_Partition]) -> None:
        """Log start, high watermark, LSO and a sample of the untiered data, per partition.

        What the sample tells (the first untiered batch's age, bytes per offset) only changes
        when the remote log end moves, so it is remembered per partition and its start.
        """
        offsets = {
            (p.tp.topic, p.tp.partition): p.remote_end + 1 if p.remote_end is not None else 0
            for p in partitions
        }
        known = {
            (p.tp.topic, p.tp.partition)
            for p in partitions
            if (k := self._samples.get(p.tp)) is not None
            and k[0] == offsets[(p.tp.topic, p.tp.partition)]
        }
        boundaries = {
            (p.tp.topic, p.tp.partition): p.remote_end
            for p in partitions
            if p.remote_end is not None
        }
        samples = await sample_partitions(
            self._client,
            leader_id,
            offsets,
            sample_bytes=_SAMPLE_BYTES,
            offsets_only=known,
            boundaries=boundaries,
        )
        for p in partitions:
            key = (p.tp.topic, p.tp.partition)
            sample = samples[key]
            if sample.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                p.error = denied("Fetch", p.tp.topic, self._principal)
                self._denied[p.error] = None
                continue
            if sample.error != KafkaError.NONE:
                p.error = f"Fetch: {sample.error.name}"
                continue
            if p.remote_end is not None and sample.boundary_epoch is not None:
                tiered_epoch = epoch_for_offset(self.cache.lineage(p.tp), p.remote_end)
                if 0 <= sample.boundary_epoch != tiered_epoch and tiered_epoch is not None:
                    # KIP-405 "Follower to leader transition": the broker's log no longer
                    # holds what was tiered at the remote log end (an unclean election
                    # truncated it). Copying on, or moving the log start, could lose or mix
                    # data, so the partition waits for an operator.
                    p.error = (
                        f"the broker's offset {p.remote_end} was written in leader epoch "
                        f"{sample.boundary_epoch}, the remote copy in {tiered_epoch}: the logs "
                        "diverged; not copying this partition"
                    )
                    continue
            p.log_start = sample.log_start
            p.high_watermark = sample.high_watermark
            p.last_stable = sample.last_stable
            await self._follow_log_start(p)
            first_ts, ratio = sample.first_max_timestamp, sample.bytes_per_offset
            if key in known:
                _, first_ts, ratio = self._samples[p.tp]
            elif ratio is not None:
                self._samples[p.tp] = (offsets[key], first_ts, ratio)
            p.first_max_timestamp = first_ts
            p.bytes_per_offset = self._remote_ratio(p.tp) or ratio or _DEFAULT_BYTES_PER_OFFSET

    async def _follow_log_start(self, p: _Partition) -> None:
        """When the broker's log starts past the remote log end + 1 (it deleted records
        that were never tiered: its own retention ran ahead of tiering, or an operator's
        DeleteRecords), the whole log starts there, as in Kafka, whose earliest offset is
        the first it can serve contiguously: a RemoteLogStartOffsetRecord makes every proxy
        stop serving below it, and the next cycle deletes the segments wholly below it.

        A start that moves inside the tiered range is left alone: the pipeline's own
        DeleteRecords and the broker's own local retention do that to tiered data, which
        the remote tier keeps serving. An operator's DeleteRecords into the tiered range is
        seen only when it goes through the proxy (see ``proxy.interceptors.delete_records``).
        """
        if p.remote_end is None or p.log_start <= p.remote_end + 1:
            return
        if p.log_start <= self.cache.log_start_offset(p.tp):
            return
        self._check_gap(p)
        await self._rlmm.publish(log_start_record(p.tp, p.log_start, self._clock()))

    def _check_gap(self, p: _Partition) -> None:
        """Say so when the broker deleted data that was never tiered (its log start is past
        the remote log end + 1): copying resumes at its log start, so the remote log gets a
        hole, and the proxy serves nothing below it."""
        assert p.remote_end is not None  # checked by the caller
        missing = p.log_start - (p.remote_end + 1)
        message = (
            f"partition {p.tp.partition}: the broker deleted offsets {p.remote_end + 1}-"
            f"{p.log_start - 1} ({missing} records) before they were tiered (its retention "
            "ran ahead of tiering, or a DeleteRecords); the whole log now starts at "
            f"{p.log_start}: the remote segments below are deleted"
        )
        key = (p.tp.topic, message)
        if key not in self._reported:
            self._reported.add(key)
            self._gaps_found.append((p.tp, missing, message))

    def _remote_ratio(self, tp: TopicIdPartition) -> float | None:
        recent = self.cache.segments(tp, {_S.COPY_SEGMENT_FINISHED})[-_RATIO_SEGMENTS:]
        offsets = sum(s.end_offset - s.start_offset + 1 for s in recent)
        return sum(s.segment_size_in_bytes for s in recent) / offsets if offsets else None

    def _estimate(self, p: _Partition, end: int) -> tuple[int, int | None]:
        """Estimated bytes in ``[copy start, end)`` and the first batch's max timestamp."""
        start = p.copy_start
        memory = self._scans.get(p.tp)
        if memory is not None and memory.start == start and memory.end <= end:
            rest = estimate_bytes(start=memory.end, end=end, bytes_per_offset=p.bytes_per_offset)
            return memory.size + rest, memory.first_max_timestamp
        return estimate_bytes(start=start, end=end, bytes_per_offset=p.bytes_per_offset), (
            p.first_max_timestamp
        )

    # -- copying ----------------------------------------------------------------------------

    async def _copy(
        self,
        partitions: list[_Partition],
        run_id: str,
        now: int,
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        windows = self._plan_windows(partitions, run_id, now)
        if not windows:
            return
        total = sum(self._estimate(p, p.last_stable)[0] for p in partitions if p.windows)
        started = time.monotonic()
        try:
            results: list[WindowResult] = await self._runner.run(
                "fetch",
                windows,
                functools.partial(fetch_windows, broker=self._broker),
                total_bytes=total,
            )
        except Exception as err:
            # Spark gave up on a task (an executor died, say): nothing was published yet.
            errors.append(f"the fetch stage failed: {_first_line(err)}")
            return
        log.info(
            "fetched %d windows (%d bytes) in %.2f s (task time %.2f s)",
            len(windows),
            sum(r.size for r in results),
            time.monotonic() - started,
            sum(r.seconds for r in results),
        )
        by_window = {r.window: r for r in results}
        jobs: list[CopyJob] = []
        owners: dict[uuid.UUID, _Partition] = {}
        for p in partitions:
            if not p.windows:
                continue
            topic_stats = stats[p.tp.topic]
            try:
                planned = await self._plan_segments(p, by_window, now, topic_stats)
            except (ChainError, RemoteStorageError, CorruptIndexError) as err:
                errors.append(f"{p.tp}: cannot plan segments: {err}")
                continue
            for job in planned:
                owners[job.metadata.segment_id.id] = p
            jobs += planned
        if not jobs:
            return
        started = time.monotonic()
        await self._publish(segment_record(job.metadata) for job in jobs)
        log.info(
            "published %d COPY_SEGMENT_STARTED in %.2f s", len(jobs), time.monotonic() - started
        )
        started = time.monotonic()
        try:
            outcomes: list[CopyResult] = await self._runner.run(
                "copy",
                jobs,
                functools.partial(
                    copy_segments,
                    broker=self._broker,
                    storage=self._storage,
                    storage_factory=self._storage_factory,
                ),
                total_bytes=sum(j.metadata.segment_size_in_bytes for j in jobs),
            )
        except Exception as err:
            # Every copy stays COPY_SEGMENT_STARTED; the next cycle deletes them and retries.
            errors.append(f"the copy stage failed: {_first_line(err)}")
            outcomes = []
        log.info(
            "built and uploaded %d segments in %.2f s (task time %.2f s)",
            len(jobs),
            time.monotonic() - started,
            sum(o.seconds for o in outcomes),
        )
        started = time.monotonic()
        await self._finish_copies(jobs, outcomes, owners, stats, errors)
        log.info("published COPY_SEGMENT_FINISHED in %.2f s", time.monotonic() - started)

    def _plan_windows(
        self, partitions: list[_Partition], run_id: str, now: int
    ) -> list[FetchWindow]:
        windows: list[FetchWindow] = []
        for p in partitions:
            if p.error is not None or not p.policy.copies or p.copy_start >= p.last_stable:
                continue
            estimated, first_ts = self._estimate(p, p.last_stable)
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
            share = self._config.copy_max_bytes_per_second / min(
                len(windows), self._runner.parallelism
            )
            paced = [_with_rate(w, share) for w in windows]
            for p in partitions:
                p.windows = [paced[w.window] for w in p.windows]
            return paced
        return windows

    async def _plan_segments(
        self,
        p: _Partition,
        results: Mapping[int, WindowResult],
        now: int,
        stats: TopicStats,
    ) -> list[CopyJob]:
        spans: list[BatchSpan] = []
        events: list[ProducerEvent] = []
        paths: dict[int, str] = {}
        complete_to = p.copy_start
        for window in p.windows:
            result = results.get(window.window)
            if result is None or result.error is not None:
                stats.notes.append(
                    f"partition {p.tp.partition}: reading offsets {window.start_offset}.."
                    f"{window.end_offset - 1} failed: {result.error if result else 'no result'}"
                )
                break
            stats.bytes_fetched += result.size
            spans += spans_from_array(window.window, result.spans)
            events += result.events
            paths[window.window] = result.spill_path
            complete_to = window.end_offset
        if spans:
            self._scans[p.tp] = _ScanMemory(
                start=p.copy_start,
                end=complete_to,
                size=sum(s.size for s in spans),
                first_max_timestamp=spans[0].first_max_timestamp,
            )
        segments = cut_segments(
            spans,
            copy_start=p.copy_start,
            segment_bytes=p.policy.segment_bytes,
            segment_ms=p.policy.segment_ms,
            now_ms=now,
        )
        if not segments:
            return []
        tail = spans[segments[-1].end_span :]
        p.tail = _ScanMemory(
            start=segments[-1].end_offset + 1,
            end=complete_to,
            size=sum(s.size for s in tail),
            first_max_timestamp=tail[0].first_max_timestamp if tail else None,
        )
        chains, final = fold_chain(await self._prior_state(p), spans, segments, events)
        self._final_states[p.tp] = final
        jobs = []
        for segment, chain in zip(segments, chains, strict=True):
            metadata = RemoteLogSegmentMetadata(
                segment_id=RemoteLogSegmentId.generate(p.tp),
                start_offset=segment.start_offset,
                end_offset=segment.end_offset,
                max_timestamp=segment.max_timestamp,
                leader_epoch=p.leader_epoch,
                event_timestamp=now,
                segment_leader_epochs=metadata_epochs(
                    chain.segment_leader_epochs, segment.start_offset
                ),
                segment_size_in_bytes=segment.size,
                state=_S.COPY_SEGMENT_STARTED,
            )
            jobs.append(
                CopyJob(
                    metadata=metadata,
                    pieces=_pieces(spans, segment, paths),
                    prior=chain.prior,
                    leader_id=p.leader_id,
                    bytes_per_second=self._config.copy_max_bytes_per_second
                    / self._runner.parallelism,
                )
            )
        return jobs

    async def _prior_state(self, p: _Partition) -> ChainState:
        """The state after the partition's last remote segment (from its files)."""
        if p.remote_end is None or p.copy_start != p.remote_end + 1:
            return ChainState()
        tip = self.cache.segment_for(p.tp, p.remote_end, self.cache.lineage(p.tp))
        if tip is None:
            return ChainState()
        cached = self._chains.get(p.tp)
        if cached is not None and cached[0] == tip.segment_id.id:
            return cached[1]
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

    async def _local_target(self, p: _Partition, now: int, errors: list[str]) -> int | None:
        """Where the broker's log start may move now, or ``None`` to leave it."""
        target = local_log_start_target(
            self._finished_chain(p.tp),
            log_start_offset=p.log_start,
            untiered_bytes=self._untiered_bytes(p),
            local_retention_ms=p.policy.effective_local_retention_ms,
            local_retention_bytes=p.policy.effective_local_retention_bytes,
            now_ms=now,
        )
        if target is None:
            return None
        try:
            target = min(target, await self._open_transactions_start(p))
        except (RemoteStorageError, CorruptIndexError) as err:
            # Not knowing which transactions are open, keep the local data.
            errors.append(f"{p.tp}: producer snapshot of the remote end: {err}")
            return None
        return target if target > p.log_start else None

    async def _open_transactions_start(self, p: _Partition) -> int:
        """The first offset of the earliest transaction still open at the remote log end
        (its marker not tiered yet), or the largest offset: the broker's log start never
        moves past it. Kafka resolves READ_COMMITTED reads there from its local transaction
        index; the proxy can read only the broker's answers and the remote tier, and the
        remote tier does not know yet how such a transaction ends."""
        none = 1 << 63
        if p.remote_end is None:
            return none
        tip = self.cache.segment_for(p.tp, p.remote_end, self.cache.lineage(p.tp))
        if tip is None:
            return none
        cached = self._chains.get(p.tp)
        if cached is not None and cached[0] == tip.segment_id.id:
            producers = cached[1].producers
        else:
            snapshot = await self._rsm.fetch_index(tip, IndexType.PRODUCER_SNAPSHOT)
            producers = parse_producer_snapshot(snapshot)
        return min(
            (e.current_txn_first_offset for e in producers if e.current_txn_first_offset >= 0),
            default=none,
        )

    async def _finish_copies(
        self,
        jobs: Sequence[CopyJob],
        outcomes: Sequence[CopyResult],
        owners: Mapping[uuid.UUID, _Partition],
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        by_id = {o.segment_id: o for o in outcomes}
        finished: list[RemoteLogSegmentMetadata] = []
        broken: set[TopicIdPartition] = set()
        for job in jobs:
            metadata = job.metadata
            tp = metadata.topic_id_partition
            topic_stats = stats[tp.topic]
            outcome = by_id.get(metadata.segment_id.id)
            if outcome is None or outcome.error is not None or tp in broken:
                broken.add(tp)
                topic_stats.copy_failures += 1
                topic_stats.lag_segments += 1
                reason = (
                    outcome.error
                    if outcome is not None and outcome.error
                    else (
                        "not copied: an earlier segment of the partition failed"
                        if outcome is not None
                        else "the copy task was lost"
                    )
                )
                errors.append(
                    f"{tp}: segment {metadata.start_offset}..{metadata.end_offset} "
                    f"({metadata.segment_id.id}): {reason}"
                )
                continue
            finished.append(metadata)
            topic_stats.segments_copied += 1
            topic_stats.bytes_copied += metadata.segment_size_in_bytes
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

    # -- retention ----------------------------------------------------------------------

    def _finished_chain(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The partition's readable segments, in offset order."""
        unreferenced = {s.segment_id.id for s in self.cache.unreferenced_segments(tp)}
        return [
            s
            for s in self.cache.segments(tp, {_S.COPY_SEGMENT_FINISHED})
            if s.segment_id.id not in unreferenced
        ]

    def _untiered_bytes(self, p: _Partition) -> int:
        return self._estimate(p, max(p.copy_start, p.high_watermark))[0]

    async def _remote_retention(
        self,
        partitions: list[_Partition],
        now: int,
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        for p in partitions:
            if p.error is not None:
                continue
            segments = self._finished_chain(p.tp)
            expired = expired_segments(
                segments,
                retention_ms=p.policy.retention_ms,
                retention_bytes=p.policy.retention_bytes,
                untiered_bytes=self._untiered_bytes(p),
                now_ms=now,
            )
            if expired and expired[-1] is segments[-1] and p.log_start <= segments[-1].end_offset:
                # The broker still holds these offsets (it could not delete records): the
                # newest segment stays as the record of how far the partition is tiered.
                expired = expired[:-1]
            if expired:
                deleted = await self._delete_segments(expired, now, errors)
                topic_stats = stats[p.tp.topic]
                topic_stats.segments_expired += deleted
                topic_stats.bytes_expired += sum(s.segment_size_in_bytes for s in expired[:deleted])

    async def _local_retention(
        self,
        partitions: list[_Partition],
        now: int,
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        targets: dict[int, list[tuple[_Partition, int]]] = {}
        for p in partitions:
            if p.error is not None or not p.policy.manages_local_retention:
                continue
            target = await self._local_target(p, now, errors)
            if target is not None:
                targets.setdefault(p.leader_id, []).append((p, target))
        if not targets:
            return
        if not await self.supports_delete_records():
            for group in targets.values():
                for p, _ in group:
                    self._report_once(
                        p.tp.topic,
                        "the broker cannot delete records (no DeleteRecords), so tiered data "
                        "stays on it until its own retention.ms/retention.bytes remove it",
                        stats[p.tp.topic],
                    )
            return
        for leader_id, group in targets.items():
            await self._delete_records_on(leader_id, group, stats, errors)

    async def _delete_records_on(
        self,
        leader_id: int,
        group: list[tuple[_Partition, int]],
        stats: dict[str, TopicStats],
        errors: list[str],
    ) -> None:
        """One DeleteRecords to the leader of ``group``'s partitions, up to each target;
        a partition the broker moved learns its new log start."""
        try:
            answers = await self._client.delete_records(
                leader_id, [(p.tp.topic, p.tp.partition, target) for p, target in group]
            )
        except Exception as err:
            errors.append(f"DeleteRecords on broker {leader_id}: {err}")
            return
        by_key = {(a.topic, a.partition): a for a in answers}
        for p, target in group:
            answer = by_key.get((p.tp.topic, p.tp.partition))
            if answer is not None and answer.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                errors.append(f"{p.tp}: {denied('DeleteRecords', p.tp.topic, self._principal)}")
                continue
            if answer is None or answer.error != KafkaError.NONE:
                reason = answer.error.name if answer is not None else "no answer"
                errors.append(f"{p.tp}: DeleteRecords to {target}: {reason}")
                continue
            p.log_start = answer.low_watermark
            stats[p.tp.topic].log_starts_advanced += 1

    def _record_lag(
        self, partitions: list[_Partition], now: int, stats: dict[str, TopicStats]
    ) -> None:
        for tp, missing, message in self._gaps_found:
            topic_stats = stats.setdefault(tp.topic, TopicStats())
            topic_stats.missing_offsets += missing
            topic_stats.notes.append(message)
        self._gaps_found.clear()
        for p in partitions:
            if p.error is not None or p.high_watermark < 0:
                continue
            # Exact where this cycle read the untiered tail, estimated beyond it.
            lag, first_ts = self._estimate(p, max(p.copy_start, p.last_stable))
            stats[p.tp.topic].lag_bytes += lag
            self._check_retention_lag(p, lag, first_ts, now, stats[p.tp.topic])

    def _check_retention_lag(
        self, p: _Partition, lag_bytes: int, first_ts: int | None, now: int, stats: TopicStats
    ) -> None:
        """Warn before the broker's own retention deletes data that is not tiered yet: when
        the oldest untiered data is older than half the broker's ``retention.ms``, or the
        untiered bytes exceed half its ``retention.bytes`` (a partition's)."""
        retention_ms, retention_bytes = self._broker_retention.get(p.tp.topic, (-1, -1))
        age = None if first_ts is None or first_ts < 0 else now - first_ts
        if retention_ms >= 0 and age is not None and age > retention_ms / 2:
            self._report_once(
                p.tp.topic,
                f"tiering lags behind the broker's retention.ms={retention_ms}: the oldest "
                f"untiered data is {age // 1000} s old; once it passes retention.ms the "
                "broker deletes it untiered (tier more often, or raise retention.ms)",
                stats,
            )
        if 0 <= retention_bytes < lag_bytes * 2:
            self._report_once(
                p.tp.topic,
                f"tiering lags behind the broker's retention.bytes={retention_bytes}: about "
                f"{lag_bytes} bytes of a partition are untiered; past retention.bytes the "
                "broker deletes them untiered (tier more often, or raise retention.bytes)",
                stats,
            )


def _broker_int(configs: Mapping[str, BrokerConfigValue] | None, key: str) -> int:
    """A numeric topic config as the broker reports it (-1 when unknown or unlimited)."""
    value = None if configs is None else configs.get(key)
    if value is None or value.value is None:
        return -1
    try:
        return int(value.value)
    except ValueError:
        return -1


def _first_line(err: Exception) -> str:
    """Spark wraps task failures in pages of Java stack trace; the first line says what."""
    lines = str(err).strip().splitlines()
    return lines[0][:500] if lines else type(err).__name__


def _tp(topic: TopicMetadata, partition: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id=topic.topic_id, topic=topic.name, partition=partition)


def _with_rate(window: FetchWindow, rate: float) -> FetchWindow:
    return replace(window, bytes_per_second=rate)


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
