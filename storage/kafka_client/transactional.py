"""A transactional producer on one topic: Kafka's fencing by ``transactional.id``.

What Kafka's ``TransactionManager`` does for a transactional ``KafkaProducer``, for the few
steps the tiering pipeline needs (transactions v1, :mod:`.transactions`):

- :meth:`TransactionalProducer.init` sends InitProducerId with the transactional id to its
  coordinator: the coordinator aborts a transaction an older holder left open, bumps the
  epoch, and from then on refuses every request of an older epoch (PRODUCER_FENCED,
  INVALID_PRODUCER_EPOCH). That refusal is Kafka's own fence; it is raised here as
  :class:`ProducerFencedError`, and nothing retries it;
- :meth:`~TransactionalProducer.add_partitions` adds partitions to the open transaction (a
  transaction opens with its first partition), :meth:`~TransactionalProducer.produce`
  appends a transactional batch (``acks=all``, idempotent sequences per partition, one batch
  in flight per partition), :meth:`~TransactionalProducer.end` commits or aborts;
- the coordinator is found with FindCoordinator (key type 1) and found again after
  NOT_COORDINATOR or a lost connection; COORDINATOR_LOAD_IN_PROGRESS and
  CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written) are
  retried with Kafka's producer back-off until the caller's deadline, as are a leader's
  retriable Produce errors.

The coordinator aborts a transaction left open longer than ``transaction.timeout.ms`` and
bumps the epoch as it does: a holder that stops (a crash, a pause) is fenced by Kafka
itself, without anyone else's clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

from protocol.errors import KafkaError
from protocol.records import Record
from storage.kafka_client.client import KafkaClient
from storage.kafka_client.leaders import PartitionLeaders, TopicAuthorizationError, is_retriable
from storage.kafka_client.producer import PRODUCER_RETRY, ProduceError, produce_on_leader
from storage.kafka_client.transactions import TransactionDescription
from storage.kafka_client.values import BrokerConnectionError, KafkaClientError
from storage.retry import RetryPolicy, call_with_retry
from storage.retry_log import RetryLog, log_failure, log_recovery

__all__ = [
    "FENCING_ERRORS",
    "ProducerFencedError",
    "TransactionAbortableError",
    "TransactionalIdAuthorizationError",
    "TransactionalProducer",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

FENCING_ERRORS: Final = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.INVALID_PRODUCER_ID_MAPPING,
    }
)
"""Answers that say this producer's epoch is no longer the transactional id's: another
InitProducerId fenced it, or the coordinator aborted its transaction on timeout."""
_COORDINATOR_MOVED: Final = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE}
)
_COORDINATOR_BUSY: Final = frozenset(
    {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.CONCURRENT_TRANSACTIONS}
)
_ABORTABLE: Final = frozenset(
    {
        KafkaError.TRANSACTION_ABORTABLE,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.INVALID_TXN_STATE,
    }
)
"""Answers after which the open transaction can only be aborted."""


class ProducerFencedError(KafkaClientError):
    """The transactional id has a newer epoch than this producer's: it is fenced for good."""


class TransactionalIdAuthorizationError(KafkaClientError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the principal lacks WRITE (or DESCRIBE) on
    the transactional id; no retry helps until an ACL is added."""

    def __init__(self, request: str, transactional_id: str) -> None:
        super().__init__(
            f"{request} for transactional id {transactional_id!r} answered "
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        )
        self.request = request
        self.transactional_id = transactional_id


class TransactionAbortableError(KafkaClientError):
    """The open transaction cannot be committed any more; abort it and try again."""


class _Retry(KafkaClientError):
    """An answer that a back-off (and maybe a new coordinator or leader) mends."""


class TransactionalProducer:
    """One transactional id's producer on ``topic``; not usable before :meth:`init`."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        topic: str,
        *,
        transaction_timeout_ms: int,
        request_timeout_ms: int = 30_000,
        retry: RetryPolicy = PRODUCER_RETRY,
    ) -> None:
        self._client = client
        self.transactional_id = transactional_id
        self._topic = topic
        self._timeout_ms = transaction_timeout_ms
        self._request_timeout_ms = request_timeout_ms
        self._retry = retry
        self._leaders = PartitionLeaders(client, topic)
        self._coordinator: int | None = None
        self._identity: tuple[int, int] | None = None
        self._sequences: dict[int, int] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    @property
    def identity(self) -> tuple[int, int] | None:
        """``(producer id, epoch)`` since :meth:`init`."""
        return self._identity

    async def describe(self) -> TransactionDescription:
        """The coordinator's state of the transactional id (DescribeTransactions; its
        error is TRANSACTIONAL_ID_NOT_FOUND for an id nobody used yet).

        :raises TransactionalIdAuthorizationError: the principal lacks DESCRIBE on it.
        """

        async def attempt() -> TransactionDescription:
            answer = await self._client.describe_transaction(
                await self._coordinator_id(), self.transactional_id
            )
            if answer.error != KafkaError.TRANSACTIONAL_ID_NOT_FOUND:
                self._check("DescribeTransactions", answer.error, fencing=False)
            return answer

        return await self._retried(attempt)

    async def init(self) -> tuple[int, int]:
        """A new epoch for the transactional id (InitProducerId): every older holder is
        fenced from now on, and a transaction it left open is aborted.

        :raises TransactionalIdAuthorizationError: the principal lacks WRITE on it.
        :raises KafkaClientError: INVALID_TRANSACTION_TIMEOUT (above the broker's
            ``transaction.max.timeout.ms``) or another error no retry mends.
        """

        async def attempt() -> tuple[int, int]:
            answer = await self._client.init_transactional_producer(
                await self._coordinator_id(),
                self.transactional_id,
                transaction_timeout_ms=self._timeout_ms,
            )
            self._check("InitProducerId", answer.error, fencing=False)
            return answer.producer_id, answer.epoch

        self._identity = None
        self._identity = await self._retried(attempt)
        self._sequences.clear()
        return self._identity

    async def add_partitions(self, partitions: Sequence[int]) -> None:
        """Add ``partitions`` of the topic to the open transaction (opening one if none is).

        :raises ProducerFencedError: the epoch is no longer the transactional id's.
        :raises TopicAuthorizationError: the principal lacks WRITE on the topic.
        """
        producer_id, epoch = self._held()

        async def attempt() -> None:
            errors = await self._client.add_partitions_to_txn(
                await self._coordinator_id(),
                self.transactional_id,
                producer_id=producer_id,
                epoch=epoch,
                topic=self._topic,
                partitions=partitions,
            )
            # OPERATION_NOT_ATTEMPTED marks the partitions Kafka skipped for another's error.
            for error in sorted(set(errors.values()) - {KafkaError.OPERATION_NOT_ATTEMPTED}):
                if error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise TopicAuthorizationError("AddPartitionsToTxn", self._topic)
                self._check("AddPartitionsToTxn", error)

        await self._retried(attempt)

    async def end(self, *, commit: bool) -> None:
        """Commit (or abort) the open transaction (EndTxn); its markers follow at once.

        :raises ProducerFencedError: the epoch is no longer the transactional id's (the
            transaction was aborted by whoever fenced it).
        """
        producer_id, epoch = self._held()

        async def attempt() -> None:
            error = await self._client.end_txn(
                await self._coordinator_id(),
                self.transactional_id,
                producer_id=producer_id,
                epoch=epoch,
                commit=commit,
            )
            self._check("EndTxn", error)

        await self._retried(attempt)

    async def produce(self, partition: int, records: Sequence[tuple[bytes | None, bytes]]) -> int:
        """Append ``(key, value)`` records to ``partition`` (already added to the open
        transaction) as one transactional batch; the offset of the first.

        :raises ProducerFencedError: the epoch is no longer the transactional id's.
        :raises TransactionAbortableError: the transaction must be aborted.
        :raises TopicAuthorizationError: the principal lacks WRITE on the topic.
        """
        now = int(time.time() * 1000)
        batch = [Record(key=key, value=value, timestamp=now) for key, value in records]
        async with self._locks.setdefault(partition, asyncio.Lock()):
            return await self._retried(lambda: self._produce_once(partition, batch))

    async def _produce_once(self, partition: int, records: Sequence[Record]) -> int:
        producer_id, epoch = self._held()
        sequence = self._sequences.get(partition, 0)
        answer = await produce_on_leader(
            self._client,
            self._leaders,
            self._topic,
            partition,
            records,
            producer_id=producer_id,
            epoch=epoch,
            base_sequence=sequence,
            timeout_ms=self._request_timeout_ms,
            retry=_Retry,
            transactional_id=self.transactional_id,
        )
        if answer.error == KafkaError.NONE:
            self._sequences[partition] = sequence + len(records)
            return answer.base_offset
        self._check("Produce", answer.error)
        where = f"Produce to {self._topic}-{partition}"
        raise ProduceError(answer.error, f"{where} failed: {answer.error.name}")

    def _held(self) -> tuple[int, int]:
        if self._identity is None:
            raise ProducerFencedError(
                f"transactional id {self.transactional_id!r}: no epoch held (init first)"
            )
        return self._identity

    def _check(self, request: str, error: KafkaError, *, fencing: bool = True) -> None:
        """Raise what ``error`` means for a transaction request (nothing for NONE)."""
        if error == KafkaError.NONE:
            return
        what = f"{request} for transactional id {self.transactional_id!r}: {error.name}"
        if error == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise TransactionalIdAuthorizationError(request, self.transactional_id)
        if error in _COORDINATOR_MOVED:
            self._coordinator = None
            raise _Retry(what)
        if error in _COORDINATOR_BUSY:
            raise _Retry(what)
        if fencing and error in FENCING_ERRORS:
            self._identity = None
            raise ProducerFencedError(what)
        if fencing and error in _ABORTABLE:
            raise TransactionAbortableError(what)
        raise KafkaClientError(what)

    async def _coordinator_id(self) -> int:
        if self._coordinator is None:
            found = await self._client.find_transaction_coordinator(self.transactional_id)
            self._check("FindCoordinator", found.error, fencing=False)
            self._coordinator = found.node_id
        return self._coordinator

    async def _retried(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        def retriable(error: Exception) -> bool:
            if isinstance(error, BrokerConnectionError):
                self._coordinator = None
            return isinstance(error, _Retry) or is_retriable(error)

        retries = RetryLog()
        warned = False

        def log_retry(attempt_number: int, error: Exception, wait: float) -> None:
            nonlocal warned
            # A coordinator loading, moving or writing a commit's markers is Kafka's normal
            # wait (its producer logs it at debug); a broker gone is worth a warning.
            level = logging.DEBUG if isinstance(error, _Retry) else logging.WARNING
            warned = warned or level == logging.WARNING
            log_failure(
                retries,
                log,
                "transaction.retry",
                error,
                lambda error, attempt: (
                    f"transactional id {self.transactional_id}: {error} (attempt "
                    f"{attempt}); retrying in {wait:.2f} s"
                ),
                level=level,
                transactional_id=self.transactional_id,
            )

        answer = await call_with_retry(
            attempt, policy=self._retry, is_retriable=retriable, on_retry=log_retry
        )
        log_recovery(
            retries,
            log,
            "transaction.reconnected",
            f"transactional id {self.transactional_id}",
            level=logging.INFO if warned else logging.DEBUG,
            transactional_id=self.transactional_id,
        )
        return answer
