"""Fetch v4-v17 through the remote tier (KIP-405 "Consumer Fetch Requests").

A consumer's Fetch goes to the broker as always. Its tiered partitions are planned by
:class:`~proxy.remote.fetch_plan.FetchPlanner`: those known to be served remotely are
forwarded as probes and read from the remote tier at once, in parallel with the broker's
answer. When the broker answers, every tiered partition teaches
:class:`~proxy.remote.broker_view.BrokerView` what the broker holds, and those that the
remote tier must serve (the probes, and partitions the broker answered OFFSET_OUT_OF_RANGE
inside the remote tier) are read by :class:`~proxy.remote.reads.RemoteReads`, waited for in
the purgatory, and put into the response. The broker remembers the probe positions in the
fetch session; :mod:`proxy.remote.sessions` keeps the client's and the broker's positions
apart and puts the client's back when the partition is served by the broker again.

Each remote-served partition gets whole batches from the one holding its fetch offset,
within its ``partition_max_bytes`` and what the broker's partitions left of the request's
``max_bytes`` (at least one batch when the response would otherwise be empty, KIP-74), below
the broker's high watermark (last stable offset for READ_COMMITTED), with error NONE,
``log_start_offset`` = the whole log's start, ``preferred_read_replica`` = -1, and for
READ_COMMITTED the aborted transactions of the range. Every Fetch response reports the
whole log's start for tiered partitions, as Kafka with tiered storage does. Errors per
partition are described in :mod:`proxy.remote.reads`.

Remote data goes only to partitions the broker itself has just answered on this
connection without an error other than OFFSET_OUT_OF_RANGE (or, in an incremental fetch
session, left out as unchanged — it still checked them), so the broker's authorisation
governs remote reads too. Follower fetches pass through untouched.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Self

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.fetch_bodies import (
    FIRST_SESSION_VERSION,
    FetchedPartition,
    FetchPosition,
    FetchRequestView,
    FetchResponseEditor,
    PartitionKey,
    read_fetch_request,
    rewrite_fetch_request,
    session_not_found_response,
)
from protocol.messages import ApiKey
from protocol.records import batches_below, fit_batches, next_offset_after
from proxy.identities import ClientIdentities
from proxy.interceptors.base import Answer, Call, Interceptor
from proxy.logs import event
from proxy.remote.broker_view import BrokerView, PartitionState
from proxy.remote.client_quotas import ClientQuotas, QuotaEntity
from proxy.remote.fetch_plan import FetchPlanner, TieredPartition
from proxy.remote.metrics import NoReadCounters
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.reads import RemoteReads, Started
from proxy.remote.sessions import FetchSessions, SessionView
from proxy.remote.tier import RemoteTier

__all__ = ["FetchInterceptor"]

_log = logging.getLogger("tierproxy.fetch")

_NONE: Final = int(KafkaError.NONE)
_READABLE: Final = frozenset({int(KafkaError.NONE), int(KafkaError.OFFSET_OUT_OF_RANGE)})
"""Broker answers that let a connection read a partition (its rights and leadership hold)."""
_PLAN_BYTES_KEPT: Final = 64 * 1024 * 1024
"""Memory for the plans of Fetches between request and response (an estimate, see
:func:`_plan_size`): a closed connection's plans are dropped at once, so this bound only
bites with very many Fetches in flight; the oldest plans then go, their queued reads
cancelled, and their responses pass as the broker sent them."""
_PLAN_BYTES: Final = 512
_PARTITION_PLAN_BYTES: Final = 300
_CONNECTIONS_KEPT: Final = 100_000
"""Connections whose partitions' turns (see ``_fill``) are remembered."""
_SESSION_FIELDS: Final = struct.Struct(">hi")
"""Fetch v7+ response body after ``throttle_time_ms``: ``error_code``, ``session_id``."""
_THROTTLE_BYTES: Final = 4


@dataclass(slots=True, kw_only=True)
class _Plan:
    """One Fetch between its request and its response."""

    view: SessionView
    request: FetchRequestView
    tiered: dict[PartitionKey, TieredPartition]
    started: float
    """Event-loop time when the request went to the broker."""
    early: dict[PartitionKey, Started] = field(default_factory=dict)
    """Reads of remote-served partitions started with the request."""


class _Verdict(Enum):
    """Who answers a tiered partition, given the broker's answer."""

    REMOTE = "remote"
    """The remote tier: a probe the broker accepted, or an offset it no longer holds."""
    BROKER = "broker"
    """The broker's own answer stands (its records, or its error)."""
    RETRY = "retry"
    """Neither yet: the broker's log start moved and nobody knows whether the remote tier
    still joins it. No records and no error; the next Fetch probes (see the planner)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Local:
    """A partition the broker answered with records of its own."""

    key: PartitionKey
    records: bytes


class _Turns:
    """Which partitions of one connection got records least recently (see ``_fill``)."""

    __slots__ = ("_last", "_tick")

    def __init__(self) -> None:
        self._last: dict[PartitionKey, int] = {}
        self._tick = 0

    def order(self, entries: list[_Local | _Read]) -> list[_Local | _Read]:
        """``entries`` with those served least recently (or never) first; stable."""
        return sorted(entries, key=lambda e: self._last.get(_key_of(e), -1))

    def served(self, key: PartitionKey) -> None:
        self._tick += 1
        self._last[key] = self._tick


def _key_of(entry: _Local | _Read) -> PartitionKey:
    return entry.key if isinstance(entry, _Local) else entry.tiered.key


@dataclass(frozen=True, slots=True, kw_only=True)
class _Read:
    """A remote read of one partition, from the broker's answer to the reply's fields."""

    tiered: TieredPartition
    state: PartitionState
    started: Started = None
    retry: bool = False
    """Answer without records and without reading (:attr:`_Verdict.RETRY`)."""

    @property
    def throttled(self) -> bool:
        """No read was made and no error is to be answered (quota, or no room left)."""
        return self.started is None and not self.retry


def _plan_size(plan: _Plan) -> int:
    """About how many bytes a plan holds (its views, positions and read handles)."""
    return _PLAN_BYTES + _PARTITION_PLAN_BYTES * (len(plan.view.client) + len(plan.tiered))


def _cancel_early_reads(plan: _Plan) -> None:
    for started in plan.early.values():
        if isinstance(started, asyncio.Future):
            started.cancel()  # a read still queued never starts; a running one finishes


class _PlanCache(LRUCache[tuple[int, int], _Plan]):
    """Plans by (connection, correlation id), bounded in bytes; evicted plans' queued
    reads are cancelled."""

    def __init__(self, max_bytes: int = _PLAN_BYTES_KEPT) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=_plan_size)

    def popitem(self) -> tuple[tuple[int, int], _Plan]:
        key, plan = super().popitem()
        _cancel_early_reads(plan)
        return key, plan


class _Plans:
    """The plans of Fetches in flight, with each connection's correlation ids."""

    def __init__(self) -> None:
        self._plans = _PlanCache()
        self._by_connection: dict[int, set[int]] = {}

    def add(self, connection_id: int, correlation_id: int, plan: _Plan) -> None:
        self._plans[(connection_id, correlation_id)] = plan
        self._by_connection.setdefault(connection_id, set()).add(correlation_id)

    def get(self, connection_id: int, correlation_id: int) -> _Plan | None:
        return self._plans.get((connection_id, correlation_id))

    def pop(self, connection_id: int, correlation_id: int) -> _Plan | None:
        ids = self._by_connection.get(connection_id)
        if ids is not None:
            ids.discard(correlation_id)
            if not ids:
                del self._by_connection[connection_id]
        return self._plans.pop((connection_id, correlation_id), None)

    def release(self, connection_id: int) -> None:
        """Drop a closed connection's plans and cancel their queued reads."""
        for correlation_id in self._by_connection.pop(connection_id, ()):
            plan = self._plans.pop((connection_id, correlation_id), None)
            if plan is not None:
                _cancel_early_reads(plan)


class FetchInterceptor(Interceptor):
    """Serves the tiered part of consumers' Fetches; see the module docstring."""

    def __init__(
        self,
        *,
        planner: FetchPlanner,
        reads: RemoteReads,
        sessions: FetchSessions,
        purgatory: RemoteFetchPurgatory,
        broker_view: BrokerView,
        quotas: ClientQuotas,
        identities: ClientIdentities,
    ) -> None:
        self._planner = planner
        self._reads = reads
        self._sessions = sessions
        self._purgatory = purgatory
        self._broker = broker_view
        self._quotas = quotas
        self._identities = identities
        self._plans = _Plans()
        self._turns: LRUCache[int, _Turns] = LRUCache(_CONNECTIONS_KEPT)
        self._allowed: LRUCache[int, set[PartitionKey]] = LRUCache(_CONNECTIONS_KEPT)
        """Per connection, tiered partitions the broker answered without refusing them
        (no error, or OFFSET_OUT_OF_RANGE): reads of these may start with the request."""

    @classmethod
    def for_tier(cls, tier: RemoteTier) -> Self:
        """The interceptor over ``tier``'s shared services."""
        return cls(
            planner=FetchPlanner(
                partitions=tier,
                broker_view=tier.broker_view,
                offload=tier.offload,
                fallbacks=tier.fallbacks,
            ),
            reads=RemoteReads(
                pool=tier.pool,
                reader=tier.reader,
                quota=tier.quota,
                broker_view=tier.broker_view,
                fallbacks=tier.fallbacks,
                counters=tier.metrics or NoReadCounters(),
            ),
            sessions=tier.sessions,
            purgatory=tier.purgatory,
            broker_view=tier.broker_view,
            quotas=tier.client_quotas,
            identities=tier.identities,
        )

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.FETCH: range(4, 18)}

    @property
    def needs_request(self) -> bool:
        return True

    # -- request -----------------------------------------------------------------------

    def on_request(self, call: Call) -> Any | Answer:
        version = call.header.api_version
        request = read_fetch_request(call.request, version)
        if request.replica_id >= 0:
            return call.request  # a follower: replication is none of the proxy's business
        connection_id = call.connection.connection_id
        view = self._sessions.open(
            connection_id=connection_id,
            session_id=request.session_id,
            epoch=request.session_epoch,
            listed=list(request.partitions),
            forgotten=request.forgotten,
        )
        if view is None:
            # The client recovers with a full session; many of these mean the session
            # cache is too small for the consumers (remote.fetch.session.cache.slots).
            event(
                _log,
                logging.WARNING,
                "fetch.session.unknown",
                conn=connection_id,
                session=request.session_id,
                epoch=request.session_epoch,
            )
            return Answer(response=session_not_found_response(version))
        tiered: dict[PartitionKey, TieredPartition] = {}
        desired: dict[PartitionKey, FetchPosition] = {}
        for key, position in view.client.items():
            planned = self._planner.plan(key, position, read_committed=request.read_committed)
            desired[key] = position
            if planned is not None:
                tiered[key] = planned
                desired[key] = self._planner.forwarded_position(
                    planned, read_committed=request.read_committed
                )
        sent = self._sessions.forwarded(view, desired)
        plan = _Plan(
            view=view,
            request=request,
            tiered=tiered,
            started=asyncio.get_running_loop().time(),
        )
        allowed = self._allowed.get(connection_id, ())
        for key, planned in tiered.items():
            if planned.served and planned.reach_known and key in allowed:
                # The read runs while the broker answers the probe, so a Fetch costs the
                # longer of the two round trips, not their sum. Only for partitions the
                # broker already let this connection read: a client without rights must
                # not make the proxy read remote storage at all.
                budget = min(planned.position.partition_max_bytes, request.max_bytes)
                plan.early[key] = self._reads.start(
                    connection_id, planned, budget, read_committed=request.read_committed
                )
        self._plans.add(connection_id, call.header.correlation_id, plan)
        unchanged = len(sent) == len(view.listed) and all(
            position == view.client[key] for key, position in sent
        )
        if unchanged:
            return call.request
        served = any(t.served for t in tiered.values())
        return rewrite_fetch_request(call.request, version, sent, min_bytes=0 if served else None)

    def on_connection_closed(self, connection_id: int) -> None:
        """Drop the connection's plans (their queued reads cancelled), sessions and turns."""
        self._plans.release(connection_id)
        self._sessions.release(connection_id)
        self._turns.pop(connection_id, None)
        self._allowed.pop(connection_id, None)

    # -- response ----------------------------------------------------------------------

    def wants_response(self, call: Call, body: memoryview) -> bool:
        """Whether the response must be decoded: tiered partitions are involved and the
        broker did not fail the whole Fetch (v7+ session fields, read without decoding)."""
        plan = self._plans.get(call.connection.connection_id, call.header.correlation_id)
        if plan is None or not plan.tiered:
            return False
        if call.header.api_version < FIRST_SESSION_VERSION:
            return True
        try:
            error, _session_id = _SESSION_FIELDS.unpack_from(body, _THROTTLE_BYTES)
        except struct.error:
            return True  # malformed: let the decoder report it
        return bool(error == KafkaError.NONE)

    def on_raw_response(self, call: Call, body: memoryview) -> None:
        """A response that passes undecoded: only its session fields matter."""
        plan = self._plans.pop(call.connection.connection_id, call.header.correlation_id)
        if plan is None or call.header.api_version < FIRST_SESSION_VERSION:
            return
        error, session_id = _SESSION_FIELDS.unpack_from(body, _THROTTLE_BYTES)
        self._session_answered(plan, error, session_id)

    def _session_answered(self, plan: _Plan, error: int, session_id: int) -> None:
        failed = error != KafkaError.NONE
        self._sessions.answered(plan.view, session_id=0 if failed else session_id, error=failed)

    async def on_response(self, call: Call, response: Any) -> Any:
        plan = self._plans.pop(call.connection.connection_id, call.header.correlation_id)
        if plan is None:
            return response
        editor = FetchResponseEditor(response, call.header.api_version)
        if call.header.api_version >= FIRST_SESSION_VERSION:
            self._session_answered(plan, editor.error, editor.session_id)
        if editor.error != KafkaError.NONE or not plan.tiered:
            return response
        reads, local = self._collect(call.connection.connection_id, plan, editor)
        if not reads:
            return editor.body()
        entity = QuotaEntity(
            principal=self._identities.principal(call.connection.connection_id),
            client_id=call.header.client_id,
        )
        throttle = max(editor.throttle_time_ms, self._quotas.throttle_time_ms(entity))
        if throttle > 0:
            # The broker throttles this client, or its remote bytes are over quota: no
            # remote bytes in this response (reads already running still warm the cache).
            for read in reads:
                editor.put(self._reply(read, plan, None))
            editor.set_throttle_time_ms(throttle)
            return editor.body()
        reads = [self._start(call, plan, read) for read in reads]
        futures = [r.started for r in reads if isinstance(r.started, asyncio.Future)]
        try:
            await self._purgatory.wait(futures)
        except asyncio.CancelledError:
            # The connection closed while this response waited: nobody will read these.
            for future in futures:
                future.cancel()
            raise
        filled = self._fill(call.connection.connection_id, plan, editor, entity, [*local, *reads])
        if filled == 0 and plan.request.min_bytes > 0 and all(r.throttled for r in reads):
            await self._hold(plan)
        return editor.body()

    def _fill(
        self,
        connection_id: int,
        plan: _Plan,
        editor: FetchResponseEditor,
        entity: QuotaEntity,
        entries: list[_Local | _Read],
    ) -> int:
        """Put the partitions' records into the response within its ``max_bytes``; the bytes.

        Partitions take turns: those that got records least recently come first, as Kafka's
        fetch sessions move partitions that returned data to the end. Otherwise, with the
        broker's partitions always first, a remote batch larger than what they left would
        never fit. A broker partition that comes later keeps the whole batches that fit.
        The remote bytes then count against the client's quota; if they break it, they are
        not served (see :mod:`proxy.remote.client_quotas`).
        """
        turns = self._turns.get(connection_id)
        if turns is None:
            turns = self._turns[connection_id] = _Turns()
        filled = 0
        replies: list[tuple[_Read, FetchedPartition]] = []
        for entry in turns.order(entries):
            room = max(0, plan.request.max_bytes - filled)
            if isinstance(entry, _Local):
                records = fit_batches(entry.records, room, at_least_one=filled == 0)
                if len(records) < len(entry.records):
                    editor.set_records(entry.key, records)
            else:
                reply = self._reply(entry, plan, room, first=filled == 0)
                replies.append((entry, reply))
                records = reply.records
            if records:
                turns.served(_key_of(entry))
            filled += len(records)
        remote_bytes = sum(len(reply.records) for _read, reply in replies)
        throttle = self._quotas.record(entity, remote_bytes)
        if throttle > 0:
            replies = [(read, self._reply(read, plan, None)) for read, _reply in replies]
            editor.set_throttle_time_ms(max(editor.throttle_time_ms, throttle))
            filled -= remote_bytes
        for read, reply in replies:
            self._reads.served(read.tiered.tp, len(reply.records))
            editor.put(reply)
        return filled

    def _collect(
        self, connection_id: int, plan: _Plan, editor: FetchResponseEditor
    ) -> tuple[list[_Read], list[_Local]]:
        """The remote reads this response needs, and the broker's partitions with records.

        Every tiered partition the broker answered teaches the broker view (and, unless the
        broker refused it, lets this connection's next reads of it start early); those it
        serves itself get the whole log's start on the way.
        """
        reads: list[_Read] = []
        local: list[_Local] = []
        allowed = self._allowed.get(connection_id)
        if allowed is None:
            allowed = self._allowed[connection_id] = set()
        for part in editor.partitions():
            tiered = plan.tiered.get(part.key)
            if tiered is None:
                if part.records:
                    local.append(_Local(key=part.key, records=part.records))
                continue
            asked = (
                plan.view.sent.get(part.key) or plan.view.broker.get(part.key) or tiered.position
            ).fetch_offset
            state = self._broker.learn(tiered.tp, part, offset=asked, remote=tiered.remote)
            if part.error in _READABLE:
                allowed.add(part.key)
            else:
                allowed.discard(part.key)
            verdict = _verdict(tiered, part, state)
            if verdict is not _Verdict.BROKER:
                reads.append(_Read(tiered=tiered, state=state, retry=verdict is _Verdict.RETRY))
                continue
            if part.records:
                local.append(_Local(key=part.key, records=part.records))
            if part.error == KafkaError.NONE and part.log_start_offset >= 0:
                editor.set_log_start(part.key, min(tiered.remote.start, part.log_start_offset))
        if plan.view.incremental:
            # A remote-served session partition the broker left out of an incremental
            # answer: nothing changed at the probe position; it checked the partition.
            reads += [
                _Read(tiered=tiered, state=self._broker.state(tiered.tp))
                for key, tiered in plan.tiered.items()
                if tiered.served and tiered.reach_known and key not in editor
            ]
        return reads, local

    def _start(self, call: Call, plan: _Plan, read: _Read) -> _Read:
        """The read for a partition the broker answered: the early one, or a new one unless
        the quota or the queue say no. It is bounded by the partition's own limit only:
        where it falls in the response's ``max_bytes`` is decided when the response is
        filled (see :meth:`_fill`)."""
        key = read.tiered.key
        if read.retry:
            return read
        if key in plan.early:
            started = plan.early[key]
        else:
            started = self._reads.start(
                call.connection.connection_id,
                read.tiered,
                min(read.tiered.position.partition_max_bytes, plan.request.max_bytes),
                read_committed=plan.request.read_committed,
            )
        return _Read(tiered=read.tiered, state=read.state, started=started)

    def _reply(
        self, read: _Read, plan: _Plan, room: int | None, *, first: bool = False
    ) -> FetchedPartition:
        """The partition entry for a remote-served partition; with no ``room`` (throttled),
        its error if any but no records."""
        state, tiered = read.state, read.tiered
        high_watermark = _known(state.high_watermark)
        last_stable_offset = _known(state.last_stable_offset)
        read_committed = plan.request.read_committed
        error, records, aborted = _NONE, b"", None
        if isinstance(read.started, int):
            error = read.started
        elif read.started is not None and room is not None:
            outcome = self._reads.outcome(tiered, read.started)
            error = outcome.error
            if outcome.records is not None:
                result = outcome.records
                bound = last_stable_offset if read_committed else high_watermark
                records = result.records if bound < 0 else batches_below(result.records, bound)
                records = fit_batches(records, room, at_least_one=first)
                if read_committed:
                    end = next_offset_after(records)
                    aborted = tuple(t for t in result.aborted if t.first_offset < end)
        return FetchedPartition(
            key=tiered.key,
            error=error,
            high_watermark=high_watermark,
            last_stable_offset=last_stable_offset,
            log_start_offset=state.whole_log_start(tiered.remote),
            records=records,
            aborted=aborted if read_committed else None,
        )

    async def _hold(self, plan: _Plan) -> None:
        """Answer an empty, quota-throttled Fetch no earlier than its max wait.

        The broker was asked with ``min_bytes`` 0 and answered at once; Kafka would have
        parked a Fetch without data until its max wait, and so does the proxy, so that a
        throttled consumer does not poll in a tight loop.
        """
        loop = asyncio.get_running_loop()
        remaining = plan.started + plan.request.max_wait_ms / 1000 - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)


def _verdict(tiered: TieredPartition, answer: FetchedPartition, state: PartitionState) -> _Verdict:
    """Who answers ``tiered`` now that the broker answered ``answer`` (and ``state`` holds
    what that taught). Errors other than OFFSET_OUT_OF_RANGE are always the broker's
    (authorisation, leadership, ...): they hold whatever the position."""
    offset, remote = tiered.position.fetch_offset, tiered.remote
    reaches = state.reaches(remote)
    if answer.error == KafkaError.NONE:
        if not tiered.served:
            return _Verdict.BROKER
        # A probe's records are the broker's at the probe position, never the client's.
        return _Verdict.REMOTE if reaches else _Verdict.RETRY
    if answer.error != KafkaError.OFFSET_OUT_OF_RANGE or tiered.served:
        # A refused probe: the broker's log starts after it, so after the client's offset,
        # and the remote tier does not reach it: out of range, as Kafka answers.
        return _Verdict.BROKER
    if not remote.start <= offset <= remote.end or reaches is False:
        return _Verdict.BROKER
    if reaches is None:
        return _Verdict.RETRY
    return _Verdict.REMOTE


def _known(value: int | None) -> int:
    return -1 if value is None else value
