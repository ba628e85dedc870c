"""Remote data that no read will use, deleted: the partitions of deleted topics, topics whose
tiering was disabled, and the leftovers of failed copies.

Steps 2 and 3 of a cycle (:mod:`.pipeline`):

- partitions of topics deleted at the broker go through KIP-405's "Topic deletion
  lifecycle": DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, every segment deleted,
  DELETE_PARTITION_FINISHED; each step checks the metadata first, so a crash anywhere is
  resumed by the next cycle;
- topics whose tiering was disabled with ``remote.log.delete.on.disable`` (KIP-950) lose
  their remote data;
- copies stuck in COPY_SEGMENT_STARTED (a task failed or was killed) or
  DELETE_SEGMENT_STARTED, and copies no read can reach, are deleted.

Every segment is deleted the same resumable way (:meth:`RemoteCleaner.delete_segments`),
which remote retention uses too: DELETE_SEGMENT_STARTED is committed under the pipeline's
fenced transactional id first, and the objects are deleted only while the pipeline still
holds it (:mod:`.lease`).

A COPY_SEGMENT_STARTED copy is a leftover only once no task can still upload it
(:func:`may_still_upload`): its job ended in this pipeline, or the job's deadline
(``tiering.copy.timeout.ms`` after its start, the copy's event time) and a minute for the
hosts' clocks have passed. A pipeline that took over from a paused or dead one thus never
deletes a copy whose task then uploads it again behind its back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container, Mapping, Sequence

from protocol.errors import KafkaError
from storage.kafka_client import NO_TOPIC_ID, ClusterMetadata, KafkaClient, TopicMetadata
from storage.log_event import event
from storage.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.records import partition_delete_record, segment_update_record
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageManager
from storage.tiering.cycle import CLOCK_MARGIN_MS, MetadataManager, Notes, topic_partition
from storage.tiering.lease import Fence, NotHoldingError
from storage.tiering.policy import TopicPolicy
from storage.tiering.report import Failure, Stage, TopicStats

__all__ = ["RemoteCleaner", "may_still_upload"]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
_P = RemotePartitionDeleteState


def may_still_upload(
    segment: RemoteLogSegmentMetadata,
    *,
    now_ms: int,
    copy_timeout_ms: int,
    ended: Container[int],
) -> bool:
    """Whether a copy task may still be uploading ``segment``: it is COPY_SEGMENT_STARTED,
    not of a job of this pipeline's that ``ended`` (by its event time, the job's start), and
    its job's deadline plus :data:`CLOCK_MARGIN_MS` has not passed."""
    return (
        segment.state == _S.COPY_SEGMENT_STARTED
        and segment.event_timestamp not in ended
        and now_ms < segment.event_timestamp + copy_timeout_ms + CLOCK_MARGIN_MS
    )


class RemoteCleaner:
    """Deletes remote segments through the metadata state machine, resumably.

    :param ended: the start times of this pipeline's copy jobs whose tasks all ended.
    """

    def __init__(
        self,
        *,
        client: KafkaClient,
        rlmm: MetadataManager,
        rsm: RemoteStorageManager,
        notes: Notes,
        fence: Fence,
        copy_timeout_ms: int,
        ended: Container[int],
        clock: Callable[[], int],
    ) -> None:
        self._client = client
        self._rlmm = rlmm
        self._rsm = rsm
        self._notes = notes
        self._fence = fence
        self._copy_timeout_ms = copy_timeout_ms
        self._ended = ended
        self._clock = clock

    @property
    def _cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    async def delete_segments(
        self,
        segments: Sequence[RemoteLogSegmentMetadata],
        now: int,
        failures: list[Failure],
        stage: Stage,
    ) -> int:
        """Delete ``segments`` concurrently; the number deleted (failures go to ``failures``,
        as failures of ``stage``).

        :raises NotHoldingError: the pipeline lost its hold meanwhile.
        :raises BaseException: only what is not an :class:`Exception` (cancellation).
        """
        outcomes = await asyncio.gather(
            *(self._delete_segment(s, now) for s in segments), return_exceptions=True
        )
        deleted = 0
        for segment, outcome in zip(segments, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception) or isinstance(outcome, NotHoldingError):
                    raise outcome
                failures.append(Failure.of_segment(stage, segment, f"cannot delete it: {outcome}"))
            else:
                deleted += 1
        return deleted

    async def _delete_segment(self, metadata: RemoteLogSegmentMetadata, now: int) -> None:
        """DELETE_SEGMENT_STARTED, delete the objects, DELETE_SEGMENT_FINISHED (resumable)."""
        if self._cache.segment_state(metadata.segment_id) != _S.DELETE_SEGMENT_STARTED:
            await self._rlmm.publish(
                segment_update_record(metadata, _S.DELETE_SEGMENT_STARTED, now)
            )
        self._fence.ensure_held()
        try:
            await self._rsm.delete_log_segment(metadata)
        except RemoteResourceNotFoundError:
            event(
                log,
                logging.DEBUG,
                "tiering.expire.no_objects",
                msg=f"segment {metadata.segment_id.id} had no objects left",
                segment=metadata.segment_id.id,
            )
        await self._rlmm.publish(segment_update_record(metadata, _S.DELETE_SEGMENT_FINISHED, now))

    async def finish_deleted_topics(
        self, metadata: ClusterMetadata, stats: dict[str, TopicStats], failures: list[Failure]
    ) -> None:
        """Take the partitions of topics the broker no longer has through their deletion.

        :raises BrokerConnectionError: when the broker cannot confirm which topics are gone.
        """
        live_ids = {t.topic_id for t in metadata.topics.values() if t.topic_id != NO_TOPIC_ID}
        candidates = [
            tp
            for tp in self._cache.partitions()
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
                await self._delete_partition(tp, stats.setdefault(tp.topic, TopicStats()), failures)
            except NotHoldingError:
                raise
            except Exception as err:
                failures.append(
                    Failure.of_partition(
                        Stage.CLEANUP,
                        tp,
                        f"cannot delete the remote data of the deleted partition: {err}",
                    )
                )

    async def _delete_partition(
        self, tp: TopicIdPartition, stats: TopicStats, failures: list[Failure]
    ) -> None:
        now = self._clock()
        status = self._cache.delete_status(tp)
        if status is None:
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_MARKED, now))
            status = self._cache.delete_status(tp)
        if status is None or status.state == _P.DELETE_PARTITION_MARKED:
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_STARTED, now))
        every = self._cache.segments(tp)
        segments = self._deletable(every, now)
        deleted = await self.delete_segments(segments, now, failures, Stage.CLEANUP)
        stats.leftovers_deleted += deleted
        if deleted == len(every):
            await self._rlmm.publish(partition_delete_record(tp, _P.DELETE_PARTITION_FINISHED, now))
            self._notes.report_once(
                tp.topic,
                f"partition {tp.partition} (topic id {tp.topic_id}) was deleted at the broker; "
                "its remote data is gone too",
                stats,
            )

    async def delete_disabled(
        self,
        topics: Mapping[str, TopicMetadata],
        policies: Mapping[str, TopicPolicy],
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """Delete the remote data of topics tiered no more (``remote.log.delete.on.disable``)."""
        now = self._clock()
        for name, policy in policies.items():
            if not policy.deletes_remote_data:
                continue
            topic = topics[name]
            segments = self._deletable(
                [
                    s
                    for p in topic.partitions
                    for s in self._cache.segments(topic_partition(topic, p.partition))
                ],
                now,
            )
            if segments:
                deleted = await self.delete_segments(segments, now, failures, Stage.CLEANUP)
                stats.setdefault(name, TopicStats()).segments_expired += deleted

    async def delete_leftovers(
        self,
        topics: Mapping[str, TopicMetadata],
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """Delete the copies no read will use (unfinished, or finished but unreferenced),
        except those a copy task may still be uploading (:func:`may_still_upload`)."""
        now = self._clock()
        for name, topic in topics.items():
            leftovers = self._deletable(
                [
                    s
                    for p in topic.partitions
                    for s in self._cache.unreferenced_segments(topic_partition(topic, p.partition))
                ],
                now,
            )
            if leftovers:
                deleted = await self.delete_segments(leftovers, now, failures, Stage.CLEANUP)
                stats.setdefault(name, TopicStats()).leftovers_deleted += deleted

    def _deletable(
        self, segments: Sequence[RemoteLogSegmentMetadata], now: int
    ) -> list[RemoteLogSegmentMetadata]:
        """``segments`` but those a copy task may still be uploading."""
        return [
            s
            for s in segments
            if not may_still_upload(
                s, now_ms=now, copy_timeout_ms=self._copy_timeout_ms, ended=self._ended
            )
        ]
