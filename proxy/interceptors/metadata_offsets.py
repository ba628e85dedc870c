"""Metadata answers start the proxy's questions about the tiered partitions they name.

Clients ask Metadata before they fetch. The proxy then asks the leaders of the tiered
partitions named in the answer for their offsets (:mod:`proxy.remote.broker_offsets`), so
that the first probe of each already goes where the broker has nothing to read. The answer
itself passes unchanged, after a short wait at most; the questions never fail it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from protocol.errors import KafkaError
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from protocol.metadata_bodies import MetadataTopic, read_metadata_topics
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse
from proxy.remote.broker_offsets import LedPartition
from proxy.remote.fetch_plan import RemotePartitions

__all__ = ["MetadataOffsets"]


class OffsetLearner(Protocol):
    """What asks the leaders (:class:`~proxy.remote.broker_offsets.BrokerOffsets`)."""

    async def learn(self, partitions: Iterable[LedPartition]) -> None: ...


class MetadataOffsets(Interceptor):
    """Hands the tiered partitions of each Metadata answer, with their leaders, to the
    learner; changes nothing."""

    def __init__(self, *, partitions: RemotePartitions, learner: OffsetLearner) -> None:
        self._partitions = partitions
        self._learner = learner

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.METADATA: INTERCEPTED_VERSIONS[ApiKey.METADATA]}

    def on_request(self, call: Call) -> Forward:
        learn = functools.partial(self._learn, call.header.api_version)
        return Forward(request=call.request, then=OnResponse(learn))

    async def _learn(self, version: int, response: Body) -> Body:
        await self._learner.learn(self._tiered(read_metadata_topics(response, version)))
        return response

    def _tiered(self, topics: Iterable[MetadataTopic]) -> Iterator[LedPartition]:
        """The tiered partitions of ``topics`` that have a leader. By topic id when the
        answer has one (v10+), so that a re-created topic never stands for its namesake."""
        for topic in topics:
            if topic.error != KafkaError.NONE or not topic.name:
                continue
            for part in topic.partitions:
                if part.error != KafkaError.NONE or part.leader < 0:
                    continue
                tp = self._partitions.partition(
                    topic=None if topic.topic_id else topic.name,
                    topic_id=topic.topic_id,
                    partition=part.index,
                )
                if tp is not None:
                    yield LedPartition(tp=tp, leader=part.leader)
