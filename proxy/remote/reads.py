"""Remote reads for the partitions of a Fetch: started in the reader pool, and their outcomes.

A read is started only within the remote fetch quota (KIP-956: over it, the partition gets
no records and no error) and while the reader pool's queue has room. Its outcome becomes the
partition's answer:

- Records: whole batches from the one holding the fetch offset (the caller bounds them).
- Remote storage failing or overloaded (unreachable, timed out, reader queue full, damaged
  object): KAFKA_STORAGE_ERROR. Apache Kafka itself answers UNKNOWN_SERVER_ERROR here (its
  ``RemoteStorageException`` is not an ``ApiException``, so ``Errors.forException`` maps it
  to -1); but librdkafka hands UNKNOWN_SERVER_ERROR to the application as a consumer error,
  while every client (Java, librdkafka, kafka-python, aiokafka) retries KAFKA_STORAGE_ERROR
  quietly after a metadata refresh. It is also what the error means: "disk error when
  trying to access log file", retriable. Each such answer is counted by reason.
- The segment was deleted between lookup and read, or the offset left the remote tier:
  OFFSET_OUT_OF_RANGE, so the client re-resolves its position with ListOffsets.
- A READ_COMMITTED read that reaches a transaction the remote tier cannot resolve: no
  records and no error when the broker still holds the offset (it serves the partition from
  then on, see :mod:`proxy.remote.unresolved`), KAFKA_STORAGE_ERROR otherwise.
- The read did not finish within the purgatory's wait: no records and no error, as Kafka
  does; the client asks again and finds the data in the cache.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import KafkaError
from protocol.indexes import CorruptIndexError
from protocol.records import CorruptRecordBatchError
from proxy.logs import event
from proxy.remote.broker_view import BrokerView
from proxy.remote.fetch_plan import TieredPartition
from proxy.remote.metrics import ReadCounters
from proxy.remote.pool import ReaderPool, ReaderPoolFullError
from proxy.remote.quota import FetchQuota
from proxy.remote.unresolved import UnresolvedTransactions
from storage.model import TopicIdPartition
from storage.remote_reader import (
    OffsetNotInRemoteError,
    RemoteLogReader,
    RemoteRecords,
    UnresolvedTransactionError,
)
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError

__all__ = ["Outcome", "RemoteReads", "Started"]

_log = logging.getLogger("tierproxy.fetch")

_NONE: Final = int(KafkaError.NONE)
_OUT_OF_RANGE: Final = int(KafkaError.OFFSET_OUT_OF_RANGE)
_STORAGE_ERROR: Final = int(KafkaError.KAFKA_STORAGE_ERROR)

Started = asyncio.Future[RemoteRecords] | int | None
"""A started read's future, the error code to answer at once (queue full), or ``None`` when
the quota says to answer without records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a finished (or unfinished) read answers for its partition."""

    error: int
    records: RemoteRecords | None


class RemoteReads:
    """Starts remote reads and turns their results into partition answers."""

    def __init__(
        self,
        *,
        pool: ReaderPool,
        reader: RemoteLogReader,
        quota: FetchQuota,
        broker_view: BrokerView,
        unresolved: UnresolvedTransactions,
        counters: ReadCounters,
    ) -> None:
        self._pool = pool
        self._reader = reader
        self._quota = quota
        self._broker = broker_view
        self._unresolved = unresolved
        self._counters = counters

    def start(
        self, client: int, tiered: TieredPartition, max_bytes: int, *, read_committed: bool
    ) -> Started:
        """Start reading ``tiered`` from its fetch offset for ``client`` (a connection)."""
        if self._quota.exceeded():
            return None

        async def read() -> RemoteRecords:
            return await self._reader.read(
                tiered.tp,
                tiered.position.fetch_offset,
                max(0, max_bytes),
                read_committed=read_committed,
            )

        try:
            future: asyncio.Future[RemoteRecords] = self._pool.submit(client, read)
        except ReaderPoolFullError:
            self._counters.read_failed(tiered.tp.topic, "queue-full")
            return _STORAGE_ERROR
        # A read whose answer is not used (the broker refused the partition, the purgatory
        # expired) must not be reported as an unhandled error.
        future.add_done_callback(_retrieve)
        self._counters.read_started(tiered.tp.topic)
        return future

    def served(self, tp: TopicIdPartition, size: int) -> None:
        """``size`` bytes of ``tp`` went to a client: they count against the quota."""
        if size:
            self._quota.record(size)
            self._counters.bytes_served(tp.topic, size)

    def outcome(self, tiered: TieredPartition, future: asyncio.Future[RemoteRecords]) -> Outcome:
        """The answer a read gives; no records and no error while it is still running."""
        if not future.done() or future.cancelled():
            return Outcome(error=_NONE, records=None)
        err = future.exception()
        if err is None:
            return Outcome(error=_NONE, records=future.result())
        tp, offset = tiered.tp, tiered.position.fetch_offset
        if isinstance(err, OffsetNotInRemoteError | RemoteResourceNotFoundError):
            self._counters.read_failed(tp.topic, "not-found")
            return Outcome(error=_OUT_OF_RANGE, records=None)
        if isinstance(err, UnresolvedTransactionError):
            broker_start = self._broker.state(tp).log_start_offset
            if broker_start is not None and broker_start <= offset:
                # Offloaded: the broker has these records and their outcome; let it serve
                # them (the client asks again at once, as after an empty answer).
                self._unresolved.remember(tp, tiered.remote, offset)
                return Outcome(error=_NONE, records=None)
            self._counters.read_failed(tp.topic, "unresolved-transaction")
            return Outcome(error=_STORAGE_ERROR, records=None)
        reason = "storage"
        if isinstance(err, CorruptIndexError | CorruptRecordBatchError):
            reason = "corrupt"
        elif not isinstance(err, RemoteStorageError):
            reason = "internal"
        event(
            _log,
            logging.WARNING,
            "remote.read.failed",
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            reason=reason,
            error=repr(err),
        )
        self._counters.read_failed(tp.topic, reason)
        return Outcome(error=_STORAGE_ERROR, records=None)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
