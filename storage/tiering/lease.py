"""One pipeline at a time per cluster, fenced by Kafka: the hold on a transactional id.

Kafka's leader runs one RLM copier per partition; tierproxy's pipeline must likewise be the
only one acting on a cluster's tiered data. Two pipelines at once (a rolling update that
starts the new one first, a second cron entry, a paused process that resumes) would take
each other's fresh copies for leftovers, and one could then move the broker's log start
over a range the other had just deleted from the remote tier.

:class:`PipelineLease` holds ``transactional.id`` (one per cluster and pipeline) with a
:class:`~storage.kafka_client.transactional.TransactionalProducer` on the metadata topic:

- :meth:`~PipelineLease.acquire` waits while another pipeline holds it
  (:class:`.holding.HolderWatch`, one log line per holder: "another pipeline holds ... since
  ..."), then sends InitProducerId, which fences every older holder, and opens a transaction;
- every metadata record the driver publishes goes through :meth:`~PipelineLease.send`: the
  records that arrive together are produced in the open transaction and committed (one
  transaction per group), and the next transaction is opened at once. A fenced pipeline's
  produce or commit is refused by Kafka (PRODUCER_FENCED); metadata readers read
  READ_COMMITTED, so nothing of a fenced transaction is ever applied;
- a transaction is committed and reopened at least every third of ``transaction.timeout.ms``
  (a renewal); the coordinator aborts one left open longer, which fences a holder that
  stopped (crashed, paused) without anyone's clock;
- what Kafka cannot fence (deleting objects, DeleteRecords, starting the copy job) asks
  :meth:`~PipelineLease.ensure_held` first, which is true only while the holder's own
  monotonic clock is within the bound Kafka's timeout guarantees (:class:`.holding.HoldClock`);
  the copy tasks check the holder's epoch with the coordinator before each segment
  (:mod:`.tier_stage`);
- :meth:`~PipelineLease.release` aborts the open transaction, which hands the hold over at
  once (a waiting pipeline takes over on ``CompleteAbort``).

A broker without the transaction APIs (Tansu, Kafka before 3.0) cannot fence: the lease then
always holds, writes with an idempotent producer, and says so once at
:meth:`~PipelineLease.acquire`. :class:`UnfencedLease` stands in where fencing is off
(``transactional.id = ""``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from protocol.messages import ApiKey
from storage.kafka_client import KafkaClient
from storage.kafka_client.producer import TopicProducer
from storage.kafka_client.transactional import ProducerFencedError, TransactionalProducer
from storage.log_event import event
from storage.tiering.holding import RENEWALS_PER_TIMEOUT, Free, HoldClock, HolderWatch

__all__ = [
    "Fence",
    "Hold",
    "HolderToken",
    "NotHoldingError",
    "PipelineLease",
    "UnfencedLease",
]

log = logging.getLogger(__name__)

_TRANSACTION_APIS: Final = (
    ApiKey.FIND_COORDINATOR,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.DESCRIBE_TRANSACTIONS,
)
_ABORT_SCAN_S: Final = 10.0
"""Kafka's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: how late after its
timeout the coordinator may abort a stopped holder's transaction."""
_POLL_S: Final = 1.0
"""How often a waiting pipeline asks the coordinator about the holder (at most a quarter of
the timeout): one small request a second."""


class NotHoldingError(Exception):
    """This pipeline does not hold the cluster's tiering (any more): it must neither write
    metadata, delete objects, nor send DeleteRecords until it holds it again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HolderToken:
    """What a copy task checks with the coordinator before it announces a segment."""

    transactional_id: str
    producer_id: int
    epoch: int


class Fence(Protocol):
    """What the cycle's steps ask before anything Kafka does not fence."""

    def ensure_held(self) -> None:
        """:raises NotHoldingError: unless this pipeline holds the cluster's tiering."""
        ...

    @property
    def token(self) -> HolderToken | None:
        """The hold the copy tasks check (``None``: unfenced, nothing to check)."""
        ...


class Hold(Fence, Protocol):
    """The pipeline's hold on the cluster's tiering, as the driver's loop uses it."""

    @property
    def holding(self) -> bool:
        """Whether this pipeline holds it now."""
        ...

    async def acquire(
        self, *, stop: asyncio.Event | None = None, patience: float | None = None
    ) -> bool:
        """Wait until it can be taken, and take it (``False``: stopped or out of patience)."""
        ...

    async def release(self) -> None:
        """Give it up."""
        ...


class UnfencedLease:
    """No fencing: fencing is off, or the broker has no transactions. Always holds."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def ensure_held(self) -> None:
        return

    @property
    def token(self) -> HolderToken | None:
        return None

    @property
    def holding(self) -> bool:
        return True

    async def acquire(
        self, *, stop: asyncio.Event | None = None, patience: float | None = None
    ) -> bool:
        event(
            log,
            logging.WARNING,
            "tiering.lease.unfenced",
            msg=f"the pipeline is not fenced ({self.reason}): nothing stops a second pipeline "
            "on this cluster, and two at once delete each other's copies; run exactly one",
        )
        return True

    async def release(self) -> None:
        return


@dataclass(slots=True, kw_only=True)
class _Pending:
    partition: int
    key: bytes | None
    value: bytes
    future: asyncio.Future[int]


class PipelineLease:
    """The hold on ``transactional_id``, and the transactional writer of the metadata topic.

    :param lease_partition: the metadata partition each transaction is opened with (it
        gets one commit marker per renewal).
    :param monotonic: the clock of :class:`.holding.HoldClock` (seconds).
    """

    def __init__(
        self,
        client: KafkaClient,
        *,
        transactional_id: str,
        topic: str,
        lease_partition: int = 0,
        transaction_timeout_ms: int,
        request_timeout_ms: int = 30_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._topic = topic
        self._unfenced: TopicProducer | None = None
        """The writer when the broker has no transactions (then the lease always holds)."""
        self._producer = TransactionalProducer(
            client,
            transactional_id,
            topic,
            transaction_timeout_ms=transaction_timeout_ms,
            request_timeout_ms=request_timeout_ms,
        )
        self.transactional_id = transactional_id
        self._lease_partition = lease_partition
        self._timeout = transaction_timeout_ms / 1000
        self._clock = HoldClock(self._timeout)
        self._monotonic = monotonic
        self._txn = asyncio.Lock()
        """One transaction at a time: a group of records, or a renewal."""
        self._in_txn: set[int] = set()
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._identity: tuple[int, int] | None = None
        self._last_identity: tuple[int, int] | None = None
        self._lost_reason = ""
        self.lost = asyncio.Event()
        """Set when a hold is lost (fenced, or not renewed in time)."""

    @property
    def token(self) -> HolderToken | None:
        identity = self._identity
        if self._unfenced is not None:
            return None
        if identity is None:
            return None
        return HolderToken(
            transactional_id=self.transactional_id, producer_id=identity[0], epoch=identity[1]
        )

    @property
    def holding(self) -> bool:
        """Whether this pipeline holds the transactional id now."""
        if self._unfenced is not None:
            return True
        return self._identity is not None and self._clock.held(self._monotonic())

    def ensure_held(self) -> None:
        """:raises NotHoldingError: unless this pipeline holds the transactional id now."""
        if not self.holding:
            why = f": {self._lost_reason}" if self._lost_reason else ""
            raise NotHoldingError(
                f"this pipeline does not hold transactional id {self.transactional_id!r}{why}"
            )

    async def acquire(
        self, *, stop: asyncio.Event | None = None, patience: float | None = None
    ) -> bool:
        """Wait until no other pipeline holds the transactional id, then take it.

        Logs one line per other holder while waiting. Returns ``False`` (holding nothing)
        if ``stop`` is set or ``patience`` seconds pass first.

        :raises TransactionalIdAuthorizationError: the principal lacks DESCRIBE or WRITE
            on the transactional id.
        """
        if self._unfenced is not None or not await self._fences():
            return True
        watch = HolderWatch(self._timeout)
        started = self._monotonic()
        while True:
            if not await self._wait_until_free(watch, started, stop, patience):
                return False
            try:
                async with self._txn:
                    self._identity = await self._producer.init()
                    self._lost_reason = ""
                    self.lost.clear()
                    await self._open()
            except ProducerFencedError as err:
                # Another waiting pipeline took it in the same moment: wait for it in turn.
                self._forget(take_back=None)
                event(
                    log,
                    logging.INFO,
                    "tiering.lease.taken_first",
                    msg=f"transactional id {self.transactional_id!r} was taken first ({err})",
                    transactional_id=self.transactional_id,
                )
                continue
            break
        self._renewer = asyncio.create_task(self._renew_loop(), name="tiering-lease-renewal")
        producer_id, epoch = self._identity
        event(
            log,
            logging.INFO,
            "tiering.lease.held",
            msg=f"holding transactional id {self.transactional_id!r} (producer id "
            f"{producer_id}, epoch {epoch}): this pipeline tiers the cluster",
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            epoch=epoch,
        )
        return True

    async def _wait_until_free(
        self,
        watch: HolderWatch,
        started: float,
        stop: asyncio.Event | None,
        patience: float | None,
    ) -> bool:
        """Ask the coordinator until nobody else holds the id (``False``: stopped, or out of
        ``patience``), logging each other holder once."""
        poll = min(_POLL_S, self._timeout / 4)
        while True:
            answer = await self._producer.describe()
            if (answer.producer_id, answer.epoch) == self._last_identity:
                return True  # our own hold, lost to a failed renewal: take it back at once
            verdict = watch.observe(answer, self._monotonic())
            if isinstance(verdict, Free):
                event(
                    log,
                    logging.INFO,
                    "tiering.lease.taking",
                    msg=f"taking transactional id {self.transactional_id!r}: {verdict.reason}",
                    transactional_id=self.transactional_id,
                )
                return True
            if verdict.new:
                since = _wall_time(verdict.since, self._monotonic())
                within = self._timeout + _ABORT_SCAN_S + poll
                event(
                    log,
                    logging.INFO,
                    "tiering.lease.waiting",
                    msg=f"another pipeline holds transactional id {self.transactional_id!r} "
                    f"(producer id {verdict.producer_id}, epoch {verdict.epoch}) since {since}; "
                    f"waiting to take over (within about {within:.0f} s of it stopping)",
                    transactional_id=self.transactional_id,
                    producer_id=verdict.producer_id,
                    epoch=verdict.epoch,
                )
            if patience is not None and self._monotonic() - started >= patience:
                return False
            if await _wait(stop, poll):
                return False

    async def send(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Produce one record to ``partition`` of the metadata topic in a transaction and
        return its offset once the transaction is committed (records sent together share a
        transaction). Cancelling the call before its transaction starts keeps it unwritten.

        :raises NotHoldingError: the hold is lost (fenced: nothing of it was committed).
        """
        if self._unfenced is not None:
            return await self._unfenced.send(partition, value, key)
        self.ensure_held()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append(
            _Pending(partition=partition, key=key, value=value or b"", future=future)
        )
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="tiering-lease-flush")
        return await future

    async def release(self) -> None:
        """Give the hold up: abort the open transaction (a waiting pipeline takes over at
        once) and stop renewing; records already sent are committed first. Safe to call
        when nothing is held."""
        await _cancelled(self._renewer)
        self._renewer = None
        if self._identity is not None:
            async with self._txn:  # after the group being written, if any
                try:
                    async with asyncio.timeout(self._remaining()):
                        if not self._in_txn:
                            await self._open()
                        await self._producer.end(commit=False)
                except (Exception, TimeoutError) as err:
                    event(
                        log,
                        logging.WARNING,
                        "tiering.lease.release_failed",
                        msg=f"could not release transactional id {self.transactional_id!r} "
                        f"({err}); another pipeline takes over once the coordinator aborts it",
                        transactional_id=self.transactional_id,
                    )
                self._forget(take_back=None)
                self._lost_reason = "it released it"
        await _cancelled(self._flusher)
        self._flusher = None
        pending, self._pending = self._pending, []
        for item in pending:
            if not item.future.done():
                item.future.set_exception(NotHoldingError("the pipeline released its hold"))

    # -- internals ------------------------------------------------------------------------

    async def _fences(self) -> bool:
        """Whether the broker can fence (else the lease turns into an idempotent writer)."""
        kind = await self._client.detect_broker_kind()
        if kind == "kafka" and all([await self._client.speaks(api) for api in _TRANSACTION_APIS]):
            return True
        self._unfenced = TopicProducer(self._client, self._topic)
        event(
            log,
            logging.WARNING,
            "tiering.lease.no_transactions",
            msg=f"the broker ({kind}) has no transactions to fence the pipeline with: nothing "
            "stops a second pipeline on this cluster, and two at once delete each other's "
            "copies; run exactly one",
            broker=kind,
        )
        return False

    async def _open(self) -> None:
        """Open the next transaction (caller holds ``_txn``)."""
        sent = self._monotonic()
        await self._producer.add_partitions([self._lease_partition])
        self._clock.opened(sent)
        self._in_txn = {self._lease_partition}

    async def _commit_and_reopen(self) -> None:
        sent = self._monotonic()
        await self._producer.end(commit=True)
        self._clock.committed(sent)
        self._in_txn = set()
        await self._open()

    async def _flush(self) -> None:
        async with self._txn:
            while self._pending:
                group, self._pending = self._pending, []
                live = [p for p in group if not p.future.done()]
                if live:
                    await self._transaction(live)

    async def _transaction(self, group: Sequence[_Pending]) -> None:
        try:
            self.ensure_held()
            async with asyncio.timeout(self._remaining()):
                offsets = await self._produce(group)
                sent = self._monotonic()
                await self._producer.end(commit=True)
        except BaseException as err:
            failure = await self._failed(err)
            for pending in group:
                if not pending.future.done():
                    pending.future.set_exception(failure)
            if not isinstance(err, Exception):
                raise
            return
        self._clock.committed(sent)
        self._in_txn = set()
        for pending, offset in zip(group, offsets, strict=True):
            if not pending.future.done():
                pending.future.set_result(offset)
        try:
            async with asyncio.timeout(self._remaining()):
                await self._open()
        except Exception as err:
            self._lose(err)

    async def _produce(self, group: Sequence[_Pending]) -> list[int]:
        added = sorted({p.partition for p in group} - self._in_txn)
        if added:
            await self._producer.add_partitions(added)
            self._in_txn.update(added)
        by_partition: dict[int, list[_Pending]] = {}
        for pending in group:
            by_partition.setdefault(pending.partition, []).append(pending)
        firsts = await asyncio.gather(
            *(
                self._producer.produce(partition, [(p.key, p.value) for p in rows])
                for partition, rows in by_partition.items()
            )
        )
        offset_of: dict[int, int] = {}
        for (_, rows), first in zip(by_partition.items(), firsts, strict=True):
            for index, pending in enumerate(rows):
                offset_of[id(pending)] = first + index
        return [offset_of[id(p)] for p in group]

    async def _renew_loop(self) -> None:
        period = self._timeout / RENEWALS_PER_TIMEOUT
        while self._identity is not None:
            await asyncio.sleep(period / 4)
            if not self._clock.renewal_due(self._monotonic()):
                continue
            async with self._txn:
                if self._identity is None:
                    return
                try:
                    async with asyncio.timeout(self._remaining()):
                        await self._commit_and_reopen()
                except Exception as err:
                    self._lose(err)
                    return

    async def _failed(self, error: BaseException) -> Exception:
        """What a group's failed transaction gives its senders: the refusal itself (an ACL
        missing, a record refused) once the transaction is aborted and the next one open,
        or :class:`NotHoldingError` when the hold is gone (fenced, out of time, or the
        abort failed too)."""
        if isinstance(error, ProducerFencedError | TimeoutError | NotHoldingError) or not (
            isinstance(error, Exception)
        ):
            return self._lose(error)
        try:
            async with asyncio.timeout(self._remaining()):
                await self._producer.end(commit=False)
                self._in_txn = set()
                await self._open()
        except Exception as err:
            return self._lose(err)
        return error

    def _remaining(self) -> float:
        return max(0.0, self._clock.until() - self._monotonic())

    def _lose(self, error: BaseException) -> NotHoldingError:
        """Forget the hold after ``error``; the error to give the hold's callers."""
        if isinstance(error, NotHoldingError):
            return error
        if isinstance(error, ProducerFencedError):
            reason = f"fenced ({error})"
        elif isinstance(error, TimeoutError):
            reason = "not renewed within transaction.timeout.ms"
        else:
            reason = f"{type(error).__name__}: {error}"
        if self._identity is not None:
            producer_id, epoch = self._identity
            event(
                log,
                logging.WARNING,
                "tiering.lease.lost",
                msg=f"lost transactional id {self.transactional_id!r} (producer id "
                f"{producer_id}, epoch {epoch}): {reason}; no metadata writes, object "
                "deletions or DeleteRecords until it is held again",
                transactional_id=self.transactional_id,
                producer_id=producer_id,
                epoch=epoch,
            )
            # Not fenced: the epoch may still be ours, to take back without waiting.
            fenced = isinstance(error, ProducerFencedError)
            self._forget(take_back=None if fenced else self._identity)
            self._lost_reason = reason
        failure = NotHoldingError(
            f"this pipeline no longer holds transactional id {self.transactional_id!r}: {reason}"
        )
        failure.__cause__ = error
        return failure

    def _forget(self, *, take_back: tuple[int, int] | None) -> None:
        self._last_identity = take_back
        self._identity = None
        self._clock.lost()
        self._in_txn = set()
        self.lost.set()


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _wait(stop: asyncio.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``; True if ``stop`` was set meanwhile."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


def _wall_time(monotonic_then: float, monotonic_now: float) -> str:
    then = time.time() - (monotonic_now - monotonic_then)
    return datetime.datetime.fromtimestamp(then, datetime.UTC).isoformat(timespec="seconds")
