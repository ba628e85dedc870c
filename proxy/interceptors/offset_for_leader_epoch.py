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
import functools
import uuid
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from protocol.offset_bodies import EpochsEditor, PartitionName, read_epochs_request
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse
from proxy.remote.epochs import EpochEndOffset, end_offset
from storage.model import TopicIdPartition

__all__ = ["OffsetForLeaderEpochInterceptor"]

_PARTITION_BYTES: Final = 150
"""About what one tiered partition holds in an OffsetForLeaderEpoch exchange."""


class TieredLineages(Protocol):
    """The tiered partitions and their leader-epoch lineages (``TieredPartitions``)."""

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
        api = ApiKey.OFFSET_FOR_LEADER_EPOCH
        return {api: INTERCEPTED_VERSIONS[api]}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        replica_id, asked = read_epochs_request(call.body)
        if replica_id >= 0:
            return Forward(request=call.request)  # a follower
        requested = {query.name: query.leader_epoch for query in asked if self._tp(query.name)}
        if not requested:
            return Forward(request=call.request)
        respond = functools.partial(self._on_response, requested)
        held = _PARTITION_BYTES * len(requested)
        return Forward(request=call.request, then=OnResponse(respond, held_bytes=held))

    async def _on_response(self, requested: dict[PartitionName, int], response: Body) -> Body:
        """The broker's answer, with the epochs only the remote lineage still knows."""
        editor = EpochsEditor(response)
        for part in editor.partitions():
            epoch = requested.get(part.name)
            tp = self._tp(part.name)
            if epoch is None or part.error != KafkaError.NONE or tp is None:
                continue
            broker = EpochEndOffset(leader_epoch=part.leader_epoch, end_offset=part.end_offset)
            result = end_offset(epoch, broker, self._tiered.lineage(tp))
            if result != broker:
                editor.put(
                    dataclasses.replace(
                        part, leader_epoch=result.leader_epoch, end_offset=result.end_offset
                    )
                )
        return editor.body()

    def _tp(self, name: PartitionName) -> TopicIdPartition | None:
        return self._tiered.partition(topic=name[0], topic_id=None, partition=name[1])
