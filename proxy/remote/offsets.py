"""ListOffsets over the whole log: which question the broker is asked, and the answer given.

The table of docs/architecture.md ("ListOffsets sentinels"), decided per partition from the
request version and the target timestamp:

===========  ==========================  =====================================================
timestamp    request v1-v6               request v7+
===========  ==========================  =====================================================
-1 LATEST    broker                      broker
-2 EARLIEST  min(remote start, broker)   same
-3           EARLIEST_LOCAL (KIP text)   MAX_TIMESTAMP, from the broker (EARLIEST_LOCAL with
                                         ``remote.list.offsets.kip405.sentinels``)
-4           (not a sentinel: broker)    EARLIEST_LOCAL, v8+: the broker's own log start
-5           (not a sentinel: broker)    LATEST_TIERED, v9+: highest tiered offset, or -1
-6           (not a sentinel: broker)    EARLIEST_PENDING_UPLOAD, v11+: the first offset not
                                         tiered yet, below the broker's LATEST (see
                                         :func:`answer`)
>= 0         remote time indexes first, then the broker (the earlier of the two answers)
===========  ==========================  =====================================================

The broker is always asked (so its authorisation and leadership checks govern the answer),
but sentinels it may not know are replaced by ones it does: EARLIEST_LOCAL becomes EARLIEST
(a broker that knows nothing of the remote tier has only its local log), LATEST_TIERED and
EARLIEST_PENDING_UPLOAD become LATEST (for -6, the broker's high watermark, or last stable
offset for READ_COMMITTED: Kafka answers -6 only below it). A partition the broker answers
with an error keeps the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from protocol.indexes.leader_epoch_checkpoint import EpochEntry, epoch_for_offset

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "EARLIEST_PENDING_UPLOAD",
    "LATEST",
    "LATEST_TIERED",
    "MAX_TIMESTAMP",
    "BrokerAnswer",
    "OffsetQuery",
    "RemoteRange",
    "answer",
    "plan",
]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
"""-3 from request v7 (KIP-734); KIP-405's text used it for EARLIEST_LOCAL."""
EARLIEST_LOCAL = -4
"""From request v8 (KIP-405 as shipped)."""
LATEST_TIERED = -5
"""From request v9 (KIP-1005)."""
EARLIEST_PENDING_UPLOAD = -6
"""From request v11 (KIP-1023): the first offset not yet copied to the remote tier."""
NO_TIMESTAMP = -1
UNKNOWN_OFFSET = -1
NO_EPOCH = -1

_FIRST_MAX_TIMESTAMP_VERSION = 7
_FIRST_EARLIEST_LOCAL_VERSION = 8
_FIRST_LATEST_TIERED_VERSION = 9
_FIRST_EARLIEST_PENDING_UPLOAD_VERSION = 11


class OffsetQuery(Enum):
    """What a partition's target timestamp asks for."""

    BROKER = "broker"
    """Forward unchanged, answer with the broker's answer."""
    EARLIEST = "earliest"
    EARLIEST_LOCAL = "earliest-local"
    LATEST_TIERED = "latest-tiered"
    EARLIEST_PENDING_UPLOAD = "earliest-pending-upload"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteRange:
    """The remote tier of one partition: offsets ``start..end`` (inclusive) and lineage."""

    start: int
    end: int
    lineage: Sequence[EpochEntry]

    def epoch_of(self, offset: int) -> int:
        epoch = epoch_for_offset(self.lineage, offset)
        return NO_EPOCH if epoch is None else epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAnswer:
    """One partition of a ListOffsets answer (v1+ fields; ``leader_epoch`` from v4)."""

    timestamp: int
    offset: int
    leader_epoch: int = NO_EPOCH


def plan(timestamp: int, version: int, *, kip405_minus_3: bool = False) -> tuple[OffsetQuery, int]:
    """The query a target ``timestamp`` of request ``version`` makes, and the timestamp to
    forward to the broker in its place."""
    if timestamp >= 0:
        return OffsetQuery.TIMESTAMP, timestamp
    if timestamp == EARLIEST:
        return OffsetQuery.EARLIEST, EARLIEST
    if timestamp == MAX_TIMESTAMP and (version < _FIRST_MAX_TIMESTAMP_VERSION or kip405_minus_3):
        return OffsetQuery.EARLIEST_LOCAL, EARLIEST
    if timestamp == EARLIEST_LOCAL and version >= _FIRST_EARLIEST_LOCAL_VERSION:
        return OffsetQuery.EARLIEST_LOCAL, EARLIEST
    if timestamp == LATEST_TIERED and version >= _FIRST_LATEST_TIERED_VERSION:
        return OffsetQuery.LATEST_TIERED, LATEST
    if timestamp == EARLIEST_PENDING_UPLOAD and version >= _FIRST_EARLIEST_PENDING_UPLOAD_VERSION:
        return OffsetQuery.EARLIEST_PENDING_UPLOAD, LATEST
    return OffsetQuery.BROKER, timestamp


_UNKNOWN = BrokerAnswer(timestamp=NO_TIMESTAMP, offset=UNKNOWN_OFFSET, leader_epoch=NO_EPOCH)


def answer(
    query: OffsetQuery,
    broker: BrokerAnswer,
    remote: RemoteRange | None,
    found: BrokerAnswer | None = None,
    *,
    tiered: bool = True,
    log_start: int | None = None,
) -> BrokerAnswer:
    """The answer for one partition the broker answered without error.

    EARLIEST_PENDING_UPLOAD answers as Kafka's ``UnifiedLog.fetchEarliestPendingUploadOffset``
    and ``ReplicaManager`` do: the offset after the highest tiered one, or the broker's log
    start when nothing readable is tiered or the remote tier does not reach the broker's log;
    then -1 if that offset is not below the last fetchable one (the broker's LATEST answer:
    everything is tiered), and -1 for a partition the remote tier has never held (Kafka:
    remote storage off; the proxy cannot tell a topic that will be tiered from one that never
    will) or whose broker log start it has not learnt.

    :param remote: the partition's remote tier, ``None`` if nothing is tiered (or it does not
        reach the broker's log).
    :param found: for TIMESTAMP queries, the remote time indexes' answer (``None`` if no
        remote record is that late).
    :param tiered: whether the remote tier holds the partition at all.
    :param log_start: the broker's log start, for EARLIEST_PENDING_UPLOAD (``None``: unknown).
    """
    if query is OffsetQuery.EARLIEST_PENDING_UPLOAD:
        pending = log_start if remote is None else remote.end + 1
        if not tiered or pending is None or pending >= broker.offset:
            return _UNKNOWN
        epoch = NO_EPOCH if remote is None else remote.epoch_of(pending)
        return BrokerAnswer(timestamp=NO_TIMESTAMP, offset=pending, leader_epoch=epoch)
    if query is OffsetQuery.EARLIEST and remote is not None:
        if broker.offset < 0 or remote.start < broker.offset:
            return BrokerAnswer(
                timestamp=NO_TIMESTAMP,
                offset=remote.start,
                leader_epoch=remote.epoch_of(remote.start),
            )
        return broker
    if query is OffsetQuery.LATEST_TIERED:
        if remote is None:
            return _UNKNOWN
        return BrokerAnswer(
            timestamp=NO_TIMESTAMP, offset=remote.end, leader_epoch=remote.epoch_of(remote.end)
        )
    if query is OffsetQuery.TIMESTAMP and found is not None:
        if broker.offset < 0 or found.offset <= broker.offset:
            return found
        return broker
    return broker
