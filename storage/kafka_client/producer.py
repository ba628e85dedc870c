"""Records to chosen partitions of one topic, each acknowledged by every in-sync replica.

This is the producer of Kafka's ``ProducerManager`` for the metadata topic, with the settings
``TopicBasedRemoteLogMetadataManagerConfig`` gives it: ``acks=all``, one request in flight
per partition, and (the Java default with those two) idempotence, so a batch retried after
a lost acknowledgement is written once and answered with its first offset. Retriable errors
(NOT_LEADER_OR_FOLLOWER, a connection lost, no leader yet, ...) refresh the partition's
leader and retry with Kafka's producer back-off (``retry.backoff.ms`` 100 growing to
``retry.backoff.max.ms`` 1000) until the caller's deadline, as ``delivery.timeout.ms`` bounds
Kafka's retries.

Only Apache Kafka gets idempotent batches: the broker kinds the tests know otherwise (Tansu)
are sent plain batches, as aiokafka sent them before. A principal refused InitProducerId
(brokers before KIP-679 want IDEMPOTENT_WRITE on the cluster) also falls back to plain
batches, with a warning, rather than stopping the manager.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Final, Protocol

from protocol.errors import KafkaError
from protocol.messages import ApiKey
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Record, build_record_batch
from storage.kafka_client.client import KafkaClient
from storage.kafka_client.leaders import PartitionLeaders, TopicAuthorizationError, is_retriable
from storage.kafka_client.values import RETRIABLE_ERRORS, KafkaClientError, ProducedBatch
from storage.log_event import event
from storage.retry import RetryPolicy, call_with_retry
from storage.retry_log import RetryLog, log_failure, log_recovery

__all__ = ["PRODUCER_RETRY", "ProduceError", "RecordWriter", "TopicProducer", "produce_on_leader"]

log = logging.getLogger(__name__)

PRODUCER_RETRY: Final = RetryPolicy(
    backoff_ms=100, backoff_max_ms=1_000, max_attempts=1_000_000, deadline_ms=None
)
"""Kafka's producer back-off; the caller's timeout ends the retries."""
_NO_IDENTITY: Final = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
_STALE_IDENTITY: Final = frozenset(
    {
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)
"""Produce errors after which Kafka's idempotent producer starts a new producer epoch."""
_COORDINATOR_BUSY: Final = frozenset(
    {
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


class RecordWriter(Protocol):
    """Appends a record to a partition of one topic (:class:`TopicProducer`, or the
    pipeline's transactional writer)."""

    async def send(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Return the record's offset once every in-sync replica has it."""
        ...


class ProduceError(KafkaClientError):
    """The broker refused the record for good (the message names the error)."""

    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(message)
        self.error = error


class _Retry(KafkaClientError):
    """A retriable answer: the leader moved, the producer id is stale, or replicas lag."""


async def produce_on_leader(
    client: KafkaClient,
    leaders: PartitionLeaders,
    topic: str,
    partition: int,
    records: Sequence[Record],
    *,
    producer_id: int,
    epoch: int,
    base_sequence: int,
    timeout_ms: int,
    retry: type[KafkaClientError],
    transactional_id: str | None = None,
) -> ProducedBatch:
    """One Produce of ``records``, as one batch of ``producer_id`` and ``epoch`` from
    ``base_sequence`` (transactional when ``transactional_id`` is given), to the partition's
    current leader; the answer when it is neither retriable nor a refused WRITE. The leader
    is forgotten whenever the request failed or the answer said retriable, so the next
    attempt asks again.

    :raises KafkaClientError: the request failed (the leader forgotten).
    :raises TopicAuthorizationError: the principal lacks WRITE on the topic.
    :raises KafkaClientError: ``retry`` for a retriable answer (the leader forgotten).
    """
    batch = build_record_batch(
        base_offset=0,
        records=records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        is_transactional=transactional_id is not None,
    )
    leader = await leaders.leader(partition)
    try:
        answer = await client.produce(
            leader,
            topic,
            partition,
            batch,
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
        )
    except KafkaClientError:
        leaders.forget([partition])
        raise
    if answer.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise TopicAuthorizationError("Produce", topic)
    if answer.error in RETRIABLE_ERRORS:
        leaders.forget([partition])
        raise retry(f"Produce to {topic}-{partition}: {answer.error.name}")
    return answer


class TopicProducer:
    """Produces records to chosen partitions of ``topic``, one batch per call."""

    def __init__(
        self,
        client: KafkaClient,
        topic: str,
        *,
        retry: RetryPolicy = PRODUCER_RETRY,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self._client = client
        self._topic = topic
        self._retry = retry
        self._timeout_ms = request_timeout_ms
        self._leaders = PartitionLeaders(client, topic)
        self._identity: tuple[int, int] | None = None
        self._sequences: dict[int, int] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def send(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Append one record to ``partition`` and return its offset once all in-sync replicas
        have it. Cancel the call (a timeout) to stop retrying.

        :raises TopicAuthorizationError: the principal lacks WRITE on the topic.
        :raises ProduceError: for any other error that no retry mends.
        """
        return await self.send_batch(partition, [(key, value)])

    async def send_batch(
        self, partition: int, records: Sequence[tuple[bytes | None, bytes | None]]
    ) -> int:
        """Append ``(key, value)`` records to ``partition`` as one batch, as :meth:`send` does
        one record; returns the offset of the first."""
        now = int(time.time() * 1000)
        batch = [Record(key=key, value=value, timestamp=now) for key, value in records]
        lock = self._locks.setdefault(partition, asyncio.Lock())
        retries = RetryLog()

        def log_retry(attempt: int, error: Exception, wait: float) -> None:
            log_failure(
                retries,
                log,
                "producer.retry",
                error,
                lambda error, number: (
                    f"producing to {self._topic}: {error} (attempt {number}); "
                    f"retrying in {wait:.2f} s"
                ),
                topic=self._topic,
            )

        async with lock:  # one batch in flight per partition keeps sequences in order
            try:
                offset = await call_with_retry(
                    lambda: self._attempt(partition, batch),
                    policy=self._retry,
                    is_retriable=lambda e: isinstance(e, _Retry) or is_retriable(e),
                    on_retry=log_retry,
                )
            except BaseException:
                # The last batch may or may not be in the log: a new producer epoch keeps a
                # later batch from being refused as out of sequence, as Kafka's producer does.
                self._identity = None
                raise
        log_recovery(
            retries, log, "producer.reconnected", f"producing to {self._topic}", topic=self._topic
        )
        return offset

    async def _attempt(self, partition: int, records: Sequence[Record]) -> int:
        producer_id, epoch = await self._producer_identity()
        sequence = self._sequences.get(partition, 0) if producer_id >= 0 else -1
        answer = await produce_on_leader(
            self._client,
            self._leaders,
            self._topic,
            partition,
            records,
            producer_id=producer_id,
            epoch=epoch,
            base_sequence=sequence,
            timeout_ms=self._timeout_ms,
            retry=_Retry,
        )
        if answer.error == KafkaError.NONE:
            if producer_id >= 0 and self._identity == (producer_id, epoch):
                self._sequences[partition] = sequence + len(records)
            return answer.base_offset
        where = f"Produce to {self._topic}-{partition}"
        if answer.error in _STALE_IDENTITY and producer_id >= 0:
            self._identity = None
            raise _Retry(f"{where}: {answer.error.name}; starting a new producer epoch")
        detail = f" ({answer.message})" if answer.message else ""
        raise ProduceError(answer.error, f"{where} failed: {answer.error.name}{detail}")

    async def _producer_identity(self) -> tuple[int, int]:
        if self._identity is not None:
            return self._identity
        if await self._client.detect_broker_kind() != "kafka" or not await self._client.speaks(
            ApiKey.INIT_PRODUCER_ID
        ):
            self._identity = _NO_IDENTITY
            return self._identity
        error, producer_id, epoch = await self._client.init_producer_id()
        if error in _COORDINATOR_BUSY:
            raise _Retry(f"InitProducerId: {error.name}")
        if error != KafkaError.NONE:
            event(
                log,
                logging.WARNING,
                "producer.not_idempotent",
                msg=f"InitProducerId answered {error.name}: producing to {self._topic} without "
                "idempotence (a retried record may then be written twice; grant WRITE on the "
                "topic, or IDEMPOTENT_WRITE on the cluster for brokers before Kafka 2.8)",
                topic=self._topic,
                error=error.name,
            )
            self._identity = _NO_IDENTITY
            return self._identity
        self._identity = (producer_id, epoch)
        self._sequences.clear()
        return self._identity
