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

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import ApiKey
from proxy.interceptors.base import Answer, Call, Interceptor
from proxy.remote.epochs import EpochEndOffset, end_offset
from storage.model import TopicIdPartition

__all__ = ["OffsetForLeaderEpochInterceptor"]

_PLANS_KEPT: Final = 100_000

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
        self._requested: LRUCache[tuple[int, int], dict[_Key, int]] = LRUCache(_PLANS_KEPT)

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.OFFSET_FOR_LEADER_EPOCH: range(2, 5)}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Any | Answer:
        request = call.request
        if getattr(request, "replica_id", -1) >= 0:
            return request
        requested = {
            (topic.topic, part.partition): part.leader_epoch
            for topic in request.topics
            for part in topic.partitions
            if self._tiered.partition(topic=topic.topic, topic_id=None, partition=part.partition)
        }
        if requested:
            key = (call.connection.connection_id, call.header.correlation_id)
            self._requested[key] = requested
        return request

    def wants_response(self, call: Call, body: memoryview) -> bool:
        return (call.connection.connection_id, call.header.correlation_id) in self._requested

    async def on_response(self, call: Call, response: Any) -> Any:
        requested = self._requested.pop(
            (call.connection.connection_id, call.header.correlation_id), None
        )
        if requested is None:
            return response
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
