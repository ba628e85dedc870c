"""The topic-based remote log metadata manager: KIP-405's default RLMM.

Everything tierproxy knows about remote segments is in one topic (``__remote_log_metadata``
by default). Every proxy and the pipeline run one manager: it consumes every partition of
the topic into a :class:`RemoteLogMetadataCache` and publishes new events to it.

- ``start()`` creates the topic if it is missing (partitions, replication factor,
  ``retention.ms``, ``cleanup.policy=delete``; an existing topic must have the configured
  partition count, or writers would hash user partitions to different places), loads the
  snapshots, and consumes until caught up with the topic's end.
- ``publish(record)`` checks the record against the cache first (a writer's mistake is
  raised to the writer, not skipped by every reader), produces it with a null key to
  partition ``murmur2("topic-partition") mod partitions`` with ``acks=all``, and returns
  once the consumer has applied it — read your writes, as Kafka's
  ``ConsumerManager.waitTillConsumptionCatchesUp``. If another writer's record got there
  first and made this one invalid, the consumer's refusal is raised. The pipeline gives the
  manager its own ``writer``, which writes in transactions under its fenced transactional
  id (:mod:`storage.tiering.lease`); the consumer reads READ_COMMITTED, so the records of a
  fenced or abandoned transaction are never applied.
- It talks to the cluster through the product's own client (:mod:`storage.kafka_client`),
  as Kafka's manager does through its own producer and consumer: a
  :class:`~storage.kafka_client.producer.TopicProducer` (``acks=all``, idempotent, retried on
  leader changes) and an :class:`~storage.kafka_client.consumer.AssignedConsumer` (every
  partition assigned, no group), each on its own connections so that the consumer's
  long-polling Fetch never holds up a Produce (a broker answers one connection's requests
  one at a time, in order).
- A consumer task applies records in offset order. Undecodable records and refused events
  are logged and skipped (and counted), as Kafka's consumer task does, so one bad record
  never stops the cache.
- With ``remote.log.metadata.snapshot.dir`` set, ``start()`` locks a slot of that directory
  for this manager (:mod:`storage.rlmm.slots`: two processes never write the same files),
  loads the snapshots there if they were read from this cluster's topic and this remote tier
  (:mod:`storage.rlmm.snapshot`), and reads only the tail of the topic; changed partitions
  are written every ``remote.log.metadata.snapshot.interval.ms`` and on ``close()``, which
  unlocks the slot.
- Read your writes means *applied from the topic*: a published record that the consumer
  skips as already held by a snapshot (a snapshot that claims records the topic does not
  have) fails its publish, so nothing, a deletion least of all, goes ahead on the strength
  of a snapshot alone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from protocol.metadata_records import (
    MetadataRecord,
    MetadataRecordError,
    decode_metadata_record,
    encode_metadata_record,
)
from protocol.murmur2 import metadata_partition_for
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import NO_TOPIC_ID, READ_COMMITTED, BrokerConnectionError, KafkaClient
from storage.kafka_client.consumer import CONSUMER_RETRY, FETCH_MAX_WAIT_MS, AssignedConsumer
from storage.kafka_client.leaders import TopicAuthorizationError
from storage.kafka_client.producer import RecordWriter, TopicProducer
from storage.kafka_security import KafkaSecurityConfig
from storage.log_event import event
from storage.model import TopicIdPartition
from storage.retry import call_with_retry
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.config import (
    RemoteLogMetadataConfig,
    snapshot_dir_for,
)
from storage.rlmm.slots import SnapshotSlot, claim_slot
from storage.rlmm.snapshot import PartitionKey, SnapshotStore, StateBinding
from storage.rlmm.state import RemoteLogMetadataError
from storage.rlmm.topic_setup import MetadataTopicError, MetadataTopicSetup

__all__ = ["MetadataTopicError", "TopicBasedRemoteLogMetadataManager"]

log = logging.getLogger(__name__)

_REFUSALS_KEPT = 1024
"""Refusals remembered for publishers that register after the consumer applied their
record (the producer's acknowledgement can arrive after the consumer fetched it)."""
_T = TypeVar("_T")


class TopicBasedRemoteLogMetadataManager:
    """Publishes and consumes KIP-405 metadata records; owns the cache they build.

    Use as an async context manager, or call :meth:`start` and :meth:`close`. Its clients log
    in with the ``upstream.*`` ``security`` settings.
    """

    def __init__(
        self,
        config: RemoteLogMetadataConfig,
        *,
        bootstrap_servers: str,
        security: KafkaSecurityConfig | None = None,
        command: str | None = None,
        storage_identity: str = "",
        fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS,
        writer: RecordWriter | None = None,
    ) -> None:
        """``command`` (``serve``, ``tier``) names the process, for its own snapshot
        directory when ``remote.log.metadata.snapshot.dir`` is ``auto``; without one, only an
        explicit directory keeps snapshots.

        ``storage_identity`` names the remote tier the metadata describes
        (:func:`storage.rsm.factory.storage_identity`); snapshots are bound to it, so a
        snapshot directory moved to another remote tier is not loaded.

        ``fetch_max_wait_ms`` is the consumer's long poll. Catching up after the snapshots
        waits for one Fetch answer per partition (its high watermark), which a broker holds
        that long when the snapshots already hold everything: a manager that only catches
        up once (a Spark query's planning) asks for less.

        ``writer`` produces what :meth:`publish` publishes (the pipeline's transactional
        writer); by default the manager's own idempotent producer does."""
        self.config = config
        self.cache = RemoteLogMetadataCache()
        self.applied_records = 0
        """Records the consumer applied to the cache (not counting snapshot loads)."""
        self.skipped_records = 0
        """Records the consumer could not decode or apply."""
        self._bootstrap = bootstrap_servers
        resolved = (security or KafkaSecurityConfig()).with_secrets_resolved()
        self._principal = principal_of(resolved)
        self._refused: MetadataTopicError | None = None
        """Set when the broker refuses this manager's principal READ on the topic."""
        self._client = KafkaClient(
            bootstrap_servers, client_id="tierproxy-rlmm-producer", security=resolved
        )
        """Produce and the admin requests."""
        self._setup = MetadataTopicSetup(
            self._client, config, bootstrap_servers, principal=self._principal
        )
        self._consumer_client = KafkaClient(
            bootstrap_servers, client_id="tierproxy-rlmm-consumer", security=resolved
        )
        self._partition_count = config.topic_partitions
        self._snapshot_root = snapshot_dir_for(config, command)
        self._storage_identity = storage_identity
        self._slot: SnapshotSlot | None = None
        self._snapshots: SnapshotStore | None = None
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._writer = writer
        self._producer: RecordWriter | None = None
        self._consumer: AssignedConsumer | None = None
        self._consume_task: asyncio.Task[None] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self._applied: dict[int, int] = {}
        """Last applied offset per metadata partition."""
        self._read_through: dict[int, tuple[int, int]] = {}
        """Per metadata partition, (the consumer's position, the high watermark) of the last
        Fetch answer whose records are all applied. The consumer's own position moves when
        an answer arrives, a loop turn or more before :meth:`_consume` applies its records,
        so catching up is judged by this, never by the consumer."""
        self._skip_through: dict[PartitionKey, int] = {}
        self._started = False
        """Caught up with the topic once: publishers may be waiting from now on."""
        self._changed: set[TopicIdPartition] = set()
        self._waiters: dict[int, list[tuple[int, asyncio.Future[None]]]] = {}
        self._refusals: collections.OrderedDict[tuple[int, int], Exception] = (
            collections.OrderedDict()
        )
        self._progress = asyncio.Event()
        self._snapshot_lock = asyncio.Lock()

    async def __aenter__(self) -> TopicBasedRemoteLogMetadataManager:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def partition_count(self) -> int:
        """Partitions of the metadata topic."""
        return self._partition_count

    @property
    def snapshot_dir(self) -> Path | None:
        """The slot this manager keeps its snapshots in while started; ``None`` before, and
        without snapshots."""
        return self._slot.path if self._slot is not None else None

    @property
    def snapshot_slot(self) -> SnapshotSlot | None:
        """The slot this manager holds while started (:mod:`storage.rlmm.slots`)."""
        return self._slot

    async def start(self, *, wait_for_cluster: bool = False) -> None:
        """Create the topic if needed, load snapshots, and catch up with the topic.

        :param wait_for_cluster: wait as long as it takes for a broker to answer, logging
            each retry, and only then start ``remote.log.metadata.initialization.timeout.ms``
            (long-running commands: the cluster may be down for longer than that); without
            it the timeout covers the wait too, as in Kafka.
        :raises ConfigError: if the snapshot directory cannot be used.
        :raises MetadataTopicError: if the topic cannot be created or has another
            partition count than configured.
        :raises TimeoutError: if this takes longer than
            ``remote.log.metadata.initialization.timeout.ms``; its message says whether a
            broker ever answered.
        """
        timeout_ms = self.config.initialization_timeout_ms
        try:
            if self._snapshot_root is not None:
                self._slot = claim_slot(self._snapshot_root)
                self._snapshots = SnapshotStore(self._slot.path, self._partition_count)
            if wait_for_cluster:
                await self._setup.wait_for_cluster()
            async with asyncio.timeout(timeout_ms / 1000):
                await self._start()
        except TimeoutError as err:
            await self.close()
            what = (
                f"the metadata topic {self.config.topic_name} was not read to its end"
                if self._setup.contacted
                else f"no broker at {self._bootstrap} answered"
            )
            raise TimeoutError(
                f"{what} within remote.log.metadata.initialization.timeout.ms ({timeout_ms} ms)"
            ) from err
        except BaseException:
            await self.close()
            raise
        if self._snapshots is not None:
            self._snapshot_task = asyncio.create_task(self._snapshot_loop(), name="rlmm-snapshots")

    async def _start(self) -> None:
        await self._setup.ensure()
        topic = self.config.topic_name
        self._producer = self._writer or TopicProducer(self._client, topic)
        self._consumer = AssignedConsumer(
            self._consumer_client,
            topic,
            self._partition_count,
            max_wait_ms=self._fetch_max_wait_ms,
            isolation_level=READ_COMMITTED,
        )
        if self._snapshots is not None:
            await self._restore(self._snapshots, self._consumer)
        self._consume_task = asyncio.create_task(self._consume(), name="rlmm-consumer")
        await self.wait_until_caught_up()
        self._started = True

    async def _restore(self, snapshots: SnapshotStore, consumer: AssignedConsumer) -> None:
        """Load the snapshots that belong to this cluster's topic and remote tier, and
        position the consumer after what they hold.

        :raises MetadataTopicError: the broker refuses the principal DESCRIBE on the topic.
        """
        binding = await self._binding()
        try:
            ends = await consumer.end_offsets(self._client)
        except TopicAuthorizationError as err:
            raise MetadataTopicError(
                denied(err.request, self.config.topic_name, self._principal)
            ) from err
        restored = await asyncio.to_thread(snapshots.load, self.cache, binding=binding, ends=ends)
        self._skip_through = restored.applied_through
        for partition, offset in restored.resume_after.items():
            self._applied[partition] = offset
            consumer.seek(partition, offset + 1)
        event(
            log,
            logging.INFO,
            "metadata.snapshots.loaded",
            msg=f"loaded {len(self.cache)} segments of {len(restored.applied_through)} "
            f"partitions from {snapshots.directory}",
            segments=len(self.cache),
            directory=str(snapshots.directory),
        )

    async def _binding(self) -> StateBinding:
        """What this manager's state belongs to: the cluster, the metadata topic (by id), the
        remote tier."""
        topic = self.config.topic_name
        cluster = await call_with_retry(
            lambda: self._client.metadata([topic]),
            policy=CONSUMER_RETRY,
            is_retriable=lambda error: isinstance(error, BrokerConnectionError),
        )
        found = cluster.topics.get(topic)
        return StateBinding(
            cluster_id=cluster.cluster_id or "",
            metadata_topic=topic,
            metadata_topic_id=found.topic_id if found is not None else NO_TOPIC_ID,
            remote_storage=self._storage_identity,
        )

    async def publish(self, record: MetadataRecord) -> None:
        """Publish ``record`` and wait until this manager's cache has applied it.

        :raises InvalidStateTransitionError: if the record breaks the state machine (before
            anything is produced, or when the consumer refuses it).
        :raises InvalidSegmentMetadataError: if a new segment's metadata is impossible.
        :raises MetadataTopicError: if the principal lacks WRITE on the topic.
        :raises ProduceError: if the broker refuses the record otherwise.
        :raises TimeoutError: if the record does not come back within
            ``remote.log.metadata.consume.wait.ms``.
        """
        producer = _started(self._producer)
        self.cache.check(record)
        partition = metadata_partition_for(
            f"{record.topic}-{record.partition}", self._partition_count
        )
        async with asyncio.timeout(self.config.consume_wait_ms / 1000):
            try:
                offset = await producer.send(partition, encode_metadata_record(record))
            except TopicAuthorizationError as err:
                raise MetadataTopicError(
                    denied(err.request, self.config.topic_name, self._principal)
                ) from err
            await self._applied_through(partition, offset)

    async def wait_until_caught_up(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (the RLMM contract takes a timeout, like Kafka's)
        """Wait until every record in the topic now has been applied to the cache.

        The end of each partition is the larger of ListOffsets' latest offset and the high
        watermark of the consumer's fetches (some brokers answer ListOffsets with the last
        batch's base offset).

        :raises MetadataTopicError: the broker refuses the principal DESCRIBE or READ.
        :raises TimeoutError: after ``timeout`` seconds (``None``: no limit).
        """
        consumer = _started(self._consumer)
        async with asyncio.timeout(timeout):
            try:
                ends = await consumer.end_offsets(self._client)
            except TopicAuthorizationError as err:
                raise MetadataTopicError(
                    denied(err.request, self.config.topic_name, self._principal)
                ) from err
            for partition in range(self._partition_count):
                while (read := self._read_through.get(partition)) is None:
                    await self._next_progress()
                end = max(ends[partition], read[1])
                while self._read_through[partition][0] < end:
                    await self._next_progress()

    async def snapshot(self) -> None:
        """Write the snapshots of changed partitions and the committed offsets now.

        :raises OSError: if the snapshot directory cannot be written.
        """
        if self._snapshots is None:
            return
        async with self._snapshot_lock:  # an older plan must not overwrite a newer one
            changed, self._changed = self._changed, set()
            files = self._snapshots.plan(self.cache, dict(self._applied), changed)
            try:
                await asyncio.to_thread(self._snapshots.write, files)
            except OSError:
                self._changed |= changed
                raise

    async def close(self) -> None:
        """Stop consuming, write a last snapshot, and close the connections."""
        for task in (self._snapshot_task, self._consume_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._snapshot_task = self._consume_task = None
        for waiters in self._waiters.values():
            for _, future in waiters:
                if not future.done():
                    future.set_exception(RemoteLogMetadataError("the metadata manager closed"))
        self._waiters.clear()
        if self._snapshots is not None and self._consumer is not None:
            try:
                await self.snapshot()
            except OSError:
                event(
                    log,
                    logging.ERROR,
                    "metadata.snapshots.final_write_failed",
                    msg="could not write the final metadata snapshot",
                    exc_info=True,
                )
        await self._client.close()
        await self._consumer_client.close()
        self._producer = self._consumer = None
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    # -- internals ------------------------------------------------------------------------

    async def _consume(self) -> None:
        consumer = _started(self._consumer)
        while True:
            try:
                polled = await consumer.poll()
            except TopicAuthorizationError as err:
                # No retry helps until an operator adds the ACL: fail start() at once.
                self._refused = MetadataTopicError(
                    denied(err.request, self.config.topic_name, self._principal)
                )
                event(
                    log,
                    logging.ERROR,
                    "metadata.consumer.refused",
                    msg=f"metadata consumer: {self._refused}",
                )
                self._progress.set()
                return
            for partition, records in polled.items():
                for record in records:
                    self._apply(partition, record.offset, record.value)
                position, high_watermark = (
                    consumer.position(partition),
                    consumer.end(partition),
                )
                if position is not None and high_watermark is not None:
                    self._read_through[partition] = (position, high_watermark)
                self._wake(partition)
            self._progress.set()
            self._progress = asyncio.Event()

    def _apply(self, partition: int, offset: int, value: bytes | None) -> None:
        self._applied[partition] = offset
        try:
            record = decode_metadata_record(value or b"")
        except MetadataRecordError as err:
            self.skipped_records += 1
            _skipped(partition, offset, err)
            return
        if offset <= self._skip_through.get((record.topic_id, record.partition), -1):
            # Already in the partition's snapshot. Once started, such a record may be one a
            # publisher waits for, which must not take it as applied: the snapshot claims
            # records the topic lacks. (Before, there is no publisher, and a replayed
            # metadata partition may skip many records.)
            if not self._started:
                return
            self._refuse(
                partition,
                offset,
                RemoteLogMetadataError(
                    f"metadata record {partition}@{offset} for {record.topic}-"
                    f"{record.partition} was not applied: the snapshot in {self.snapshot_dir} "
                    "claims to hold it already, so the snapshot is not of this topic; "
                    "remove the directory and restart"
                ),
            )
            return
        try:
            self.cache.apply(record)
        except RemoteLogMetadataError as err:
            self.skipped_records += 1
            self._refuse(partition, offset, err)
            _skipped(partition, offset, err)
            return
        self.applied_records += 1
        self._changed.add(
            TopicIdPartition(
                topic_id=record.topic_id, topic=record.topic, partition=record.partition
            )
        )

    def _refuse(self, partition: int, offset: int, err: Exception) -> None:
        """Remember that the record at ``partition``/``offset`` was not applied, for its
        publisher."""
        self._refusals[(partition, offset)] = err
        if len(self._refusals) > _REFUSALS_KEPT:
            self._refusals.popitem(last=False)

    def _wake(self, partition: int) -> None:
        applied = self._applied.get(partition, -1)
        waiting = self._waiters.get(partition)
        if not waiting:
            return
        remaining = []
        for offset, future in waiting:
            if offset > applied:
                remaining.append((offset, future))
            elif not future.done():
                refusal = self._refusals.get((partition, offset))
                if refusal is None:
                    future.set_result(None)
                else:
                    future.set_exception(refusal)
        self._waiters[partition] = remaining

    async def _applied_through(self, partition: int, offset: int) -> None:
        if self._applied.get(partition, -1) < offset:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(partition, []).append((offset, future))
            await future
            return
        refusal = self._refusals.get((partition, offset))
        if refusal is not None:
            raise refusal

    async def _next_progress(self) -> None:
        """Wait for the consumer to apply more records.

        :raises MetadataTopicError: the broker refuses the consumer READ on the topic.
        """
        if self._refused is None:
            await self._progress.wait()
        if self._refused is not None:
            raise self._refused

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.snapshot_interval_ms / 1000)
            if not self._changed:
                continue
            try:
                await self.snapshot()
            except OSError:
                event(
                    log,
                    logging.ERROR,
                    "metadata.snapshots.write_failed",
                    msg="could not write metadata snapshots; retrying later",
                    exc_info=True,
                )


def _skipped(partition: int, offset: int, err: Exception) -> None:
    event(
        log,
        logging.WARNING,
        "metadata.record.skipped",
        msg=f"skipping metadata record {partition}@{offset}: {err}",
        partition=partition,
        offset=offset,
    )


def _started(client: _T | None) -> _T:
    if client is None:
        raise RemoteLogMetadataError("the metadata manager is not started")
    return client
