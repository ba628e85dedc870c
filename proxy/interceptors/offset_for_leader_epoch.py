"""OffsetForLeaderEpoch v2-v4 over the whole log (KIP-405 "OffsetForLeaderEpoch", KIP-320).

The request goes to the broker unchanged; its fencing and leadership errors stand. For a
partition it answered, an epoch that only the remote tier still knows in full is answered
from the remote lineage (the leader-epoch checkpoints of the remote segments, merged by the
metadata cache), as :mod:`proxy.remote.epochs` explains, so a consumer validating a
position in the remote tier is truncated, or not, exactly as by a broker that still held
the data. Follower requests (``replica_id`` >= 0) pass through untouched.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import ApiKey
from proxy.interceptors.base import Call, Exchange, Forward, Interceptor
from proxy.remote.epochs import EpochEndOffset, end_offset
from storage.model import TopicIdPartition

__all__ = ["OffsetForLeaderEpochInterceptor"]

_PARTITION_BYTES: Final = 150
"""About what one tiered partition holds in an OffsetForLeaderEpoch exchange."""

_Key = tuple[str, int]


class TieredLineages(Protocol):
    """The tiered partitions and their leader-epoch lineages (``RemoteTier``)."""

    def partition(
        self, *, topic: str | None, topic_id: uuid.UUID | None, partition: int
    ) -> TopicIdPartition | None: ...

    def lineage(self, tp: TopicIdPartition) -> Sequence[EpochEntry]: ...


class OffsetForLeaderEpochInterceptor(Interceptor):
    """Answers epochs the broker forgot from the remote tier's lineage."""

    def __init__(self, tiered: TieredLineages) -> None:
        self._tiered = tiered

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.OFFSET_FOR_LEADER_EPOCH: range(2, 5)}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        request: Any = call.request
        if getattr(request, "replica_id", -1) >= 0:
            return Forward(request=request)
        requested = {
            (topic.topic, part.partition): part.leader_epoch
            for topic in request.topics
            for part in topic.partitions
            if self._tiered.partition(topic=topic.topic, topic_id=None, partition=part.partition)
        }
        if not requested:
            return Forward(request=request)
        return Forward(request=request, then=_EpochsExchange(self, requested))

    def _on_response(self, requested: dict[_Key, int], response: Any) -> Any:
        topics = []
        changed = False
        for topic in response.topics:
            parts = []
            for part in topic.partitions:
                new = self._answer(topic.topic, part, requested)
                changed = changed or new is not part
                parts.append(new)
            topics.append(dataclasses.replace(topic, partitions=tuple(parts)))
        if not changed:
            return response
        return dataclasses.replace(response, topics=tuple(topics))

    def _answer(self, topic: str, part: Any, requested: dict[_Key, int]) -> Any:
        epoch = requested.get((topic, part.partition))
        if epoch is None or int(part.error_code) != KafkaError.NONE:
            return part
        tp = self._tiered.partition(topic=topic, topic_id=None, partition=part.partition)
        if tp is None:
            return part
        broker = EpochEndOffset(leader_epoch=part.leader_epoch, end_offset=part.end_offset)
        result = end_offset(epoch, broker, self._tiered.lineage(tp))
        if result == broker:
            return part
        return dataclasses.replace(
            part, leader_epoch=result.leader_epoch, end_offset=result.end_offset
        )


class _EpochsExchange(Exchange):
    """One OffsetForLeaderEpoch naming tiered partitions: the epoch asked for each."""

    __slots__ = ("_interceptor", "_requested")

    def __init__(
        self, interceptor: OffsetForLeaderEpochInterceptor, requested: dict[_Key, int]
    ) -> None:
        self._interceptor = interceptor
        self._requested = requested

    @property
    def held_bytes(self) -> int:
        return _PARTITION_BYTES * len(self._requested)

    async def on_response(self, response: Any) -> Any:
        return self._interceptor._on_response(self._requested, response)
