"""Remote reads for the partitions of a Fetch: started in the reader pool, and their outcomes.

A read is started only within the remote fetch quota (KIP-956: over it, the partition gets
no records and no error) and while the reader pool's queue has room. Its outcome becomes the
partition's answer:

- Records: whole batches from the one holding the fetch offset (the caller bounds them).
- Any miss for an offset the broker still holds (the offload policy served it remotely):
  no records and no error, and the broker serves it from the next Fetch on (see
  :mod:`proxy.remote.fallbacks`). The cases below are for offsets only the remote tier has.
- Remote storage failing or overloaded (unreachable, timed out, reader queue full, damaged
  object): KAFKA_STORAGE_ERROR. Apache Kafka itself answers UNKNOWN_SERVER_ERROR here (its
  ``RemoteStorageException`` is not an ``ApiException``, so ``Errors.forException`` maps it
  to -1); but librdkafka hands UNKNOWN_SERVER_ERROR to the application as a consumer error,
  while every client (Java, librdkafka, kafka-python, aiokafka) retries KAFKA_STORAGE_ERROR
  quietly after a metadata refresh. It is also what the error means: "disk error when
  trying to access log file", retriable. Each such answer is counted by reason.
- The offset left the remote tier (no readable copy holds it): OFFSET_OUT_OF_RANGE, so
  the client re-resolves its position with ListOffsets. Kafka's ``RemoteLogManager.read``
  throws ``OffsetOutOfRangeException`` there too.
- Remote storage answers "not found" (``RemoteResourceNotFoundError``): KAFKA_STORAGE_ERROR,
  reason ``not-found``. Either retention deleted the segment between lookup and read, and
  the retry finds the right answer, or an object the metadata lists is gone, and the reader
  has reported it (:mod:`proxy.remote.missing_objects` logs and shows it). Never
  OFFSET_OUT_OF_RANGE: a client would reset its position (``auto.offset.reset``), skipping
  records or re-reading from the start in a loop, while the data may come back. Kafka
  answers UNKNOWN_SERVER_ERROR here (``RemoteLogReader.call`` hands the
  ``RemoteResourceNotFoundException`` to ``Errors.forException``, and it is no
  ``ApiException``); the proxy answers the retriable error for the reason above.
- A READ_COMMITTED read that reaches a transaction the remote tier cannot resolve:
  KAFKA_STORAGE_ERROR, retried until the marker's segment is tiered.
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
from proxy.remote.fallbacks import STORE_OUTAGE_SECONDS, BrokerFallbacks
from proxy.remote.fetch_plan import TieredPartition
from proxy.remote.metrics import ReadCounters
from proxy.remote.pool import ReaderPool, ReaderPoolFullError
from proxy.remote.quota import FetchQuota
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
        fallbacks: BrokerFallbacks,
        counters: ReadCounters,
    ) -> None:
        self._pool = pool
        self._reader = reader
        self._quota = quota
        self._broker = broker_view
        self._fallbacks = fallbacks
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

    def settle(self, tiered: TieredPartition, future: asyncio.Future[RemoteRecords]) -> Outcome:
        """The answer a read gives; no records and no error while it is still running.

        Not a query: a failed read is counted and logged here, and a failure at an offset the
        broker still holds hands the partition back to the broker for a while (see
        :mod:`proxy.remote.fallbacks`). Called once per read that goes into a response.
        """
        if not future.done() or future.cancelled():
            return Outcome(error=_NONE, records=None)
        err = future.exception()
        if err is None:
            return Outcome(error=_NONE, records=future.result())
        tp, offset = tiered.tp, tiered.position.fetch_offset
        if isinstance(err, OffsetNotInRemoteError):
            error, reason, lasting = _OUT_OF_RANGE, "out-of-range", True
        elif isinstance(err, RemoteResourceNotFoundError):
            error, reason, lasting = _STORAGE_ERROR, "not-found", False  # logged by the reader
        elif isinstance(err, UnresolvedTransactionError):
            error, reason, lasting = _STORAGE_ERROR, "unresolved-transaction", True
        else:
            error, reason, lasting = _STORAGE_ERROR, _failure_reason(err), False
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
        if self._broker.state(tp).broker_holds(offset):
            self._fallbacks.remember(
                tp,
                tiered.remote,
                offset,
                read_committed_only=isinstance(err, UnresolvedTransactionError),
                for_seconds=None if lasting else STORE_OUTAGE_SECONDS,
            )
            return Outcome(error=_NONE, records=None)
        return Outcome(error=error, records=None)


def _failure_reason(err: BaseException) -> str:
    if isinstance(err, CorruptIndexError | CorruptRecordBatchError):
        return "corrupt"
    if isinstance(err, RemoteStorageError):
        return "storage"
    return "internal"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
