"""Which partitions of a consumer's Fetch the remote tier serves, and what the broker is asked.

A partition is *tiered* when the remote tier holds part of it. When its fetch offset lies in
the remote tier (``[remote log start, remote log end]``):

- If the remote tier does not join the broker's log (a gap: the broker deleted data that
  was never tiered), it is unreachable, as in Kafka: the partition is left to the broker,
  whose OFFSET_OUT_OF_RANGE sends the consumer to the first offset servable contiguously.
- If nobody knows yet where the broker's log starts, the partition is forwarded as a
  *reach probe* just after the remote tier: the broker's answer tells whether the two
  tiers join (then the remote tier serves the partition in this very response) or not
  (then its OFFSET_OUT_OF_RANGE is the client's answer). It is a fallback: when a
  Metadata answer names tiered partitions, the proxy asks their leaders for these offsets
  before the client fetches (:mod:`proxy.remote.broker_offsets`); a reach probe goes out
  only when that was not done, not in time, or failed, and is counted and logged at debug
  level with the reason.
- Otherwise it is *served remotely* when the broker no longer holds the offset, or when
  the offload policy wants it (``remote.fetch.offload.enable``; docs/architecture.md "Read path"),
  unless the remote tier recently failed to serve it there (see
  :mod:`proxy.remote.fallbacks`): the broker, which still holds it, serves it then.

A partition served remotely is forwarded as a *probe*: at the broker's high watermark (last
stable offset for READ_COMMITTED; just after the remote tier until that is known) with a
one-byte limit, and the request's ``min_bytes`` set to 0. The broker still checks the
client's rights and leader epoch for it, answers at once, and reports its high watermark,
last stable offset and log start; at its high watermark it has nothing to read (a batch
only if records arrived since the offsets were learned). A reach probe, or a probe while
the high watermark is not known, is answered with one batch (Kafka's "at least one batch"
allowance), which the proxy drops. Every other partition is forwarded as the client asked.
A sessionless Fetch, or an incremental one in step with its fetch session, whose every
partition would be a probe that the broker answered on the same connection a moment ago is
not forwarded at all (see :mod:`proxy.remote.broker_checks`).

When the broker answers, :func:`verdict` says who answers each tiered partition: the remote
tier, the broker, or neither yet.

Nothing here changes state: the planner reads what :class:`~proxy.remote.broker_view.
BrokerView` learned and what the metadata cache says.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

from protocol.errors import KafkaError
from protocol.fetch_bodies import FetchedPartition, FetchPosition, PartitionKey
from proxy.remote.broker_view import BrokerView, PartitionState
from proxy.remote.fallbacks import BrokerFallbacks
from proxy.remote.offload import OffloadPolicy
from proxy.remote.offsets import RemoteRange
from storage.model import TopicIdPartition

__all__ = [
    "PROBE_BYTES",
    "FetchPlanner",
    "ReachProbes",
    "RemotePartitions",
    "TieredPartition",
    "TieredPartitions",
    "Verdict",
    "verdict",
]

PROBE_BYTES: Final = 1
"""``partition_max_bytes`` forwarded for a remote-served partition: the broker answers at
once (at least one byte is readable) and reads next to nothing."""


class RemotePartitions(Protocol):
    """How a request's partition is found in the remote tier (``TieredPartitions``)."""

    def partition(
        self, *, topic: str | None, topic_id: uuid.UUID | None, partition: int
    ) -> TopicIdPartition | None: ...

    def remote_range(self, tp: TopicIdPartition) -> RemoteRange | None: ...


class TieredPartitions(RemotePartitions, Protocol):
    """What the planner asks of the remote tier: the partitions, and their sizes."""

    def bytes_per_record(self, tp: TopicIdPartition) -> float: ...


class ReachProbes(Protocol):
    """Where reach probes are counted and explained (``BrokerOffsets``)."""

    def reach_probe(self, tp: TopicIdPartition) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredPartition:
    """A tiered partition of one Fetch, as planned when the request went out."""

    key: PartitionKey
    tp: TopicIdPartition
    remote: RemoteRange
    position: FetchPosition
    """Where the client fetches."""
    served: bool
    """Forwarded as a probe: served remotely if the broker's answer allows it."""
    reach_known: bool = True
    """``False`` for a reach probe: whether the remote tier joins the broker's log is what
    the broker's answer tells."""


class FetchPlanner:
    """Plans the tiered partitions of Fetch requests; see the module docstring."""

    def __init__(
        self,
        *,
        partitions: TieredPartitions,
        broker_view: BrokerView,
        offload: OffloadPolicy,
        fallbacks: BrokerFallbacks,
        reach_probes: ReachProbes,
    ) -> None:
        self._partitions = partitions
        self._broker = broker_view
        self._offload = offload
        self._fallbacks = fallbacks
        self._reach_probes = reach_probes

    def plan(
        self, key: PartitionKey, position: FetchPosition, *, read_committed: bool
    ) -> TieredPartition | None:
        """The plan of one partition, ``None`` when nothing of it is tiered."""
        topic, partition = key
        tp = self._partitions.partition(
            topic=topic if isinstance(topic, str) else None,
            topic_id=topic if isinstance(topic, uuid.UUID) else None,
            partition=partition,
        )
        if tp is None:
            return None
        remote = self._partitions.remote_range(tp)
        if remote is None:
            return None
        planned = functools.partial(
            TieredPartition, key=key, tp=tp, remote=remote, position=position
        )
        offset = position.fetch_offset
        if not remote.start <= offset <= remote.end:
            return planned(served=False)
        state = self._broker.state(tp)
        reaches = state.reaches(remote)
        if reaches is False:
            return None
        if reaches is None:
            self._reach_probes.reach_probe(tp)
            return planned(served=True, reach_known=False)
        if state.broker_holds(offset) is not True:
            return planned(served=True)
        if self._fallbacks.applies(tp, remote, offset, read_committed=read_committed):
            return planned(served=False)
        offload = self._offload
        return planned(
            served=offload.offload(
                fetch_offset=offset,
                remote_start=remote.start,
                remote_end=remote.end,
                high_watermark=state.high_watermark,
                bytes_per_record=(
                    self._partitions.bytes_per_record(tp) if offload.min_lag_bytes else 0.0
                ),
            )
        )

    def forwarded_position(self, tiered: TieredPartition, *, read_committed: bool) -> FetchPosition:
        """Where the broker is asked about ``tiered``: the client's position, or the probe."""
        if not tiered.served:
            return tiered.position
        return dataclasses.replace(
            tiered.position,
            fetch_offset=self._probe_offset(tiered, read_committed),
            partition_max_bytes=PROBE_BYTES,
        )

    def _probe_offset(self, tiered: TieredPartition, read_committed: bool) -> int:
        """At the broker's high watermark or last stable offset, where it has nothing to
        read, or just after the remote tier for a reach probe or while neither is known."""
        state = self._broker.state(tiered.tp)
        bound = state.last_stable_offset if read_committed else state.high_watermark
        if tiered.reach_known and bound is not None and bound > tiered.remote.end:
            return bound
        return tiered.remote.end + 1


class Verdict(Enum):
    """Who answers a tiered partition, given the broker's answer."""

    REMOTE = "remote"
    """The remote tier: a probe the broker accepted, or an offset it no longer holds."""
    BROKER = "broker"
    """The broker's own answer stands (its records, or its error)."""
    RETRY = "retry"
    """Neither yet: the broker's log start moved and nobody knows whether the remote tier
    still joins it. No records and no error; the next Fetch probes (see the planner)."""


def verdict(tiered: TieredPartition, answer: FetchedPartition, state: PartitionState) -> Verdict:
    """Who answers ``tiered`` now that the broker answered ``answer`` (and ``state`` holds
    what that taught). Errors other than OFFSET_OUT_OF_RANGE are always the broker's
    (authorisation, leadership, ...): they hold whatever the position."""
    offset, remote = tiered.position.fetch_offset, tiered.remote
    reaches = state.reaches(remote)
    if answer.error == KafkaError.NONE:
        if not tiered.served:
            return Verdict.BROKER
        # A probe's records are the broker's at the probe position, never the client's.
        return Verdict.REMOTE if reaches else Verdict.RETRY
    if answer.error != KafkaError.OFFSET_OUT_OF_RANGE or tiered.served:
        # A refused probe: the broker's log starts after it, so after the client's offset,
        # and the remote tier does not reach it: out of range, as Kafka answers.
        return Verdict.BROKER
    if not remote.start <= offset <= remote.end or reaches is False:
        return Verdict.BROKER
    if reaches is None:
        return Verdict.RETRY
    return Verdict.REMOTE
