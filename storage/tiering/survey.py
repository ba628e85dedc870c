"""Where each tiered partition stands: step 4 of a cycle (:mod:`.pipeline`).

The driver asks each tiered partition's leader, in one Fetch per broker, for its log start,
high watermark, last stable offset and a sample of the data to be copied (the first batch's
age, bytes per offset), so that the copy step can skip partitions where nothing can have
closed yet (:func:`.planner.may_close`).

Two things are found on the way and acted on here: a broker whose log no longer holds what
was tiered at the remote log end (an unclean election diverged the logs: the partition waits
for an operator), and a broker that deleted data before it was tiered (the whole log's start
follows it, and the gap is reported).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import epoch_for_offset
from storage.kafka_acls import denied
from storage.kafka_client import KafkaClient, TopicMetadata
from storage.model import RemoteLogSegmentState, TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.records import log_start_record
from storage.tiering.cycle import (
    DEFAULT_BYTES_PER_OFFSET,
    MetadataManager,
    Notes,
    TieredPartition,
    topic_partition,
)
from storage.tiering.policy import TopicPolicy
from storage.tiering.report import Failure, Stage, TopicStats
from storage.tiering.sampling import sample_partitions

__all__ = ["PartitionSurvey"]

_S = RemoteLogSegmentState
_SAMPLE_BYTES = 16 * 1024
"""Bytes of each partition's not-yet-tiered data read by the driver to estimate its size and
age; enough for several batches of a busy producer, small enough for thousands of partitions
in one Fetch."""
_RATIO_SEGMENTS = 4
"""Recent remote segments whose average size per offset estimates the partition's."""


class PartitionSurvey:
    """Finds where each tiered partition stands, remembering samples across cycles."""

    def __init__(
        self,
        *,
        client: KafkaClient,
        rlmm: MetadataManager,
        notes: Notes,
        principal: str,
        clock: Callable[[], int],
    ) -> None:
        self._client = client
        self._rlmm = rlmm
        self._notes = notes
        self._principal = principal
        self._clock = clock
        self._samples: dict[TopicIdPartition, tuple[int, int | None, float]] = {}
        """Per partition: the offset sampled, its batch's max timestamp, bytes per offset."""
        self._gaps_found: list[tuple[TopicIdPartition, int, str]] = []

    @property
    def _cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    def take_gaps(self) -> list[tuple[TopicIdPartition, int, str]]:
        """Offsets the broker deleted before they were tiered, found since the last call:
        (partition, how many, the note that says so)."""
        gaps = self._gaps_found
        self._gaps_found = []
        return gaps

    async def partitions(
        self,
        topics: Mapping[str, TopicMetadata],
        policies: Mapping[str, TopicPolicy],
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> list[TieredPartition]:
        """The partitions to tier, each with its leader's log start, high watermark, last
        stable offset and a sample of its untiered data; a partition that cannot be tiered
        now carries its ``error``, which goes to ``failures`` too (a refused Fetch once per
        topic, through :meth:`.cycle.Notes.deny`)."""
        partitions = []
        for name, policy in sorted(policies.items()):
            if not policy.remote_storage_enable:
                continue
            topic = topics[name]
            topic_stats = stats.setdefault(name, TopicStats())
            for p in topic.partitions:
                if p.error != KafkaError.NONE or p.leader_id < 0:
                    self._notes.report_once(
                        name, f"partition {p.partition} has no leader ({p.error.name})", topic_stats
                    )
                    continue
                tp = topic_partition(topic, p.partition)
                topic_stats.partitions += 1
                partitions.append(
                    TieredPartition(
                        tp=tp,
                        policy=policy,
                        leader_id=p.leader_id,
                        leader_epoch=max(p.leader_epoch, 0),
                        remote_end=self._cache.remote_log_end_offset(tp),
                    )
                )
        by_leader: dict[int, list[TieredPartition]] = {}
        for partition in partitions:
            by_leader.setdefault(partition.leader_id, []).append(partition)
        await asyncio.gather(
            *(self._sample(leader, group, failures) for leader, group in by_leader.items())
        )
        return partitions

    async def _sample(
        self, leader_id: int, partitions: list[TieredPartition], failures: list[Failure]
    ) -> None:
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
                self._notes.deny(Failure(stage=Stage.SURVEY, reason=p.error, topic=p.tp.topic))
                continue
            if sample.error != KafkaError.NONE:
                p.error = f"Fetch from its leader {leader_id}: {sample.error.name}"
                failures.append(Failure.of_partition(Stage.SURVEY, p.tp, p.error))
                continue
            if p.remote_end is not None and sample.boundary_epoch is not None:
                tiered_epoch = epoch_for_offset(self._cache.lineage(p.tp), p.remote_end)
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
                    failures.append(Failure.of_partition(Stage.SURVEY, p.tp, p.error))
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
            p.bytes_per_offset = self._remote_ratio(p.tp) or ratio or DEFAULT_BYTES_PER_OFFSET

    async def _follow_log_start(self, p: TieredPartition) -> None:
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
        if p.log_start <= self._cache.log_start_offset(p.tp):
            return
        self._check_gap(p)
        await self._rlmm.publish(log_start_record(p.tp, p.log_start, self._clock()))

    def _check_gap(self, p: TieredPartition) -> None:
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
        if self._notes.first_time(p.tp.topic, message):
            self._gaps_found.append((p.tp, missing, message))

    def _remote_ratio(self, tp: TopicIdPartition) -> float | None:
        recent = self._cache.segments(tp, {_S.COPY_SEGMENT_FINISHED})[-_RATIO_SEGMENTS:]
        offsets = sum(s.end_offset - s.start_offset + 1 for s in recent)
        return sum(s.segment_size_in_bytes for s in recent) / offsets if offsets else None
