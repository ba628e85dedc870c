"""ListOffsets v1-v11 over the whole log (KIP-405 "ListOffsets"; the sentinel table of
docs/architecture.md).

Every partition still goes to the broker, so its authorisation, leadership and
``current_leader_epoch`` checks decide first; a partition the broker answers with an error
keeps it. Sentinels the broker may not know are asked as ones it does (see
:mod:`proxy.remote.offsets`), and the answers of tiered partitions are then completed from
the remote tier: the remote log start for EARLIEST, the highest tiered offset for
LATEST_TIERED, the offset after it for EARLIEST_PENDING_UPLOAD, and for a timestamp the first
remote record at or after it (found in the remote time indexes), when that comes before the
broker's answer.

A timestamp lookup reads remote index files and a few batches; if remote storage fails or
takes longer than ``remote.fetch.max.wait.ms`` (at least a second: a lookup may need
several reads), the partition is answered KAFKA_STORAGE_ERROR, which clients retry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from protocol.errors import KafkaError
from protocol.indexes import CorruptIndexError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from protocol.offset_bodies import (
    ListedOffset,
    ListOffsetsEditor,
    PartitionName,
    read_list_offsets_request,
    rewrite_list_offsets_request,
)
from protocol.records import CorruptRecordBatchError
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse
from proxy.logs import event
from proxy.remote.broker_view import BrokerView
from proxy.remote.fetch_plan import RemotePartitions
from proxy.remote.metrics import ReadCounters
from proxy.remote.offsets import BrokerAnswer, OffsetQuery, RemoteRange, answer, plan
from storage.model import TopicIdPartition
from storage.remote_reader import TimestampAndOffset
from storage.rsm.base import RemoteStorageError

__all__ = ["ListOffsetsInterceptor"]

_log = logging.getLogger("tierproxy.list_offsets")

_QUERY_BYTES: Final = 200
"""About what one partition's query holds in a ListOffsets exchange."""
_STORAGE_ERROR: Final = int(KafkaError.KAFKA_STORAGE_ERROR)
_BROKER_ANSWERS: Final = frozenset({OffsetQuery.BROKER, OffsetQuery.EARLIEST_LOCAL})
"""Queries whose answer is the broker's own (EARLIEST_LOCAL was asked as EARLIEST)."""
_ALWAYS_ANSWERED: Final = frozenset(
    {OffsetQuery.LATEST_TIERED, OffsetQuery.EARLIEST_PENDING_UPLOAD}
)
"""Queries the proxy answers for every partition, tiered or not (the broker was asked
another question)."""
_ASKED_EARLIEST: Final = frozenset({OffsetQuery.EARLIEST, OffsetQuery.EARLIEST_LOCAL})
"""Queries asked of the broker as EARLIEST: its answer is its exact log start."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Query:
    query: OffsetQuery
    timestamp: int


class TimestampLookup(Protocol):
    """Finds offsets by time in the remote tier (``RemoteLogReader``)."""

    async def find_offset_by_timestamp(
        self, tp: TopicIdPartition, timestamp: int, *, lineage: Sequence[EpochEntry] | None = None
    ) -> TimestampAndOffset | None: ...


class ListOffsetsInterceptor(Interceptor):
    """Answers ListOffsets for tiered partitions over the whole log."""

    def __init__(
        self,
        *,
        partitions: RemotePartitions,
        broker_view: BrokerView,
        timestamps: TimestampLookup,
        counters: ReadCounters,
        lookup_seconds: float,
        kip405_minus_3: bool,
    ) -> None:
        """:param lookup_seconds: how long a lookup by time may take before the partition
        is answered KAFKA_STORAGE_ERROR.
        :param kip405_minus_3: answer -3 as KIP-405 first defined it (see :mod:`.offsets`)."""
        self._partitions = partitions
        self._broker = broker_view
        self._timestamps = timestamps
        self._counters = counters
        self._lookup_seconds = lookup_seconds
        self._kip405_minus_3 = kip405_minus_3

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.LIST_OFFSETS: INTERCEPTED_VERSIONS[ApiKey.LIST_OFFSETS]}

    @property
    def served_above_broker(self) -> Mapping[ApiKey, range]:
        # v8, v9 and v11 only allow the sentinels -4, -5 and -6, which on_request asks as
        # v7's -2 and -1; v10 only adds a bound on remote-storage reads, which a broker
        # behind the proxy never makes. A broker without them (Kafka before 4.2) still gets
        # an answerable request at its newest version from v7.
        return {ApiKey.LIST_OFFSETS: range(7, 12)}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        replica_id, asked = read_list_offsets_request(call.body)
        if replica_id >= 0:
            return Forward(request=call.request)  # a follower
        version = call.header.api_version
        queries: dict[PartitionName, _Query] = {}
        forwarded: dict[PartitionName, int] = {}
        for part in asked:
            query, forward = plan(part.timestamp, version, kip405_minus_3=self._kip405_minus_3)
            queries[part.name] = _Query(query=query, timestamp=part.timestamp)
            if forward != part.timestamp:
                forwarded[part.name] = forward
        needed = any(self._needs_answer(name, query) for name, query in queries.items())
        if not (needed or forwarded):
            return Forward(request=call.request)
        # Only rewritten (sentinels the broker answers alike): its answer stands as it is.
        respond = functools.partial(self._on_response, call.header.api_version, queries)
        exchange = OnResponse(
            respond if needed else None, held_bytes=_QUERY_BYTES * len(queries) if needed else 0
        )
        if not forwarded:
            return Forward(request=call.request, then=exchange)
        request = rewrite_list_offsets_request(call.body, forwarded)
        return Forward(request=request, then=exchange)

    def _needs_answer(self, name: PartitionName, query: _Query) -> bool:
        """Whether the broker's answer for this partition may need changing (or, for an
        EARLIEST_LOCAL of a tiered partition, teaches where the broker's log starts)."""
        if query.query in _ALWAYS_ANSWERED:
            return True
        if query.query is OffsetQuery.BROKER:
            return False
        return self._partition(name) is not None

    def _partition(self, name: PartitionName) -> TopicIdPartition | None:
        return self._partitions.partition(topic=name[0], topic_id=None, partition=name[1])

    async def _on_response(
        self, version: int, queries: dict[PartitionName, _Query], response: Body
    ) -> Body:
        editor = ListOffsetsEditor(response, version)
        jobs = []
        for part in editor.partitions():
            query = queries.get(part.name)
            if query is None or part.error != KafkaError.NONE:
                continue
            tp = self._partition(part.name)
            remote = None if tp is None else self._reachable(tp, query, part.offset)
            if query.query in _BROKER_ANSWERS or (
                remote is None and query.query not in _ALWAYS_ANSWERED
            ):
                continue
            jobs.append(self._answer(tp, query, part, remote))
        for answered in await asyncio.gather(*jobs):
            editor.put(answered)
        return editor.body()

    def _reachable(self, tp: TopicIdPartition, query: _Query, offset: int) -> RemoteRange | None:
        """``tp``'s remote tier, or ``None`` when it does not join the broker's log (a gap:
        remote data below it is not served, as in Kafka). EARLIEST answers (EARLIEST_LOCAL
        was asked as EARLIEST) are the broker's exact log start: the broker view learns it."""
        remote = self._partitions.remote_range(tp)
        broker = self._broker
        if query.query in _ASKED_EARLIEST:
            broker.learn_log_start(tp, offset, remote)
        if remote is None or broker.state(tp).reaches(remote) is False:
            return None
        return remote

    async def _answer(
        self,
        tp: TopicIdPartition | None,
        query: _Query,
        part: ListedOffset,
        remote: RemoteRange | None,
    ) -> ListedOffset:
        broker = BrokerAnswer(
            timestamp=part.timestamp, offset=part.offset, leader_epoch=part.leader_epoch
        )
        found: BrokerAnswer | None = None
        if query.query is OffsetQuery.TIMESTAMP and tp is not None and remote is not None:
            try:
                located = await self._lookup(tp, query.timestamp, remote)
            except (
                RemoteStorageError,
                CorruptIndexError,
                CorruptRecordBatchError,
                TimeoutError,
            ) as err:
                event(
                    _log,
                    logging.WARNING,
                    "remote.timestamp.failed",
                    topic=tp.topic,
                    partition=tp.partition,
                    timestamp=query.timestamp,
                    error=repr(err),
                )
                self._counters.read_failed(tp.topic, "timestamp-lookup")
                return dataclasses.replace(part, error=_STORAGE_ERROR, offset=-1, timestamp=-1)
            if located is not None:
                found = BrokerAnswer(
                    timestamp=located.timestamp,
                    offset=located.offset,
                    leader_epoch=-1 if located.leader_epoch is None else located.leader_epoch,
                )
        result = answer(
            query.query,
            broker,
            remote,
            found,
            tiered=tp is not None,
            log_start=None if tp is None else self._broker.state(tp).log_start_offset,
        )
        return dataclasses.replace(
            part, timestamp=result.timestamp, offset=result.offset, leader_epoch=result.leader_epoch
        )

    async def _lookup(
        self, tp: TopicIdPartition, timestamp: int, remote: RemoteRange
    ) -> TimestampAndOffset | None:
        async with asyncio.timeout(self._lookup_seconds):
            return await self._timestamps.find_offset_by_timestamp(
                tp, timestamp, lineage=remote.lineage
            )
