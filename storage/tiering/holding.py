"""Who holds the pipeline's transactional id, as pure state machines (no I/O, no clock).

Rules of this file: everything that decides whether *this* pipeline holds the tiering of a
cluster, and whether another one still does, lives here; :mod:`.lease` only asks Kafka and
feeds the answers in. Times are seconds on the caller's monotonic clock, except where a
name ends in ``_ms`` (wall-clock milliseconds, as Kafka reports them).

The hold is a transactional id (:mod:`storage.kafka_client.transactional`). Its holder keeps
a transaction open at all times and commits it (which renews it) at least every third of
``transaction.timeout.ms``; the transaction coordinator aborts a transaction left open longer
than that and bumps the epoch, which fences the holder. So, from the coordinator's
``DescribeTransactions`` answer:

- ``Ongoing`` (and the short ``Prepare*`` states of a commit, an abort or a fence): a holder
  is alive, or will be fenced by the coordinator within the timeout;
- ``CompleteAbort`` or ``Dead``, or no such transactional id: nobody holds it (the holder
  released it, never had it, or was aborted on timeout);
- ``Empty`` or ``CompleteCommit``: between a holder's commit and the opening of its next
  transaction, a few milliseconds; a holder that stopped there is gone once the same
  answer has been seen for a whole timeout.

:class:`HolderWatch` is the waiting side's judgement; :class:`HoldClock` the holder's own
bound, after which it may no longer act on anything Kafka does not fence (object deletions,
DeleteRecords, the tasks' uploads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.errors import KafkaError
from storage.kafka_client.transactions import TransactionDescription

__all__ = ["Free", "Held", "HoldClock", "HolderWatch", "holds"]

_ALIVE: Final = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
_RELEASED: Final = frozenset({"CompleteAbort", "Dead"})
_BETWEEN: Final = frozenset({"Empty", "CompleteCommit"})
_SAFETY_FRACTION: Final = 0.1
"""The holder stops acting this share of the timeout before its hold could lapse (at most
:data:`_SAFETY_MAX_S`): room for one request in flight when the bound arrives."""
_SAFETY_MAX_S: Final = 5.0
RENEWALS_PER_TIMEOUT: Final = 3
"""The holder commits and reopens its transaction every third of the timeout, so that two
failed renewals in a row still leave it holding."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """Another pipeline holds the transactional id."""

    producer_id: int
    epoch: int
    since: float
    """When this watch first saw this holder (monotonic)."""
    new: bool
    """Whether this answer is the first about this holder (log it once)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Free:
    """Nobody holds the transactional id: take it (InitProducerId)."""

    reason: str


class HolderWatch:
    """The waiting pipeline's view of the holder, from successive DescribeTransactions.

    :param timeout: ``transaction.timeout.ms`` in seconds; every pipeline of a cluster must
        use the same (as they must agree on the metadata topic's partitions).
    """

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._holder: tuple[int, int] | None = None
        self._since = 0.0
        self._idle: tuple[tuple[int, int, str], float] | None = None

    def observe(self, answer: TransactionDescription, now: float) -> Held | Free:
        """What ``answer``, received at ``now``, says about the transactional id."""
        if answer.error == KafkaError.TRANSACTIONAL_ID_NOT_FOUND:
            return self._free("no pipeline has held it yet")
        if answer.state in _RELEASED:
            return self._free(f"its last holder's transaction ended in {answer.state}")
        holder = (answer.producer_id, answer.epoch)
        new = holder != self._holder
        if new:
            self._holder, self._since = holder, now
        if answer.state in _BETWEEN:
            key = (*holder, answer.state)
            if self._idle is None or self._idle[0] != key:
                self._idle = (key, now)
            elif now - self._idle[1] >= self._timeout:
                return self._free(
                    f"its holder left no transaction open for {now - self._idle[1]:.0f} s"
                )
        else:
            self._idle = None
        return Held(producer_id=holder[0], epoch=holder[1], since=self._since, new=new)

    def _free(self, reason: str) -> Free:
        self._holder = None
        self._idle = None
        return Free(reason=reason)


def holds(answer: TransactionDescription, producer_id: int, epoch: int) -> bool:
    """Whether ``answer`` shows the holder ``(producer_id, epoch)`` still holding: its epoch
    is the transactional id's and its transaction was not aborted (the epoch of an abort on
    timeout is already the next one; a released hold ends in ``CompleteAbort``)."""
    return (
        answer.error == KafkaError.NONE
        and (answer.producer_id, answer.epoch) == (producer_id, epoch)
        and answer.state not in _RELEASED
        and answer.state not in ("PrepareAbort", "PrepareEpochFence")
    )


class HoldClock:
    """How long the holder may act without hearing from the coordinator again.

    A transaction that :meth:`opened` at ``t`` (the request was sent at ``t``) is aborted by
    the coordinator no earlier than ``t + timeout``; a commit sent at ``t`` leaves the
    transactional id between transactions, which a waiting pipeline takes over no earlier
    than a whole timeout after it saw that. So the hold lasts at least until the later of
    the two plus the timeout, less a safety share; the holder renews well before.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._safety = min(timeout * _SAFETY_FRACTION, _SAFETY_MAX_S)
        self._anchor: float | None = None

    def opened(self, sent_at: float) -> None:
        """A transaction was opened by a request sent at ``sent_at``."""
        self._anchor = sent_at if self._anchor is None else max(self._anchor, sent_at)

    def committed(self, sent_at: float) -> None:
        """The open transaction was committed by a request sent at ``sent_at``."""
        self.opened(sent_at)

    def lost(self) -> None:
        """The hold is gone (fenced, released, or never taken)."""
        self._anchor = None

    def held(self, now: float) -> bool:
        """Whether the holder may still act at ``now``."""
        return self._anchor is not None and now < self.until()

    def until(self) -> float:
        """Until when it may act (monotonic; ``-inf`` when it holds nothing)."""
        if self._anchor is None:
            return float("-inf")
        return self._anchor + self.timeout - self._safety

    def renewal_due(self, now: float) -> bool:
        """Whether the open transaction should be committed and reopened now."""
        return (
            self._anchor is not None and now >= self._anchor + self.timeout / RENEWALS_PER_TIMEOUT
        )
