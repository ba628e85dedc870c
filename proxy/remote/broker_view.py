"""What the broker last said about each tiered partition: where the read path learns.

Rules of this file (everything the proxy learns from the broker's answers lives here):

- A Fetch answer without error reports the partition's high watermark, last stable offset
  and (v5+) the broker's own log start at the time: the latest word on all three. Below
  v5 an answer without error at offset ``o`` only says that the log starts at or before
  ``o`` (an exact log start known before, at or below ``o``, stays).
- A Fetch answer OFFSET_OUT_OF_RANGE at offset ``o`` (with Kafka, it carries no offsets at
  all) says that the log starts after ``o``: a log start known to be at or below ``o`` is
  out of date (the broker's retention or a DeleteRecords moved it).
- A ListOffsets EARLIEST answer is the broker's exact log start.
- The answers to the proxy's own ListOffsets, asked before a partition's first Fetch
  (:mod:`proxy.remote.broker_offsets`), fill in only what no answer has said yet: a Fetch
  answer that arrived meanwhile is at least as recent.
- Nothing else changes the state: errors such as NOT_LEADER or an authorisation failure
  say nothing about the log.

The remote tier is *reachable* only when it joins the broker's log: its end + 1 is at or
above the broker's log start. Kafka never shows a gap (its earliest offset is the first it
can serve contiguously), so remote data below a gap — left when the broker deleted data
that was never tiered, by its own retention or a DeleteRecords — is never served and never
reported as the log start. Gaps are logged once per remote end and kept for the metrics.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.fetch_bodies import FetchedPartition
from proxy.logs import event
from proxy.remote.offsets import RemoteRange
from storage.model import TopicIdPartition

__all__ = ["BrokerView", "PartitionState"]

_log = logging.getLogger("tierproxy.fetch")

_PARTITIONS_KEPT: Final = 1_000_000
"""Tiered partitions whose broker offsets the proxy remembers (about 100 bytes each)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """What the broker last said about a tiered partition (``None``: not known)."""

    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    """The broker's own log start (its local log), when an answer said it exactly."""
    log_start_at_most: int | None = None
    """An offset the broker served without error (Fetch v4 answers carry no log start)."""
    log_start_after: int | None = None
    """An offset the broker refused as out of range: its log starts after it."""

    def reaches(self, remote: RemoteRange) -> bool | None:
        """Whether the remote tier joins the broker's log (``None``: not known yet)."""
        if self.log_start_offset is not None:
            return self.log_start_offset <= remote.end + 1
        if self.log_start_at_most is not None and self.log_start_at_most <= remote.end + 1:
            return True
        if self.log_start_after is not None and self.log_start_after >= remote.end + 1:
            return False
        return None

    def broker_holds(self, offset: int) -> bool | None:
        """Whether the broker's own log holds ``offset`` (``None``: not known)."""
        if self.log_start_offset is not None:
            return self.log_start_offset <= offset
        if self.log_start_at_most is not None and self.log_start_at_most <= offset:
            return True
        if self.log_start_after is not None and offset <= self.log_start_after:
            return False
        return None

    def whole_log_start(self, remote: RemoteRange) -> int:
        """The start of the whole log, remote tier included when it joins the broker's:
        what Kafka with tiered storage reports as ``log_start_offset``."""
        broker = self.log_start_offset
        if broker is None or broker < 0:
            return remote.start
        return min(remote.start, broker) if broker <= remote.end + 1 else broker

    def filled_in(
        self,
        *,
        high_watermark: int | None,
        last_stable_offset: int | None,
        log_start_offset: int | None,
    ) -> PartitionState:
        """This state with what was not known taken from ListOffsets answers (``None`` or
        negative: not answered); the log start only when nothing at all was known of it."""
        log_start_known = (
            self.log_start_offset is not None
            or self.log_start_at_most is not None
            or self.log_start_after is not None
        )
        return dataclasses.replace(
            self,
            high_watermark=_first_known(self.high_watermark, high_watermark),
            last_stable_offset=_first_known(self.last_stable_offset, last_stable_offset),
            log_start_offset=_first_known(
                self.log_start_offset, None if log_start_known else log_start_offset
            ),
        )

    def gap(self, remote: RemoteRange) -> int | None:
        """Offsets the broker deleted between the remote end and its log start (at least
        that many when the exact log start is not known); ``None`` when there is none."""
        if self.reaches(remote) is not False:
            return None
        start = self.log_start_offset
        if start is None:
            start = (self.log_start_after or remote.end) + 1
        return start - (remote.end + 1)


class BrokerView:
    """The latest :class:`PartitionState` per tiered partition; see the module docstring."""

    def __init__(self, *, capacity: int = _PARTITIONS_KEPT) -> None:
        self._states: LRUCache[TopicIdPartition, PartitionState] = LRUCache(capacity)
        self._gaps: LRUCache[TopicIdPartition, tuple[int, int]] = LRUCache(capacity)
        """Per partition with a gap: (remote end, offsets missing), as last logged."""

    def state(self, tp: TopicIdPartition) -> PartitionState:
        return self._states.get(tp) or PartitionState()

    def learn(
        self, tp: TopicIdPartition, answer: FetchedPartition, *, offset: int, remote: RemoteRange
    ) -> PartitionState:
        """Apply the broker's Fetch answer for ``tp`` at ``offset``; the new state."""
        state = self.state(tp)
        if answer.error == KafkaError.NONE:
            exact = answer.log_start_offset if answer.log_start_offset >= 0 else None
            at_most = None
            if exact is None:  # Fetch v4: served at ``offset``, so the log starts by then
                known = state.log_start_at_most
                at_most = offset if known is None else min(known, offset)
                if state.log_start_offset is not None and state.log_start_offset <= offset:
                    exact = state.log_start_offset  # still true: the log start only grows
            state = PartitionState(
                high_watermark=answer.high_watermark,
                last_stable_offset=answer.last_stable_offset,
                log_start_offset=exact,
                log_start_at_most=at_most,
            )
        elif answer.error == KafkaError.OFFSET_OUT_OF_RANGE:
            stale = state.log_start_offset is not None and state.log_start_offset <= offset
            state = dataclasses.replace(
                state,
                log_start_offset=None if stale else state.log_start_offset,
                log_start_at_most=None,
                log_start_after=max(offset, state.log_start_after or -1),
            )
        else:
            return state
        return self._keep(tp, state, remote)

    def learn_log_start(
        self, tp: TopicIdPartition, log_start_offset: int, remote: RemoteRange | None
    ) -> None:
        """The broker answered ListOffsets EARLIEST for ``tp`` with ``log_start_offset``."""
        if log_start_offset < 0:
            return
        state = dataclasses.replace(
            self.state(tp),
            log_start_offset=log_start_offset,
            log_start_at_most=None,
            log_start_after=None,
        )
        self._keep(tp, state, remote)

    def learn_offsets(
        self,
        tp: TopicIdPartition,
        *,
        high_watermark: int | None,
        last_stable_offset: int | None,
        log_start_offset: int | None,
        remote: RemoteRange | None,
    ) -> PartitionState:
        """The proxy's own ListOffsets answered for ``tp`` (LATEST under READ_UNCOMMITTED,
        LATEST under READ_COMMITTED, EARLIEST; ``None`` for those that failed); the new
        state. Only what is not known yet is taken."""
        state = self.state(tp).filled_in(
            high_watermark=high_watermark,
            last_stable_offset=last_stable_offset,
            log_start_offset=log_start_offset,
        )
        return self._keep(tp, state, remote)

    def gaps(self) -> Mapping[TopicIdPartition, tuple[int, int]]:
        """Partitions whose remote tier does not reach the broker's log: (remote end,
        offsets missing)."""
        return dict(self._gaps.items())

    def _keep(
        self, tp: TopicIdPartition, state: PartitionState, remote: RemoteRange | None
    ) -> PartitionState:
        self._states[tp] = state
        gap = None if remote is None else state.gap(remote)
        if gap is None:
            self._gaps.pop(tp, None)
            return state
        assert remote is not None
        if self._gaps.get(tp) != (remote.end, gap):
            self._gaps[tp] = (remote.end, gap)
            event(
                _log,
                logging.WARNING,
                "remote.log.gap",
                topic=tp.topic,
                partition=tp.partition,
                remote_end=remote.end,
                broker_log_start=state.log_start_offset,
                missing_records=gap,
                meaning="the broker deleted data that was never tiered; "
                "the remote tier below it is not served",
            )
        return state


def _first_known(known: int | None, answered: int | None) -> int | None:
    """``known`` if the proxy knew it, else ``answered`` (negative offsets say nothing)."""
    if known is not None:
        return known
    return answered if answered is not None and answered >= 0 else None
