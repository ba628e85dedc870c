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

The work is split among named collaborators, and this module only orders it:

- :class:`~proxy.remote.fetch_plan.FetchPlanner` plans the request's tiered partitions,
  and :func:`~proxy.remote.fetch_plan.verdict` says who answers each once the broker has;
- :class:`~proxy.remote.reads.RemoteReads` schedules the remote reads in the reader pool
  and turns their results into answers (its docstring lists the errors per partition);
- :class:`~proxy.remote.assembly.ResponseAssembler` fits the records into the response;
- each Fetch's plan (:class:`~proxy.remote.inflight.FetchInFlight`) lives in its
  :class:`_FetchExchange`, which the connection keeps until the Fetch's response is
  written or the connection closes; it is never dropped while its Fetch is outstanding.

What a response teaches (the fetch session's positions, what the broker holds of each
tiered partition, which partitions this connection may read early) flows back through one
method, :meth:`FetchInterceptor._learn`; everything else on the way back only reads. Every
Fetch response reports the whole log's start for tiered partitions, as Kafka with tiered
storage does.

Remote data goes only to partitions the broker itself has just answered on this
connection without an error other than OFFSET_OUT_OF_RANGE (or, in an incremental fetch
session, left out as unchanged — it still checked them), so the broker's authorisation
governs remote reads too. "Just" is one exception: a sessionless Fetch, or an incremental
one in step with its fetch session, whose every partition is served remotely, each answered
by the broker on this connection without error within
``remote.fetch.broker.check.reuse.ms``, is answered without the broker
(:mod:`proxy.remote.broker_checks` says why that is within Kafka's own semantics;
:mod:`proxy.remote.sessions` how the broker's session epochs stay in sequence); such a
Fetch's response goes through :meth:`FetchInterceptor.on_response` like any other, with
nothing to learn. Follower fetches pass through untouched.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Final

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.fetch_bodies import (
    FIRST_SESSION_VERSION,
    FetchedPartition,
    FetchResponseEditor,
    PartitionKey,
    empty_fetch_response,
    read_fetch_request,
    rewrite_fetch_request,
    session_not_found_response,
)
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from proxy.identities import ClientIdentities
from proxy.interceptors.base import Answer, Call, Exchange, Forward, Interceptor
from proxy.logs import event
from proxy.remote.assembly import LocalRecords, RemoteRead, ResponseAssembler
from proxy.remote.broker_checks import BrokerChecks
from proxy.remote.broker_view import BrokerView, PartitionState
from proxy.remote.client_quotas import ClientQuotas, QuotaEntity
from proxy.remote.fetch_plan import FetchPlanner, TieredPartition, Verdict, verdict
from proxy.remote.inflight import FetchInFlight, estimated_size
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.reads import RemoteReads
from proxy.remote.sessions import FetchSessions

__all__ = ["FetchInterceptor"]

_log = logging.getLogger("tierproxy.fetch")

_NONE: Final = int(KafkaError.NONE)
_READABLE: Final = frozenset({_NONE, int(KafkaError.OFFSET_OUT_OF_RANGE)})
"""Broker answers that let a connection read a partition (its rights and leadership hold)."""
_CONNECTIONS_KEPT: Final = 100_000
"""Connections whose readable partitions are remembered."""
_SESSION_FIELDS: Final = struct.Struct(">hi")
"""Fetch v7+ response body after ``throttle_time_ms``: ``error_code``, ``session_id``."""
_THROTTLE_BYTES: Final = 4


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
        checks: BrokerChecks,
    ) -> None:
        self._planner = planner
        self._reads = reads
        self._sessions = sessions
        self._purgatory = purgatory
        self._broker = broker_view
        self._quotas = quotas
        self._identities = identities
        self._checks = checks
        self._assembler = ResponseAssembler(reads=reads, quotas=quotas)
        self._allowed: LRUCache[int, set[PartitionKey]] = LRUCache(_CONNECTIONS_KEPT)
        """Per connection, tiered partitions the broker answered without refusing them
        (no error, or OFFSET_OUT_OF_RANGE): reads of these may start with the request."""

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.FETCH: INTERCEPTED_VERSIONS[ApiKey.FETCH]}

    @property
    def needs_request(self) -> bool:
        return True

    # -- request -----------------------------------------------------------------------

    def on_request(self, call: Call) -> Forward | Answer:
        version = call.header.api_version
        request = read_fetch_request(call.body, version)
        if request.replica_id >= 0:
            return Forward(request=call.request)  # a follower: none of the proxy's business
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
        tiered = {
            key: planned
            for key, position in view.client.items()
            if (planned := self._planner.plan(key, position, read_committed=request.read_committed))
            is not None
        }
        now = asyncio.get_running_loop().time()
        plan = FetchInFlight(view=view, request=request, tiered=tiered, started=now)
        if self._answers_alone(connection_id, plan, now):
            # The broker answered every partition on this connection a moment ago.
            return self._answer_alone(call, plan)
        desired = {
            key: (
                position
                if key not in tiered
                else self._planner.forwarded_position(
                    tiered[key], read_committed=request.read_committed
                )
            )
            for key, position in view.client.items()
        }
        sent = self._sessions.forwarded(view, desired)
        allowed = self._allowed.get(connection_id, ())
        # The read runs while the broker answers the probe, so a Fetch costs the longer of
        # the two round trips, not their sum. Only for partitions the broker already let
        # this connection read: a client without rights must not make the proxy read
        # remote storage at all.
        self._start_early(connection_id, plan, {k: t for k, t in tiered.items() if k in allowed})
        exchange = _FetchExchange(self, call, plan)
        unchanged = len(sent) == len(view.listed) and all(
            position == view.client[key] for key, position in sent
        )
        if unchanged and view.broker_epoch is None:
            return Forward(request=call.request, then=exchange)
        served = any(t.served for t in tiered.values())
        rewritten = rewrite_fetch_request(
            call.body,
            version,
            sent,
            min_bytes=0 if served else None,
            session_epoch=view.broker_epoch,
        )
        return Forward(request=rewritten, then=exchange)

    def _answers_alone(self, connection_id: int, plan: FetchInFlight, now: float) -> bool:
        """Whether the Fetch may be answered without the broker: sessionless or an in-step
        incremental request (:mod:`proxy.remote.sessions`), every partition it covers served
        remotely with the broker's offsets known, and the broker's recent word on each
        (:class:`~proxy.remote.broker_checks.BrokerChecks`). A pure predicate."""
        request, view, tiered = plan.request, plan.view, plan.tiered
        if not (request.sessionless or view.in_step) or not tiered:
            return False
        if len(tiered) != len(view.client):
            return False
        for planned in tiered.values():
            if not (planned.served and planned.reach_known):
                return False
            state = self._broker.state(planned.tp)
            bound = state.last_stable_offset if request.read_committed else state.high_watermark
            if bound is None:
                return False
        return self._checks.vouch(connection_id, view.client.items(), now=now)

    def _answer_alone(self, call: Call, plan: FetchInFlight) -> Answer:
        """Answer the Fetch without the broker: the remote reads start now, and an empty
        response (in the client's fetch session, if any) is filled in :meth:`on_response`."""
        connection_id = call.connection.connection_id
        plan.alone = True
        session_id = plan.request.session_id
        if plan.view.in_step:
            self._sessions.answered_alone(plan.view)
        self._start_early(connection_id, plan, plan.tiered)
        self._checks.note_answered_alone()
        version = call.header.api_version
        return Answer(
            response=empty_fetch_response(version, session_id=session_id),
            then=_FetchExchange(self, call, plan),
        )

    def _start_early(
        self,
        connection_id: int,
        plan: FetchInFlight,
        tiered: Mapping[PartitionKey, TieredPartition],
    ) -> None:
        """Start the reads of the remote-served partitions of ``tiered`` with the request."""
        request = plan.request
        for key, planned in tiered.items():
            if planned.served and planned.reach_known:
                budget = min(planned.position.partition_max_bytes, request.max_bytes)
                plan.early[key] = self._reads.start(
                    connection_id, planned, budget, read_committed=request.read_committed
                )

    def on_connection_closed(self, connection_id: int) -> None:
        """Drop the connection's sessions, turns and the broker's checks (its Fetches'
        exchanges were released already)."""
        self._sessions.release(connection_id)
        self._assembler.forget(connection_id)
        self._allowed.pop(connection_id, None)
        self._checks.release(connection_id)

    # -- response ----------------------------------------------------------------------

    @staticmethod
    def _wants_response(call: Call, plan: FetchInFlight, body: memoryview) -> bool:
        """Whether the response must be decoded: tiered partitions are involved and the
        broker did not fail the whole Fetch (v7+ session fields, read without decoding)."""
        if not plan.tiered:
            return False
        if call.header.api_version < FIRST_SESSION_VERSION:
            return True
        try:
            error, _session_id = _SESSION_FIELDS.unpack_from(body, _THROTTLE_BYTES)
        except struct.error:
            return True  # malformed: let the decoder report it
        return bool(error == KafkaError.NONE)

    def _on_raw_response(self, call: Call, plan: FetchInFlight, body: memoryview) -> None:
        """A response that passes undecoded: only its session fields matter."""
        if call.header.api_version < FIRST_SESSION_VERSION:
            return
        error, session_id = _SESSION_FIELDS.unpack_from(body, _THROTTLE_BYTES)
        self._learn(call, plan, error=error, session_id=session_id, throttled=False, answers=())

    async def _on_response(self, call: Call, plan: FetchInFlight, response: Body) -> Body:
        editor = FetchResponseEditor(response, call.header.api_version)
        if plan.alone:
            reads = [
                RemoteRead(tiered=tiered, state=self._broker.state(tiered.tp))
                for tiered in plan.tiered.values()
            ]
            return await self._serve(call, plan, editor, reads, [])
        learned = functools.partial(
            self._learn,
            call,
            plan,
            error=editor.error,
            session_id=editor.session_id,
            throttled=editor.throttle_time_ms > 0,
        )
        if editor.error != KafkaError.NONE or not plan.tiered:
            learned(answers=())
            return response
        answers = list(editor.partitions())
        states = learned(answers=answers)
        _cancel_refused(plan, answers)
        reads, local = self._collect(plan, editor, answers, states)
        if not reads:
            return editor.body()
        return await self._serve(call, plan, editor, reads, local)

    async def _serve(
        self,
        call: Call,
        plan: FetchInFlight,
        editor: FetchResponseEditor,
        reads: list[RemoteRead],
        local: list[LocalRecords],
    ) -> Body:
        """The response with the remote reads waited for (within the purgatory) and fitted
        in beside the broker's ``local`` partitions, or none if the client is throttled."""
        entity = QuotaEntity(
            principal=self._identities.principal(call.connection),
            client_id=call.header.client_id,
        )
        throttle = max(editor.throttle_time_ms, self._quotas.throttle_time_ms(entity))
        if throttle > 0:
            # The broker throttles this client, or its remote bytes are over quota: no
            # remote bytes in this response (reads already running still warm the cache).
            for read in reads:
                editor.put(self._assembler.reply(read, plan, None))
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
        filled = self._assembler.fill(
            call.connection.connection_id, plan, editor, entity, [*local, *reads]
        )
        if filled == 0 and plan.request.min_bytes > 0 and all(r.throttled for r in reads):
            await self._hold(plan)
        return editor.body()

    def _learn(
        self,
        call: Call,
        plan: FetchInFlight,
        *,
        error: int,
        session_id: int,
        throttled: bool,
        answers: Sequence[FetchedPartition],
    ) -> dict[PartitionKey, PartitionState]:
        """Everything a Fetch response teaches, in one place; what the broker holds of each
        tiered partition it answered.

        - the fetch session: the broker's session id, or its end (v7+);
        - :class:`~proxy.remote.broker_view.BrokerView`: each tiered partition's high
          watermark, last stable offset and log start;
        - this connection's readable partitions: those the broker did not refuse, whose next
          reads may start with the request;
        - :class:`~proxy.remote.broker_checks.BrokerChecks`: the tiered partitions the broker
          just let this connection read, unthrottled: those it answered without error, and
          in an incremental fetch session those it left out (Kafka's ``FetchSession`` leaves
          out only partitions without news and without error).
        """
        connection_id = call.connection.connection_id
        failed = error != KafkaError.NONE
        if call.header.api_version >= FIRST_SESSION_VERSION:
            self._sessions.answered(plan.view, session_id=0 if failed else session_id, error=failed)
        vouching = not (failed or throttled)
        if not vouching:
            self._checks.release(connection_id)
        now = asyncio.get_running_loop().time()
        if vouching and plan.view.incremental:
            self._checked_unanswered(connection_id, plan, answers, now)
        if not answers:
            return {}
        allowed = self._allowed.get(connection_id)
        if allowed is None:
            allowed = self._allowed[connection_id] = set()
        states: dict[PartitionKey, PartitionState] = {}
        for part in answers:
            tiered = plan.tiered.get(part.key)
            if tiered is None:
                continue
            asked = (
                plan.view.sent.get(part.key) or plan.view.broker.get(part.key) or tiered.position
            ).fetch_offset
            states[part.key] = self._broker.learn(
                tiered.tp, part, offset=asked, remote=tiered.remote
            )
            if part.error in _READABLE:
                allowed.add(part.key)
            else:
                allowed.discard(part.key)
            if part.error == _NONE and vouching:
                epoch = tiered.position.current_leader_epoch
                self._checks.checked(connection_id, part.key, leader_epoch=epoch, at=now)
            else:
                self._checks.refused(connection_id, part.key)
        return states

    def _checked_unanswered(
        self,
        connection_id: int,
        plan: FetchInFlight,
        answers: Sequence[FetchedPartition],
        now: float,
    ) -> None:
        """Record the broker's check of the tiered partitions it left out of an incremental
        answer: it fetched them at the leader epoch its session holds, the client's."""
        answered = {part.key for part in answers}
        for key, tiered in plan.tiered.items():
            if key not in answered:
                epoch = tiered.position.current_leader_epoch
                self._checks.checked(connection_id, key, leader_epoch=epoch, at=now)

    def _collect(
        self,
        plan: FetchInFlight,
        editor: FetchResponseEditor,
        answers: Sequence[FetchedPartition],
        states: Mapping[PartitionKey, PartitionState],
    ) -> tuple[list[RemoteRead], list[LocalRecords]]:
        """The remote reads this response needs, and the broker's partitions with records;
        the partitions the broker serves itself get the whole log's start on the way."""
        reads: list[RemoteRead] = []
        local: list[LocalRecords] = []
        for part in answers:
            tiered = plan.tiered.get(part.key)
            if tiered is None:
                if part.records:
                    local.append(LocalRecords(key=part.key, records=part.records))
                continue
            state = states[part.key]
            who = verdict(tiered, part, state)
            if who is not Verdict.BROKER:
                reads.append(RemoteRead(tiered=tiered, state=state, retry=who is Verdict.RETRY))
                continue
            if part.records:
                local.append(LocalRecords(key=part.key, records=part.records))
            if part.error == KafkaError.NONE and part.log_start_offset >= 0:
                editor.set_log_start(part.key, min(tiered.remote.start, part.log_start_offset))
        if plan.view.incremental:
            # A remote-served session partition the broker left out of an incremental
            # answer: nothing changed at the probe position; it checked the partition.
            reads += [
                RemoteRead(tiered=tiered, state=self._broker.state(tiered.tp))
                for key, tiered in plan.tiered.items()
                if tiered.served and tiered.reach_known and key not in editor
            ]
        return reads, local

    def _start(self, call: Call, plan: FetchInFlight, read: RemoteRead) -> RemoteRead:
        """The read for a partition the broker answered: the early one, or a new one unless
        the quota or the queue say no. It is bounded by the partition's own limit only:
        where it falls in the response's ``max_bytes`` is decided when the response is
        filled (see :meth:`ResponseAssembler.fill`)."""
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
        return RemoteRead(tiered=read.tiered, state=read.state, started=started)

    async def _hold(self, plan: FetchInFlight) -> None:
        """Answer an empty, quota-throttled Fetch no earlier than its max wait.

        The broker was asked with ``min_bytes`` 0 and answered at once; Kafka would have
        parked a Fetch without data until its max wait, and so does the proxy, so that a
        throttled consumer does not poll in a tight loop.
        """
        loop = asyncio.get_running_loop()
        remaining = plan.started + plan.request.max_wait_ms / 1000 - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)


class _FetchExchange(Exchange):
    """One consumer Fetch from its request to its response: it holds the Fetch's plan, so
    the plan lives exactly as long as the Fetch is outstanding. Released unanswered (the
    connection closed), its queued early reads are cancelled; answered, reads still running
    finish and warm the cache."""

    __slots__ = ("_answered", "_call", "_interceptor", "_plan")

    def __init__(self, interceptor: FetchInterceptor, call: Call, plan: FetchInFlight) -> None:
        self._interceptor = interceptor
        self._call = call
        self._plan = plan
        self._answered = False

    @property
    def held_bytes(self) -> int:
        return estimated_size(self._plan)

    def wants_response(self, body: memoryview) -> bool:
        return self._interceptor._wants_response(self._call, self._plan, body)

    def on_raw_response(self, body: memoryview) -> None:
        self._answered = True
        self._interceptor._on_raw_response(self._call, self._plan, body)

    async def on_response(self, response: Body) -> Body:
        self._answered = True
        return await self._interceptor._on_response(self._call, self._plan, response)

    def release(self) -> None:
        if not self._answered:
            for started in self._plan.early.values():
                if isinstance(started, asyncio.Future):
                    started.cancel()  # a read still queued never starts; a running one ends


def _cancel_refused(plan: FetchInFlight, answers: Sequence[FetchedPartition]) -> None:
    """Cancel the early reads of the partitions the broker refused (an authorisation error,
    a leader elsewhere, ...): a read of a partition whose last broker answer on this
    connection refused it must not run, not even one started with the request."""
    for part in answers:
        if part.error not in _READABLE:
            started = plan.early.pop(part.key, None)
            if isinstance(started, asyncio.Future):
                started.cancel()
