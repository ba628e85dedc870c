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
5. one job on Spark (:mod:`.tier_stage`): each task reads whole partitions' windows into
   spill files, cuts their segments (:mod:`.planner`), folds the state each segment inherits
   (:mod:`.chain`), and for each segment publishes COPY_SEGMENT_STARTED under a fresh id
   *before* it uploads anything of it, then builds and uploads it; one partition's upload
   overlaps the next one's read;
6. the driver publishes COPY_SEGMENT_FINISHED for each partition's unbroken run of uploaded
   segments from its remote log end (a task stops a partition at its first failure; what a
   failed or retried task announced stays STARTED and is deleted next cycle, so the remote
   log never has a hole that later copies would skip);
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

Only the pipeline that holds the cluster's transactional id acts (:mod:`.lease`): a cycle
starts only while it holds it, every metadata record is written in its transactions (which
Kafka refuses once another pipeline took it over), and nothing Kafka cannot fence (object
deletions, DeleteRecords, the copy job) happens once its hold may have lapsed. A cycle that
loses the hold raises :class:`.lease.NotHoldingError`; the loop then waits to hold it again.

The steps live in their own modules, each a class given what it works with: clean-up
(:mod:`.cleanup`, steps 2-3), where each partition stands (:mod:`.survey`, step 4), copying
(:mod:`.copying`, steps 5-6) and retention (:mod:`.retention_driver`, steps 7-8); what they
share is :mod:`.cycle`. This module reads the topics and their policies, and runs the steps
in order.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping

from protocol.errors import KafkaError
from storage.config import ConfigError
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import KafkaClient, TopicMetadata
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.cleanup import RemoteCleaner
from storage.tiering.config import TieringConfig
from storage.tiering.copying import CopyDriver
from storage.tiering.cycle import CLOCK_MARGIN_MS, EndedJobs, MetadataManager, Notes, wall_clock_ms
from storage.tiering.fetch_stage import BrokerSettings
from storage.tiering.lease import Hold, UnfencedLease
from storage.tiering.policy import (
    BrokerConfigValue,
    TopicPolicy,
    TopicRules,
    refusal_reason,
    resolve_policy,
)
from storage.tiering.report import CycleReport, Failure, Stage, TopicStats
from storage.tiering.retention_driver import RetentionDriver
from storage.tiering.spill import recycle_spill
from storage.tiering.stages import StageRunner
from storage.tiering.survey import PartitionSurvey
from storage.tiering.tier_stage import MetadataSink
from storage.tiering.worker import StorageFactory

__all__ = ["MetadataManager", "TieringPipeline", "wall_clock_ms"]

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TieringPipeline:
    """Runs tiering cycles with one broker client, one RLMM and one remote storage manager.

    :param storage_factory: how tasks build their remote storage manager (default:
        :func:`storage.rsm.factory.create_remote_storage`); the driver uses ``rsm``.
    :param clock: milliseconds since the epoch (retention and ``segment.ms`` use it).
    :param hold: the pipeline's hold on the cluster (:mod:`.lease`); unfenced by default.
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
        hold: Hold | None = None,
    ) -> None:
        self._config = config
        self._hold: Hold = hold or UnfencedLease("no hold given")
        ended = EndedJobs(horizon_ms=config.copy_timeout_ms + CLOCK_MARGIN_MS)
        self._rules = rules
        self._client = client
        self._rlmm = rlmm
        self._metadata_topic = metadata_topic
        self._clock = clock
        broker = BrokerSettings(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            fetch_max_bytes=config.fetch_max_bytes,
            security=security or KafkaSecurityConfig(),
        )
        self._principal = principal_of(broker.security)
        self._notes = Notes()
        self._cleaner = RemoteCleaner(
            client=client,
            rlmm=rlmm,
            rsm=rsm,
            notes=self._notes,
            fence=self._hold,
            copy_timeout_ms=config.copy_timeout_ms,
            ended=ended,
            clock=clock,
        )
        self._survey = PartitionSurvey(
            client=client, rlmm=rlmm, notes=self._notes, principal=self._principal, clock=clock
        )
        self._copier = CopyDriver(
            config=config,
            storage=storage,
            broker=broker,
            rlmm=rlmm,
            rsm=rsm,
            runner=runner,
            sink=MetadataSink(
                topic=metadata_topic,
                partition_count=rlmm.partition_count,
                timeout_ms=config.request_timeout_ms,
            ),
            storage_factory=storage_factory,
            fence=self._hold,
            ended=ended,
            clock=clock,
        )
        self._retention = RetentionDriver(
            client=client,
            rlmm=rlmm,
            rsm=rsm,
            cleaner=self._cleaner,
            copier=self._copier,
            notes=self._notes,
            principal=self._principal,
            fence=self._hold,
            supports_delete_records=self.supports_delete_records,
        )

    @property
    def cache(self) -> RemoteLogMetadataCache:
        return self._rlmm.cache

    @property
    def holding(self) -> bool:
        """Whether this pipeline holds the cluster's tiering now."""
        return self._hold.holding

    async def take_hold(
        self, *, stop: asyncio.Event | None = None, patience: float | None = None
    ) -> bool:
        """Wait until no other pipeline holds the cluster's tiering, take it, and read the
        metadata topic to its end (the last holder's commits included); ``False`` if
        ``stop`` was set or ``patience`` seconds passed first.

        :raises TimeoutError: the metadata topic was not read to its end in time.
        """
        if not await self._hold.acquire(stop=stop, patience=patience):
            return False
        await self._rlmm.wait_until_caught_up(self._config.request_timeout_ms / 1000)
        return True

    async def supports_delete_records(self) -> bool:
        """Whether the broker may be sent DeleteRecords (configured or detected kind)."""
        kind = self._config.broker_kind
        if kind == "auto":
            kind = await self._client.detect_broker_kind()
        return kind == "kafka"

    async def run_cycle(self) -> CycleReport:
        """Run one cycle; problems with single partitions are reported, not raised.

        :raises BrokerConnectionError: when the broker cannot be reached at all.
        :raises NotHoldingError: this pipeline does not hold the cluster's tiering, or lost
            it during the cycle (what it did up to then stands; nothing after).
        """
        self._hold.ensure_held()
        started = time.monotonic()
        now = self._clock()
        stats: dict[str, TopicStats] = {}
        failures: list[Failure] = []
        metadata = await self._client.metadata(None)
        topics = {
            name: topic
            for name, topic in metadata.topics.items()
            if topic.error == KafkaError.NONE and not self._is_internal(topic)
        }
        policies = await self._policies(topics, stats)
        await self._cleaner.finish_deleted_topics(metadata, stats, failures)
        await self._cleaner.delete_disabled(topics, policies, stats, failures)
        await self._cleaner.delete_leftovers(topics, stats, failures)
        partitions = await self._survey.partitions(topics, policies, stats, failures)
        failures.extend(self._notes.take_denied())
        copy_started = time.monotonic()
        run_id = f"{now}-{uuid.uuid4().hex[:8]}"
        try:
            await self._copier.copy(partitions, run_id, now, stats, failures)
        finally:
            recycle_spill(self._config.spill_root / run_id)
        copy_seconds = time.monotonic() - copy_started
        # Local retention first: it moves the broker's log start over data that remote
        # retention may then delete, so that the broker never keeps what the remote tier
        # forgot (the next cycle would copy it again).
        await self._retention.local_retention(partitions, now, stats, failures)
        await self._retention.remote_retention(partitions, now, stats, failures)
        self._retention.record_lag(partitions, self._survey.take_gaps(), now, stats)
        self._hold.ensure_held()
        return CycleReport(
            started_ms=now,
            seconds=time.monotonic() - started,
            copy_seconds=copy_seconds,
            topics=stats,
            failures=tuple(failures),
        )

    def _is_internal(self, topic: TopicMetadata) -> bool:
        return (
            topic.is_internal
            or topic.name == self._metadata_topic
            or topic.name in _INTERNAL_TOPICS
        )

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
                refusal = denied("DescribeConfigs", name, self._principal)
                self._notes.deny(Failure(stage=Stage.SURVEY, reason=refusal, topic=name))
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
                self._notes.report_once(
                    name,
                    f"not tiered: its settings are invalid ({err}); fix the config file or "
                    "the topic's configs at the broker",
                    stats.setdefault(name, TopicStats()),
                )
                continue
            reason = refusal_reason(name, policy)
            if reason is not None:
                self._notes.report_once(name, reason, stats.setdefault(name, TopicStats()))
                continue
            policies[name] = policy
            self._retention.broker_configs(name, broker)
        return policies
