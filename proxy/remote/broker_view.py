"""What the broker last said about each tiered partition: where the read path learns.

Rules of this file (everything the proxy learns from the broker's Fetch answers lives here):

- A partition the broker answers without error reports its high watermark, last stable
  offset and (v5+) its own log start: all three are kept as the latest word.
- OFFSET_OUT_OF_RANGE at an offset inside the remote tier means the broker's log starts
  after that offset but no later than the remote end + 1 (nothing is deleted before it is
  tiered). That bound is kept until an answer without error says exactly where the log
  starts; the read path then probes the broker there from the next Fetch on.
- Nothing else changes the state: errors such as NOT_LEADER or an authorisation failure
  say nothing about the log.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.fetch_bodies import FetchedPartition
from proxy.remote.offsets import RemoteRange
from storage.model import TopicIdPartition

__all__ = ["BrokerView", "PartitionState"]

_PARTITIONS_KEPT: Final = 1_000_000
"""Tiered partitions whose broker offsets the proxy remembers (about 100 bytes each)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """What the broker last said about a tiered partition (``None``: not known yet)."""

    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    """The broker's own log start (its local log), or a lower bound learned from an
    OFFSET_OUT_OF_RANGE answer."""

    def whole_log_start(self, remote: RemoteRange) -> int:
        """The start of the whole log, remote tier included: what Kafka with tiered storage
        reports as ``log_start_offset``."""
        if self.log_start_offset is None or self.log_start_offset < 0:
            return remote.start
        return min(remote.start, self.log_start_offset)


class BrokerView:
    """The latest :class:`PartitionState` per tiered partition, learned from Fetch answers."""

    def __init__(self, *, capacity: int = _PARTITIONS_KEPT) -> None:
        self._states: LRUCache[TopicIdPartition, PartitionState] = LRUCache(capacity)

    def state(self, tp: TopicIdPartition) -> PartitionState:
        return self._states.get(tp) or PartitionState()

    def learn(
        self,
        tp: TopicIdPartition,
        answer: FetchedPartition,
        *,
        fetch_offset: int,
        remote: RemoteRange,
    ) -> PartitionState:
        """Apply the broker's answer for ``tp`` (fetched at ``fetch_offset``); the new state."""
        state = self.state(tp)
        if answer.error == KafkaError.NONE:
            state = PartitionState(
                high_watermark=answer.high_watermark,
                last_stable_offset=answer.last_stable_offset,
                log_start_offset=(
                    answer.log_start_offset
                    if answer.log_start_offset >= 0
                    else state.log_start_offset
                ),
            )
        elif (
            answer.error == KafkaError.OFFSET_OUT_OF_RANGE
            and remote.start <= fetch_offset <= remote.end
        ):
            floor = max(state.log_start_offset or 0, remote.end + 1)
            state = dataclasses.replace(state, log_start_offset=floor)
        else:
            return state
        self._states[tp] = state
        return state
