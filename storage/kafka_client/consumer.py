"""Every partition of one topic, read in offset order without a consumer group.

This is the consumer of Kafka's ``ConsumerTask`` for the metadata topic: partitions are
assigned (``assign()``, never ``subscribe()``), nothing is committed, and each starts at a
position given by the caller (the offsets its snapshots hold) or at the beginning
(``auto.offset.reset=earliest``, also after OFFSET_OUT_OF_RANGE). With
``isolation_level=READ_COMMITTED`` (the metadata topic's, whose pipeline writes in
transactions) it reads up to each partition's last stable offset and skips the batches of
aborted transactions, as Kafka's consumer does. Each :meth:`poll` sends one
Fetch to each partition's leader, long-polling with Kafka's ``fetch.max.wait.ms`` (the broker
answers as soon as there is data). Errors that a refreshed leader or a wait can mend (a
leader change, a broker going away) forget the leaders, and the poll waits Kafka's consumer
back-off (``retry.backoff.ms`` 100 growing to ``retry.backoff.max.ms`` 1000) and answers
nothing: the caller polls again, so the consumer keeps waiting for the cluster however long
it is away. Those failures are logged with back-off (:class:`storage.retry_log.RetryLog`),
and the first poll that works after them logs ``metadata.consumer.reconnected``. Only a
refusal (TOPIC_AUTHORIZATION_FAILED) is raised.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from typing import Final

from protocol.errors import KafkaError, RemoteProtocolError
from protocol.record_reader import ConsumedRecord, records_from
from protocol.transaction_filter import AbortedRange, TransactionFilter
from storage.kafka_client.client import KafkaClient
from storage.kafka_client.leaders import (
    LeaderNotAvailableError,
    PartitionLeaders,
    TopicAuthorizationError,
    is_retriable,
)
from storage.kafka_client.values import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    FetchTarget,
    KafkaClientError,
)
from storage.log_event import event
from storage.retry import RetryPolicy, call_with_retry
from storage.retry_log import RetryLog, log_failure, log_recovery

__all__ = ["CONSUMER_RETRY", "FETCH_MAX_WAIT_MS", "AssignedConsumer"]

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS: Final = 500
"""Kafka's consumer ``fetch.max.wait.ms`` default."""
CONSUMER_RETRY: Final = RetryPolicy(
    backoff_ms=100, backoff_max_ms=1_000, max_attempts=1_000_000, deadline_ms=None
)
"""Kafka's consumer back-off; the caller's timeout ends the retries of :meth:`end_offsets`."""
_PARTITION_MAX_BYTES: Final = 1024 * 1024
"""Kafka's ``max.partition.fetch.bytes`` default."""
_FETCH_MAX_BYTES: Final = 50 * 1024 * 1024
"""Kafka's ``fetch.max.bytes`` default."""


class AssignedConsumer:
    """Reads partitions ``0 .. partitions - 1`` of ``topic`` through ``client``."""

    def __init__(
        self,
        client: KafkaClient,
        topic: str,
        partitions: int,
        *,
        max_wait_ms: int = FETCH_MAX_WAIT_MS,
        retry: RetryPolicy = CONSUMER_RETRY,
        uniform: Callable[[float, float], float] = random.uniform,
        isolation_level: int = READ_UNCOMMITTED,
        retry_log: RetryLog | None = None,
    ) -> None:
        self._client = client
        self._isolation_level = isolation_level
        self._transactions: dict[int, TransactionFilter] = {}
        """Per partition, the aborted transactions seen (READ_COMMITTED only)."""
        self._topic = topic
        self._max_wait_ms = max_wait_ms
        self._retry = retry
        self._uniform = uniform
        self._leaders = PartitionLeaders(client, topic)
        self._positions: dict[int, int | None] = dict.fromkeys(range(partitions))
        """The next offset to fetch; ``None``: the partition's log start, not yet asked."""
        self._ends: dict[int, int] = {}
        self._retry_log = retry_log or RetryLog()

    def seek(self, partition: int, offset: int) -> None:
        """Fetch ``partition`` from ``offset`` next."""
        self._positions[partition] = offset
        self._transactions.pop(partition, None)

    def position(self, partition: int) -> int | None:
        """The next offset to fetch (``None`` before the log start is known)."""
        return self._positions[partition]

    def end(self, partition: int) -> int | None:
        """How far the last successful Fetch could read (``None`` before one): the high
        watermark, or the last stable offset under READ_COMMITTED."""
        return self._ends.get(partition)

    async def poll(self) -> dict[int, list[ConsumedRecord]]:
        """The new records of each partition that one round of Fetches returned.

        :raises TopicAuthorizationError: the principal lacks READ (or DESCRIBE) on the topic.
        """
        try:
            found = await self._poll_once()
        except TopicAuthorizationError:
            raise
        except (KafkaClientError, RemoteProtocolError) as err:
            self._leaders.forget()
            wait = self._retry.backoff_seconds(self._retry_log.failures, self._uniform)
            log_failure(
                self._retry_log,
                log,
                "metadata.consumer.retry",
                err,
                lambda err, attempt: (
                    f"consuming {self._topic}: {err}; retrying in {wait:.2f} s (attempt {attempt})"
                ),
                topic=self._topic,
            )
            await asyncio.sleep(wait)
            return {}
        log_recovery(
            self._retry_log,
            log,
            "metadata.consumer.reconnected",
            f"consuming {self._topic}",
            topic=self._topic,
        )
        return found

    async def end_offsets(self, via: KafkaClient | None = None) -> dict[int, int]:
        """Each partition's end (ListOffsets LATEST: the log end offset, or the last stable
        offset under READ_COMMITTED), retried on leader changes until the caller's timeout.

        :param via: another client of the cluster to ask through, so that the question does
            not wait behind this consumer's long-polling Fetch on the same connection.
        """
        return await self._every_partition(LATEST_TIMESTAMP, via)

    async def start_offsets(self, via: KafkaClient | None = None) -> dict[int, int]:
        """Each partition's log start offset (ListOffsets EARLIEST), as :meth:`end_offsets`."""
        return await self._every_partition(EARLIEST_TIMESTAMP, via)

    async def _every_partition(self, timestamp: int, via: KafkaClient | None) -> dict[int, int]:
        async def ask() -> dict[int, int]:
            found = await self._list_offsets(list(self._positions), timestamp, via)
            if len(found) < len(self._positions):
                raise LeaderNotAvailableError(f"not every partition of {self._topic} answered")
            return found

        def forget(attempt: int, error: Exception, wait: float) -> None:
            self._leaders.forget()

        return await call_with_retry(
            ask, policy=self._retry, is_retriable=is_retriable, on_retry=forget
        )

    async def _poll_once(self) -> dict[int, list[ConsumedRecord]]:
        unknown = [p for p, offset in self._positions.items() if offset is None]
        if unknown:
            self._positions.update(await self._list_offsets(unknown, EARLIEST_TIMESTAMP))
        ready = [p for p, offset in self._positions.items() if offset is not None]
        groups = await self._leaders.by_leader(ready)
        if not groups:
            raise LeaderNotAvailableError(f"no partition of {self._topic} can be read yet")
        rounds = await asyncio.gather(
            *(self._fetch_from(leader, partitions) for leader, partitions in groups.items()),
            return_exceptions=True,
        )
        found: dict[int, list[ConsumedRecord]] = {}
        failures = []
        for answer in rounds:
            if isinstance(answer, TopicAuthorizationError | asyncio.CancelledError):
                raise answer
            if isinstance(answer, BaseException):
                failures.append(answer)
            else:
                found.update(answer)
        if failures and not found:
            raise failures[0]
        return found

    async def _fetch_from(
        self, leader: int, partitions: Sequence[int]
    ) -> dict[int, list[ConsumedRecord]]:
        targets = []
        for partition in partitions:
            offset = self._positions[partition]
            assert offset is not None
            targets.append(
                FetchTarget(
                    topic=self._topic,
                    partition=partition,
                    offset=offset,
                    max_bytes=_PARTITION_MAX_BYTES,
                )
            )
        try:
            answers = await self._client.fetch(
                leader,
                targets,
                max_wait_ms=self._max_wait_ms,
                min_bytes=1,
                max_bytes=_FETCH_MAX_BYTES,
                isolation_level=self._isolation_level,
            )
        except KafkaClientError:
            self._leaders.forget(partitions)
            raise
        found: dict[int, list[ConsumedRecord]] = {}
        for answer in answers:
            partition = answer.partition
            if answer.error == KafkaError.NONE:
                committed = self._isolation_level == READ_COMMITTED
                self._ends[partition] = (
                    answer.last_stable_offset
                    if committed and answer.last_stable_offset >= 0
                    else answer.high_watermark
                )
                found[partition], self._positions[partition] = records_from(
                    answer.records, self._positions[partition] or 0, self._filter(answer)
                )
            else:
                self._partition_failed(partition, answer.error)
        if not found:
            raise LeaderNotAvailableError(f"Fetch from broker {leader} returned no partition")
        return found

    def _filter(self, answer: FetchedPartition) -> TransactionFilter | None:
        """The partition's filter of aborted transactions, told this answer's (READ_COMMITTED)."""
        if self._isolation_level != READ_COMMITTED:
            return None
        found = self._transactions.setdefault(answer.partition, TransactionFilter())
        found.add(
            [AbortedRange(producer_id=p, first_offset=f) for p, f in answer.aborted_transactions]
        )
        return found

    def _partition_failed(self, partition: int, error: KafkaError) -> None:
        if error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise TopicAuthorizationError("Fetch", self._topic)
        if error == KafkaError.OFFSET_OUT_OF_RANGE:
            event(
                log,
                logging.WARNING,
                "metadata.consumer.offset_out_of_range",
                msg=f"{self._topic}-{partition}: offset {self._positions[partition]} is out "
                "of range; reading from the log start",
                topic=self._topic,
                partition=partition,
            )
            self._positions[partition] = None
            self._transactions.pop(partition, None)
            return
        event(
            log,
            logging.INFO,
            "metadata.consumer.leader_lost",
            msg=f"{self._topic}-{partition}: Fetch answered {error.name}; asking for its leader",
            topic=self._topic,
            partition=partition,
            error=error.name,
        )
        self._leaders.forget([partition])

    async def _list_offsets(
        self, partitions: Sequence[int], timestamp: int, via: KafkaClient | None = None
    ) -> dict[int, int]:
        """The offsets ListOffsets gives for ``partitions``; those whose leader is unknown or
        that answered an error are left out (their leaders forgotten)."""
        groups = await self._leaders.by_leader(partitions)
        offsets: dict[int, int] = {}
        for leader, led in groups.items():
            targets = [(self._topic, p, timestamp) for p in led]
            try:
                answers = await (via or self._client).list_offsets(
                    leader, targets, isolation_level=self._isolation_level
                )
            except KafkaClientError:
                self._leaders.forget(led)
                raise
            for answer in answers:
                if answer.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise TopicAuthorizationError("ListOffsets", self._topic)
                if answer.error == KafkaError.NONE:
                    offsets[answer.partition] = answer.offset
                else:
                    self._leaders.forget([answer.partition])
        return offsets
