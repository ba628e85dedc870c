"""Retention: steps 7 and 8 of a cycle (:mod:`.pipeline`), and the lag report after them.

7. local retention: where the broker supports DeleteRecords (Apache Kafka), its log start is
   moved to the end of the tiered, locally expired data, never further, and never past the
   first offset of a transaction still open at the remote log end (READ_COMMITTED reads of
   it stay with the broker, which knows how it ends). Other brokers (Tansu) are reported
   once per topic and keep their data;
8. remote retention (:mod:`.retention` decides what expired): expired segments are deleted
   through :class:`.cleanup.RemoteCleaner`. While the broker still holds the offsets of the
   newest remote segment (it cannot delete records), that segment is kept: it records how
   far the partition is tiered, and without it the next cycle would copy the whole log
   again.

Last, each topic's untiered bytes are counted, and a warning goes out before the broker's
own retention would delete data that is not tiered yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from protocol.errors import KafkaError
from protocol.indexes import CorruptIndexError
from protocol.indexes.producer_snapshot import parse_producer_snapshot
from storage.kafka_acls import denied
from storage.kafka_client import KafkaClient
from storage.model import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteStorageError, RemoteStorageManager
from storage.tiering.cleanup import RemoteCleaner
from storage.tiering.copying import CopyDriver
from storage.tiering.cycle import MetadataManager, Notes, TieredPartition
from storage.tiering.lease import Fence
from storage.tiering.policy import BrokerConfigValue
from storage.tiering.report import Failure, Stage, TopicStats
from storage.tiering.retention import expired_segments, local_log_start_target

__all__ = ["RetentionDriver"]

_S = RemoteLogSegmentState


class RetentionDriver:
    """Applies local and remote retention, and reports how far tiering lags."""

    def __init__(
        self,
        *,
        client: KafkaClient,
        rlmm: MetadataManager,
        rsm: RemoteStorageManager,
        cleaner: RemoteCleaner,
        copier: CopyDriver,
        notes: Notes,
        principal: str,
        fence: Fence,
        supports_delete_records: Callable[[], Awaitable[bool]],
    ) -> None:
        self._client = client
        self._fence = fence
        self._rlmm = rlmm
        self._rsm = rsm
        self._cleaner = cleaner
        self._copier = copier
        self._notes = notes
        self._principal = principal
        self._supports_delete_records = supports_delete_records
        self._broker_retention: dict[str, tuple[int, int]] = {}
        """Per topic: the broker's own retention.ms and retention.bytes for its local log."""

    @property
    def _cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    def broker_configs(self, topic: str, configs: Mapping[str, BrokerConfigValue] | None) -> None:
        """Remember the broker's own retention of ``topic`` (its configs as described)."""
        self._broker_retention[topic] = (
            _broker_int(configs, "retention.ms"),
            _broker_int(configs, "retention.bytes"),
        )

    async def local_retention(
        self,
        partitions: list[TieredPartition],
        now: int,
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """Move each leader's log start over data both tiered and locally expired."""
        targets: dict[int, list[tuple[TieredPartition, int]]] = {}
        for p in partitions:
            if p.error is not None or not p.policy.manages_local_retention:
                continue
            target = await self._local_target(p, now, failures)
            if target is not None:
                targets.setdefault(p.leader_id, []).append((p, target))
        if not targets:
            return
        if not await self._supports_delete_records():
            for group in targets.values():
                for p, _ in group:
                    self._notes.report_once(
                        p.tp.topic,
                        "the broker cannot delete records (no DeleteRecords), so tiered data "
                        "stays on it until its own retention.ms/retention.bytes remove it",
                        stats[p.tp.topic],
                    )
            return
        for leader_id, group in targets.items():
            await self._delete_records_on(leader_id, group, stats, failures)

    async def remote_retention(
        self,
        partitions: list[TieredPartition],
        now: int,
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """Delete the remote segments past ``retention.ms`` / ``retention.bytes``."""
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
                deleted = await self._cleaner.delete_segments(
                    expired, now, failures, Stage.RETENTION
                )
                topic_stats = stats[p.tp.topic]
                topic_stats.segments_expired += deleted
                topic_stats.bytes_expired += sum(s.segment_size_in_bytes for s in expired[:deleted])

    def record_lag(
        self,
        partitions: list[TieredPartition],
        gaps: Iterable[tuple[TopicIdPartition, int, str]],
        now: int,
        stats: dict[str, TopicStats],
    ) -> None:
        """Count each topic's untiered bytes and the offsets lost in ``gaps``, and warn when
        tiering lags behind the broker's own retention."""
        for tp, missing, message in gaps:
            topic_stats = stats.setdefault(tp.topic, TopicStats())
            topic_stats.missing_offsets += missing
            topic_stats.notes.append(message)
        for p in partitions:
            if p.error is not None or p.high_watermark < 0:
                continue
            # Exact where this cycle read the untiered tail, estimated beyond it.
            lag, first_ts = self._copier.estimate(p, max(p.copy_start, p.last_stable))
            stats[p.tp.topic].lag_bytes += lag
            self._check_retention_lag(p, lag, first_ts, now, stats[p.tp.topic])

    async def _local_target(
        self, p: TieredPartition, now: int, failures: list[Failure]
    ) -> int | None:
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
            failures.append(
                Failure.of_partition(
                    Stage.RETENTION,
                    p.tp,
                    f"local data kept: cannot read the producer snapshot of the remote end: {err}",
                )
            )
            return None
        return target if target > p.log_start else None

    async def _open_transactions_start(self, p: TieredPartition) -> int:
        """The first offset of the earliest transaction still open at the remote log end
        (its marker not tiered yet), or the largest offset: the broker's log start never
        moves past it. Kafka resolves READ_COMMITTED reads there from its local transaction
        index; the proxy can read only the broker's answers and the remote tier, and the
        remote tier does not know yet how such a transaction ends."""
        none = 1 << 63
        if p.remote_end is None:
            return none
        tip = self._cache.segment_for(p.tp, p.remote_end, self._cache.lineage(p.tp))
        if tip is None:
            return none
        cached = self._copier.chain_state(p.tp, tip)
        if cached is not None:
            producers = cached.producers
        else:
            snapshot = await self._rsm.fetch_index(tip, IndexType.PRODUCER_SNAPSHOT)
            producers = parse_producer_snapshot(snapshot)
        return min(
            (e.current_txn_first_offset for e in producers if e.current_txn_first_offset >= 0),
            default=none,
        )

    async def _delete_records_on(
        self,
        leader_id: int,
        group: list[tuple[TieredPartition, int]],
        stats: dict[str, TopicStats],
        failures: list[Failure],
    ) -> None:
        """One DeleteRecords to the leader of ``group``'s partitions, up to each target;
        a partition the broker moved learns its new log start.

        :raises NotHoldingError: the pipeline no longer holds its transactional id.
        """
        self._fence.ensure_held()
        try:
            answers = await self._client.delete_records(
                leader_id, [(p.tp.topic, p.tp.partition, target) for p, target in group]
            )
        except Exception as err:
            failures += [
                Failure.of_partition(
                    Stage.RETENTION, p.tp, f"DeleteRecords to {target} on broker {leader_id}: {err}"
                )
                for p, target in group
            ]
            return
        by_key = {(a.topic, a.partition): a for a in answers}
        for p, target in group:
            answer = by_key.get((p.tp.topic, p.tp.partition))
            if answer is not None and answer.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                why = denied("DeleteRecords", p.tp.topic, self._principal)
                failures.append(Failure.of_partition(Stage.RETENTION, p.tp, why))
                continue
            if answer is None or answer.error != KafkaError.NONE:
                reason = answer.error.name if answer is not None else "no answer"
                failures.append(
                    Failure.of_partition(
                        Stage.RETENTION, p.tp, f"DeleteRecords to {target}: {reason}"
                    )
                )
                continue
            p.log_start = answer.low_watermark
            stats[p.tp.topic].log_starts_advanced += 1

    def _finished_chain(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The partition's readable segments, in offset order."""
        unreferenced = {s.segment_id.id for s in self._cache.unreferenced_segments(tp)}
        return [
            s
            for s in self._cache.segments(tp, {_S.COPY_SEGMENT_FINISHED})
            if s.segment_id.id not in unreferenced
        ]

    def _untiered_bytes(self, p: TieredPartition) -> int:
        return self._copier.estimate(p, max(p.copy_start, p.high_watermark))[0]

    def _check_retention_lag(
        self, p: TieredPartition, lag_bytes: int, first_ts: int | None, now: int, stats: TopicStats
    ) -> None:
        """Warn before the broker's own retention deletes data that is not tiered yet: when
        the oldest untiered data is older than half the broker's ``retention.ms``, or the
        untiered bytes exceed half its ``retention.bytes`` (a partition's)."""
        retention_ms, retention_bytes = self._broker_retention.get(p.tp.topic, (-1, -1))
        age = None if first_ts is None or first_ts < 0 else now - first_ts
        if retention_ms >= 0 and age is not None and age > retention_ms / 2:
            self._notes.report_once(
                p.tp.topic,
                f"tiering lags behind the broker's retention.ms={retention_ms}: the oldest "
                f"untiered data is {age // 1000} s old; once it passes retention.ms the "
                "broker deletes it untiered (tier more often, or raise retention.ms)",
                stats,
            )
        if 0 <= retention_bytes < lag_bytes * 2:
            self._notes.report_once(
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
