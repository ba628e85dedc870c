"""Fetch v4-v17 through the remote tier (KIP-405 "Consumer Fetch Requests").

A consumer Fetch goes to the broker as always. A partition is *served remotely* when its
fetch offset lies in the remote tier (``[remote log start, remote log end]``) and either

- the broker cannot serve it: the broker answered OFFSET_OUT_OF_RANGE, or earlier answers
  showed that the broker's own log starts after the offset; or
- the offload policy wants it (``remote.fetch.offload.enable``; DESIGN.md "Read path" 4).

A partition known to be served remotely is forwarded as a *probe*: at the last offset the
broker serves (or just after the remote tier until that is known) with a one-byte limit,
and the request's ``min_bytes`` set to 0. The broker still checks the client's rights and
leader epoch for it, answers at once, and reports its high watermark, last stable offset
and log start, but reads at most its last batch. The probe and the remote read run at the
same time. The
broker remembers that position in the fetch session; :mod:`proxy.remote.sessions` keeps
the client's and the broker's positions apart and puts the client's back when the partition
is served by the broker again.

The remote partitions of one Fetch are read in parallel by the reader pool and waited for
in the purgatory. Each gets whole batches from the one holding its fetch offset, within
the partition's ``partition_max_bytes`` and what the broker's partitions left of the
request's ``max_bytes`` (at least one batch when the response would otherwise be empty,
KIP-74), with error NONE, the broker's high watermark and last stable offset,
``log_start_offset`` = the whole log's start, ``preferred_read_replica`` = -1, and for
READ_COMMITTED the aborted transactions of the range. Every Fetch response reports the
whole log's start for tiered partitions, as Kafka with tiered storage does.

Remote data goes only to partitions the broker itself has just answered on this
connection without an error other than OFFSET_OUT_OF_RANGE (or, in an incremental fetch
session, left out as unchanged — it still checked them), so the broker's authorisation
governs remote reads too. Follower fetches pass through untouched.

Errors, per partition:

- Remote storage failing or overloaded (unreachable, timed out, reader queue full, damaged
  object): KAFKA_STORAGE_ERROR. Apache Kafka itself answers UNKNOWN_SERVER_ERROR here (its
  ``RemoteStorageException`` is not an ``ApiException``, so ``Errors.forException`` maps it
  to -1); but librdkafka hands UNKNOWN_SERVER_ERROR to the application as a consumer error,
  while every client (Java, librdkafka, kafka-python, aiokafka) retries KAFKA_STORAGE_ERROR
  quietly after a metadata refresh. It is also what the error means: "disk error when
  trying to access log file", retriable. Each such answer counts in
  ``tierproxy_RemoteFetchErrorsPerSec``.
- The segment was deleted between lookup and read, or the offset left the remote tier:
  OFFSET_OUT_OF_RANGE, so the client re-resolves its position with ListOffsets.
- The read did not finish within the purgatory's wait, or the remote fetch quota is
  exceeded (KIP-956): no records and no error, as Kafka does; the client asks again and,
  for a slow read, finds the data in the cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from cachetools import LRUCache

from protocol.errors import KafkaError
from protocol.indexes import CorruptIndexError
from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    ErrorCode,
    nested_class,
    response_class,
)
from protocol.records import CorruptRecordBatchError, iter_batches
from proxy.interceptors.base import Answer, Call, Interceptor
from proxy.logs import event
from proxy.remote.offsets import RemoteRange
from proxy.remote.pool import ReaderPoolFullError
from proxy.remote.sessions import FINAL_EPOCH, FetchPosition, PartitionKey, SessionView
from proxy.remote.tier import PartitionState, RemoteTier
from storage.model import TopicIdPartition
from storage.remote_reader import (
    OffsetNotInRemoteError,
    RemoteRecords,
    UnresolvedTransactionError,
)
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError

__all__ = ["FetchInterceptor", "MetadataTopicIds"]

_log = logging.getLogger("tierproxy.fetch")

_FIRST_SESSION_VERSION: Final = 7
_FIRST_METADATA_TOPIC_ID_VERSION: Final = 10
_FIRST_TOPIC_ID_VERSION: Final = 13
_FIRST_LOG_START_VERSION: Final = 5
_FIRST_PREFERRED_REPLICA_VERSION: Final = 11
_READ_COMMITTED: Final = 1
_NONE = ErrorCode(int(KafkaError.NONE))
_OUT_OF_RANGE = ErrorCode(int(KafkaError.OFFSET_OUT_OF_RANGE))
_STORAGE_ERROR = ErrorCode(int(KafkaError.KAFKA_STORAGE_ERROR))
_SESSION_NOT_FOUND = ErrorCode(int(KafkaError.FETCH_SESSION_ID_NOT_FOUND))
_PLANS_KEPT: Final = 100_000
"""Fetches between request and response whose plan is kept; a connection that dies
mid-Fetch leaves its plan behind, so the map is bounded."""
_SESSION_FIELDS: Final = struct.Struct(">hi")
"""Fetch v7+ response body after ``throttle_time_ms``: ``error_code``, ``session_id``."""
_THROTTLE_BYTES: Final = 4
_PROBE_BYTES: Final = 1
"""``partition_max_bytes`` forwarded for a remote-served partition: the broker answers at
once (at least one byte is readable) and reads next to nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tiered:
    """A tiered partition of one Fetch, as planned when the request went out."""

    tp: TopicIdPartition
    remote: RemoteRange
    position: FetchPosition
    """Where the client fetches."""
    served: bool
    """Forwarded at the proxy's own position: served remotely whatever the broker says."""


@dataclass(slots=True, kw_only=True)
class _Plan:
    view: SessionView
    tiered: dict[PartitionKey, _Tiered]
    read_committed: bool
    max_bytes: int
    max_wait_ms: int
    min_bytes: int
    started: float
    """Event-loop time when the request went to the broker."""
    session_recorded: bool = False
    """Whether the broker's answer has been applied to the session tracker."""
    early: dict[PartitionKey, asyncio.Future[RemoteRecords] | ErrorCode | None] = field(
        default_factory=dict
    )
    """Reads of remote-served partitions started with the request (see ``_read_early``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Read:
    """A remote read of one partition, from the broker's answer to the reply's fields."""

    key: PartitionKey
    tiered: _Tiered
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    future: asyncio.Future[RemoteRecords] | None
    """``None`` when the read was not made (quota, queue full, no budget)."""
    skipped_error: ErrorCode = _NONE


class FetchInterceptor(Interceptor):
    """Serves the tiered part of consumers' Fetches; see the module docstring."""

    def __init__(self, tier: RemoteTier) -> None:
        self._tier = tier
        self._plans: LRUCache[tuple[int, int], _Plan] = LRUCache(_PLANS_KEPT)
        self._unresolved: LRUCache[TopicIdPartition, tuple[int, int]] = LRUCache(_PLANS_KEPT)
        """Per partition, (remote end, offset): READ_COMMITTED reads from that offset reach a
        transaction the remote tier cannot resolve yet, so the broker serves them even
        under the offload policy, until more is tiered."""

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.FETCH: range(4, 18)}

    @property
    def needs_request(self) -> bool:
        return True

    # -- request -----------------------------------------------------------------------

    def on_request(self, call: Call) -> Any | Answer:
        request = call.request
        version = call.header.api_version
        if _replica_id(request) >= 0:
            return request  # a follower: replication is none of the proxy's business
        session_id = request.session_id if version >= _FIRST_SESSION_VERSION else 0
        epoch = request.session_epoch if version >= _FIRST_SESSION_VERSION else FINAL_EPOCH
        view = self._tier.sessions.open(
            connection_id=call.connection.connection_id,
            session_id=session_id,
            epoch=epoch,
            listed=list(_listed(request, version)),
            forgotten=_forgotten(request, version),
        )
        if view is None:
            return Answer(response=_session_not_found(version))
        tiered: dict[PartitionKey, _Tiered] = {}
        desired: dict[PartitionKey, FetchPosition] = {}
        read_committed = request.isolation_level == _READ_COMMITTED
        for key, position in view.client.items():
            planned = self._plan_partition(key, position, read_committed)
            desired[key] = position
            if planned is not None:
                tiered[key] = planned
                if planned.served:
                    desired[key] = dataclasses.replace(
                        position,
                        fetch_offset=self._probe_offset(planned, read_committed),
                        partition_max_bytes=_PROBE_BYTES,
                    )
        sent = self._tier.sessions.forwarded(view, desired)
        plan = _Plan(
            view=view,
            tiered=tiered,
            read_committed=read_committed,
            max_bytes=request.max_bytes,
            max_wait_ms=int(request.max_wait / timedelta(milliseconds=1)),
            min_bytes=request.min_bytes,
            started=asyncio.get_running_loop().time(),
        )
        for key, planned in tiered.items():
            if planned.served:
                plan.early[key] = self._read_early(call, plan, planned)
        self._plans[(call.connection.connection_id, call.header.correlation_id)] = plan
        unchanged = len(sent) == len(view.listed) and all(
            position == view.client[key] for key, position in sent
        )
        if unchanged:
            return request
        served = any(t.served for t in tiered.values())
        return _rebuild_request(request, version, sent, min_bytes=0 if served else None)

    def _probe_offset(self, planned: _Tiered, read_committed: bool) -> int:
        """Where the broker is asked about a remote-served partition: at the last offset it
        serves (its last batch is all it reads, and brokers that ignore the byte limit, like
        Tansu, send no more), or after the remote tier until that is known."""
        state = self._tier.state(planned.tp)
        bound = state.last_stable_offset if read_committed else state.high_watermark
        if bound is not None and bound > 0:
            return bound - 1
        return planned.remote.end + 1

    def _unresolvable(self, tp: TopicIdPartition, remote: RemoteRange, offset: int) -> bool:
        """Whether READ_COMMITTED reads at ``offset`` reach a transaction the remote tier
        cannot resolve yet (see ``_unresolved``)."""
        found = self._unresolved.get(tp)
        return found is not None and found[0] == remote.end and offset >= found[1]

    def _plan_partition(
        self, key: PartitionKey, position: FetchPosition, read_committed: bool
    ) -> _Tiered | None:
        topic, partition = key
        tier = self._tier
        tp = tier.partition(
            topic=topic if isinstance(topic, str) else None,
            topic_id=topic if isinstance(topic, uuid.UUID) else None,
            partition=partition,
        )
        if tp is None:
            return None
        remote = tier.remote_range(tp)
        if remote is None:
            return None
        offset = position.fetch_offset
        if not remote.start <= offset <= remote.end:
            return _Tiered(tp=tp, remote=remote, position=position, served=False)
        state = tier.state(tp)
        if state.log_start_offset is not None and offset < state.log_start_offset:
            return _Tiered(tp=tp, remote=remote, position=position, served=True)
        if read_committed and self._unresolvable(tp, remote, offset):
            return _Tiered(tp=tp, remote=remote, position=position, served=False)
        served = tier.offload.offload(
            fetch_offset=offset,
            remote_start=remote.start,
            remote_end=remote.end,
            high_watermark=state.high_watermark,
            bytes_per_record=tier.bytes_per_record(tp) if tier.offload.min_lag_bytes else 0.0,
        )
        return _Tiered(tp=tp, remote=remote, position=position, served=served)

    # -- response ----------------------------------------------------------------------

    def wants_response(self, call: Call, body: memoryview) -> bool:
        """Whether the response must be decoded: only when tiered partitions are involved.

        The session fields (v7+: throttle time, error code, session id lead the body) are
        read here without decoding, so untiered Fetches in sessions pass as raw bytes.
        """
        key = (call.connection.connection_id, call.header.correlation_id)
        plan = self._plans.get(key)
        if plan is None:
            return False
        failed = False
        if call.header.api_version >= _FIRST_SESSION_VERSION:
            try:
                error, session_id = _SESSION_FIELDS.unpack_from(body, _THROTTLE_BYTES)
            except struct.error:
                return True  # malformed: let the decoder report it
            failed = self._record_session(plan, error, session_id)
        if plan.tiered and not failed:
            return True
        del self._plans[key]
        return False

    def _record_session(self, plan: _Plan, error: int, session_id: int) -> bool:
        """Apply the broker's answer to the session tracker once; whether it failed."""
        failed = error != KafkaError.NONE
        if not plan.session_recorded:
            plan.session_recorded = True
            self._tier.sessions.answered(
                plan.view, session_id=0 if failed else session_id, error=failed
            )
        return failed

    async def on_response(self, call: Call, response: Any) -> Any:
        plan = self._plans.pop((call.connection.connection_id, call.header.correlation_id), None)
        if plan is None:
            return response
        version = call.header.api_version
        if version >= _FIRST_SESSION_VERSION and self._record_session(
            plan, int(response.error_code), response.session_id
        ):
            return response
        if not plan.tiered:
            return response
        topics = _topics_of(response, version)
        reads, local_bytes = self._collect(plan, topics, version)
        if not reads:
            return _rebuilt(response, topics)
        budget = plan.max_bytes - local_bytes
        reads = [(topic, p, self._start(call, plan, read, budget)) for topic, p, read in reads]
        futures = [read.future for _topic, _p, read in reads if read.future is not None]
        await self._tier.purgatory.wait(futures, plan.max_wait_ms)
        filled = local_bytes
        for topic, p, read in reads:
            part = self._reply(read, plan, version, response, filled)
            filled += len(part.records or b"")
            if topic is None:
                _append_partition(topics, read.key, part)
            else:
                topic.parts[p] = part
        if filled == 0 and plan.min_bytes > 0 and all(_throttled(r) for _t, _p, r in reads):
            await self._hold(plan)
        return _rebuilt(response, topics)

    async def _hold(self, plan: _Plan) -> None:
        """Answer an empty, quota-throttled Fetch no earlier than its max wait.

        The broker was asked with ``min_bytes`` 0 and answered at once; Kafka would have
        parked a Fetch without data until its max wait, and so does the proxy, so that a
        throttled consumer does not poll in a tight loop.
        """
        loop = asyncio.get_running_loop()
        remaining = plan.started + plan.max_wait_ms / 1000 - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)

    def _collect(
        self, plan: _Plan, topics: list[_TopicParts], version: int
    ) -> tuple[list[tuple[_TopicParts | None, int, _Read]], int]:
        """The remote reads this response needs, and the bytes of the broker's records.

        Tiered partitions the broker serves itself get the whole log's start on the way.
        """
        reads: list[tuple[_TopicParts | None, int, _Read]] = []
        answered: set[PartitionKey] = set()
        local_bytes = 0
        for topic in topics:
            for p, part in enumerate(topic.parts):
                key = (topic.key, part.partition_index)
                answered.add(key)
                tiered = plan.tiered.get(key)
                read = None if tiered is None else self._consider(key, tiered, part, version)
                if read is not None:
                    reads.append((topic, p, read))
                    continue
                if part.records:
                    local_bytes += len(part.records)
                if tiered is not None and version >= _FIRST_LOG_START_VERSION:
                    topic.parts[p] = _with_whole_log_start(part, tiered.remote)
        if plan.view.incremental:
            for key, tiered in plan.tiered.items():
                if tiered.served and key not in answered:
                    reads.append((None, -1, self._unanswered(key, tiered)))
        return reads, local_bytes

    def _consider(
        self, key: PartitionKey, tiered: _Tiered, part: Any, version: int
    ) -> _Read | None:
        """Learn from the broker's answer; the remote read to make for it, if any."""
        error = int(part.error_code)
        tier = self._tier
        state = tier.state(tiered.tp)
        offset = tiered.position.fetch_offset
        if error == KafkaError.NONE:
            broker_start = part.log_start_offset if version >= _FIRST_LOG_START_VERSION else -1
            state = PartitionState(
                high_watermark=part.high_watermark,
                last_stable_offset=part.last_stable_offset,
                log_start_offset=broker_start if broker_start >= 0 else state.log_start_offset,
            )
            tier.update_state(tiered.tp, state)
        elif error == KafkaError.OFFSET_OUT_OF_RANGE and tiered.remote.start <= offset:
            if offset <= tiered.remote.end:
                # The broker's log starts after ``offset`` but no later than the remote end
                # + 1 (nothing is deleted before it is tiered): probe there from now on, and
                # the broker's answer to the probe tells the exact start.
                floor = max(state.log_start_offset or 0, tiered.remote.end + 1)
                state = dataclasses.replace(state, log_start_offset=floor)
                tier.update_state(tiered.tp, state)
        else:
            return None
        if not tiered.served and (
            error != KafkaError.OFFSET_OUT_OF_RANGE
            or not tiered.remote.start <= offset <= tiered.remote.end
        ):
            return None
        return _Read(
            key=key,
            tiered=tiered,
            high_watermark=_known(state.high_watermark),
            last_stable_offset=_known(state.last_stable_offset),
            log_start_offset=_whole_log_start(tiered.remote, state.log_start_offset),
            future=None,
        )

    def _unanswered(self, key: PartitionKey, tiered: _Tiered) -> _Read:
        """A remote-served session partition the broker left out of an incremental answer
        (nothing changed at the probe position: it checked the partition and had no news)."""
        state = self._tier.state(tiered.tp)
        return _Read(
            key=key,
            tiered=tiered,
            high_watermark=_known(state.high_watermark),
            last_stable_offset=_known(state.last_stable_offset),
            log_start_offset=_whole_log_start(tiered.remote, state.log_start_offset),
            future=None,
        )

    def _read_early(
        self, call: Call, plan: _Plan, tiered: _Tiered
    ) -> asyncio.Future[RemoteRecords] | ErrorCode | None:
        """Start the read of a partition the request already sends to the remote tier.

        It runs while the broker answers the probe, so a Fetch costs the longer of the two
        round trips, not their sum. Its result is used only if the broker's answer allows
        it (no error other than OFFSET_OUT_OF_RANGE); it is bounded by the broker's high
        watermark or last stable offset once those are known.
        """
        budget = min(tiered.position.partition_max_bytes, plan.max_bytes)
        return self._submit(call, plan, tiered, budget)

    def _start(self, call: Call, plan: _Plan, read: _Read, budget: int) -> _Read:
        """The read for a partition the broker answered: the early one, or a new one unless
        the quota, the queue or the budget say no."""
        if read.key in plan.early:
            started = plan.early[read.key]
        elif budget <= 0 and budget < plan.max_bytes:
            # The broker's partitions already filled the response (budget < max_bytes means
            # they brought records), so KIP-74's "at least one batch" does not apply.
            return read
        else:
            started = self._submit(call, plan, read.tiered, budget)
        if isinstance(started, ErrorCode):
            return dataclasses.replace(read, skipped_error=started)
        return read if started is None else dataclasses.replace(read, future=started)

    def _submit(
        self, call: Call, plan: _Plan, tiered: _Tiered, budget: int
    ) -> asyncio.Future[RemoteRecords] | ErrorCode | None:
        """Submit a read to the pool: its future, an error for a full queue, or ``None``
        when the fetch quota says to answer without records."""
        tier = self._tier
        if tier.quota.exceeded():
            return None
        max_bytes = max(0, min(tiered.position.partition_max_bytes, budget))
        try:
            future = tier.pool.submit(
                call.connection.connection_id,
                lambda: tier.reader.read(
                    tiered.tp,
                    tiered.position.fetch_offset,
                    max_bytes,
                    read_committed=plan.read_committed,
                ),
            )
        except ReaderPoolFullError:
            self._count_error(tiered.tp, "queue-full")
            return _STORAGE_ERROR
        # A read whose answer is not used (the broker refused the partition, the purgatory
        # expired) must not be reported as an unhandled error.
        future.add_done_callback(_retrieve)
        if tier.metrics is not None:
            tier.metrics.requests.labels(tiered.tp.topic).inc()
        return future

    def _reply(self, read: _Read, plan: _Plan, version: int, response: Any, filled: int) -> Any:
        """The partition entry for a remote-served partition."""
        error, records, aborted = read.skipped_error, b"", None
        future = read.future
        if future is not None and future.done():
            error, result = self._outcome(read, future)
            if result is not None:
                bound = read.last_stable_offset if plan.read_committed else read.high_watermark
                records = result.records if bound < 0 else _before(result.records, bound)
                records = _fit(records, max(0, plan.max_bytes - filled), filled == 0)
                if records:
                    self._tier.quota.record(len(records))
                    if self._tier.metrics is not None:
                        self._tier.metrics.bytes.labels(read.tiered.tp.topic).inc(len(records))
                if plan.read_committed:
                    aborted = [t for t in result.aborted if t.first_offset < _end(records)]
        return _partition_entry(
            response,
            version,
            partition=read.key[1],
            error=error,
            high_watermark=read.high_watermark,
            last_stable_offset=read.last_stable_offset,
            log_start_offset=read.log_start_offset,
            records=records,
            aborted=aborted if plan.read_committed else None,
        )

    def _outcome(
        self, read: _Read, future: asyncio.Future[RemoteRecords]
    ) -> tuple[ErrorCode, RemoteRecords | None]:
        tp = read.tiered.tp
        if future.cancelled():
            return _NONE, None
        err = future.exception()
        if err is None:
            return _NONE, future.result()
        if isinstance(err, OffsetNotInRemoteError | RemoteResourceNotFoundError):
            self._count_error(tp, "not-found")
            return _OUT_OF_RANGE, None
        if isinstance(err, UnresolvedTransactionError):
            offset = read.tiered.position.fetch_offset
            broker_start = self._tier.state(tp).log_start_offset
            if broker_start is not None and broker_start <= offset:
                # Offloaded: the broker has these records and their outcome; let it serve
                # them (the client asks again at once, as after an empty answer).
                self._unresolved[tp] = (read.tiered.remote.end, offset)
                return _NONE, None
            self._count_error(tp, "unresolved-transaction")
            return _STORAGE_ERROR, None
        reason = "storage"
        if isinstance(err, CorruptIndexError | CorruptRecordBatchError):
            reason = "corrupt"
        elif not isinstance(err, RemoteStorageError):
            reason = "internal"
        event(
            _log,
            logging.WARNING,
            "remote.read.failed",
            topic=tp.topic,
            partition=tp.partition,
            offset=read.tiered.position.fetch_offset,
            reason=reason,
            error=repr(err),
        )
        self._count_error(tp, reason)
        return _STORAGE_ERROR, None

    def _count_error(self, tp: TopicIdPartition, reason: str) -> None:
        if self._tier.metrics is not None:
            self._tier.metrics.errors.labels(tp.topic, reason).inc()


class MetadataTopicIds(Interceptor):
    """Learns each topic's current id from Metadata responses (v10+), so that a Fetch by
    topic name never gets the tiered data of an older, deleted topic of the same name."""

    def __init__(self, tier: RemoteTier) -> None:
        self._tier = tier

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        versions = INTERCEPTED_VERSIONS[ApiKey.METADATA]
        return {ApiKey.METADATA: range(_FIRST_METADATA_TOPIC_ID_VERSION, versions[-1] + 1)}

    @property
    def needs_request(self) -> bool:
        return False

    def wants_response(self, call: Call, body: memoryview) -> bool:
        return True

    async def on_response(self, call: Call, response: Any) -> Any:
        for topic in response.topics:
            if topic.name and topic.topic_id is not None and topic.topic_id.int:
                self._tier.observe_topic(topic.name, topic.topic_id)
        return response


# -- request helpers -------------------------------------------------------------------


def _replica_id(request: Any) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _topic_key(topic: Any, version: int) -> str | uuid.UUID:
    key: str | uuid.UUID = topic.topic_id if version >= _FIRST_TOPIC_ID_VERSION else topic.topic
    return key


def _listed(request: Any, version: int) -> list[tuple[PartitionKey, FetchPosition]]:
    listed = []
    for topic in request.topics:
        name = _topic_key(topic, version)
        for part in topic.partitions:
            listed.append(
                (
                    (name, part.partition),
                    FetchPosition(
                        fetch_offset=part.fetch_offset,
                        partition_max_bytes=part.partition_max_bytes,
                        current_leader_epoch=getattr(part, "current_leader_epoch", -1),
                        last_fetched_epoch=getattr(part, "last_fetched_epoch", -1),
                        log_start_offset=getattr(part, "log_start_offset", -1),
                    ),
                )
            )
    return listed


def _forgotten(request: Any, version: int) -> list[PartitionKey]:
    if version < _FIRST_SESSION_VERSION:
        return []
    return [
        (_topic_key(topic, version), partition)
        for topic in request.forgotten_topics_data
        for partition in topic.partitions
    ]


def _build(entity_class: type[Any], **candidates: Any) -> Any:
    """An entity of ``entity_class`` from the candidate fields its version has."""
    names = {field.name for field in dataclasses.fields(entity_class)}
    return entity_class(**{k: v for k, v in candidates.items() if k in names})


def _rebuild_request(
    request: Any,
    version: int,
    sent: list[tuple[PartitionKey, FetchPosition]],
    *,
    min_bytes: int | None,
) -> Any:
    """``request`` listing exactly ``sent``, reusing the client's entries where unchanged."""
    topic_class = nested_class(type(request), "topics")
    partition_class = nested_class(topic_class, "partitions")
    originals = {
        (_topic_key(topic, version), part.partition): part
        for topic in request.topics
        for part in topic.partitions
    }
    grouped: dict[str | uuid.UUID, list[Any]] = {}
    for key, position in sent:
        original = originals.get(key)
        fields = {
            "fetch_offset": position.fetch_offset,
            "partition_max_bytes": position.partition_max_bytes,
        }
        if original is not None:
            part = dataclasses.replace(original, **fields)
        else:
            part = _build(
                partition_class,
                partition=key[1],
                current_leader_epoch=position.current_leader_epoch,
                last_fetched_epoch=position.last_fetched_epoch,
                log_start_offset=position.log_start_offset,
                replica_directory_id=None,
                **fields,
            )
        grouped.setdefault(key[0], []).append(part)
    topics = tuple(
        _build(topic_class, topic=name, topic_id=name, partitions=tuple(parts))
        for name, parts in grouped.items()
    )
    changes: dict[str, Any] = {"topics": topics}
    if min_bytes is not None:
        changes["min_bytes"] = min_bytes
    return dataclasses.replace(request, **changes)


def _session_not_found(version: int) -> Any:
    return _build(
        response_class(ApiKey.FETCH, version),
        throttle_time=timedelta(0),
        error_code=_SESSION_NOT_FOUND,
        session_id=0,
        responses=(),
        node_endpoints=(),
    )


# -- response helpers ------------------------------------------------------------------


def _known(value: int | None) -> int:
    return -1 if value is None else value


def _whole_log_start(remote: RemoteRange, broker_start: int | None) -> int:
    if broker_start is None or broker_start < 0:
        return remote.start
    return min(remote.start, broker_start)


def _with_whole_log_start(part: Any, remote: RemoteRange) -> Any:
    if int(part.error_code) != KafkaError.NONE or part.log_start_offset < 0:
        return part
    start = min(remote.start, part.log_start_offset)
    if start == part.log_start_offset:
        return part
    return dataclasses.replace(part, log_start_offset=start)


def _fit(records: bytes, room: int, first: bool) -> bytes:
    """The whole batches of ``records`` that fit in ``room`` bytes; at least the first one
    when the response is still empty (KIP-74)."""
    if len(records) <= room:
        return records
    end = 0
    for position, header in iter_batches(records):
        stop = position + header.size
        if stop > room and not (first and end == 0):
            break
        end = stop
    return records[:end]


def _before(records: bytes, max_offset: int) -> bytes:
    """The batches of ``records`` that start below ``max_offset``."""
    end = 0
    for position, header in iter_batches(records):
        if header.base_offset >= max_offset:
            break
        end = position + header.size
    return records if end == len(records) else records[:end]


def _throttled(read: _Read) -> bool:
    """A remote read the quota skipped (no read was made and no error is to be answered)."""
    return read.future is None and read.skipped_error == _NONE


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _end(records: bytes) -> int:
    last = -1
    for _position, header in iter_batches(records):
        last = header.next_offset
    return last


def _partition_entry(
    response: Any,
    version: int,
    *,
    partition: int,
    error: ErrorCode,
    high_watermark: int,
    last_stable_offset: int,
    log_start_offset: int,
    records: bytes,
    aborted: list[Any] | None,
) -> Any:
    topic_class = nested_class(type(response), "responses")
    partition_class = nested_class(topic_class, "partitions")
    aborted_entries = None
    if aborted is not None:
        aborted_class = nested_class(partition_class, "aborted_transactions")
        aborted_entries = tuple(
            aborted_class(producer_id=t.producer_id, first_offset=t.first_offset) for t in aborted
        )
    fields: dict[str, Any] = {
        "partition_index": partition,
        "error_code": error,
        "high_watermark": high_watermark,
        "last_stable_offset": last_stable_offset,
        "aborted_transactions": aborted_entries,
        "records": records,
    }
    if version >= _FIRST_LOG_START_VERSION:
        fields["log_start_offset"] = log_start_offset
    if version >= _FIRST_PREFERRED_REPLICA_VERSION:
        fields["preferred_read_replica"] = -1
    return _build(partition_class, **fields)


@dataclass(slots=True, kw_only=True)
class _TopicParts:
    """One topic entry of the response being rebuilt."""

    key: str | uuid.UUID
    original: Any | None
    parts: list[Any]


def _topics_of(response: Any, version: int) -> list[_TopicParts]:
    return [
        _TopicParts(key=_topic_key(topic, version), original=topic, parts=list(topic.partitions))
        for topic in response.responses
    ]


def _append_partition(topics: list[_TopicParts], key: PartitionKey, part: Any) -> None:
    """Add a partition the broker left out; to its topic's entry if there is one."""
    for topic in topics:
        if topic.key == key[0]:
            topic.parts.append(part)
            return
    topics.append(_TopicParts(key=key[0], original=None, parts=[part]))


def _rebuilt(response: Any, topics: list[_TopicParts]) -> Any:
    """``response`` with ``topics``; the same object when nothing changed."""
    topic_class = nested_class(type(response), "responses")
    entries = []
    changed = False
    for topic in topics:
        original = topic.original
        if (
            original is not None
            and len(original.partitions) == len(topic.parts)
            and all(a is b for a, b in zip(original.partitions, topic.parts, strict=True))
        ):
            entries.append(original)
            continue
        changed = True
        if original is not None:
            entries.append(dataclasses.replace(original, partitions=tuple(topic.parts)))
        else:
            entries.append(
                _build(
                    topic_class, topic=topic.key, topic_id=topic.key, partitions=tuple(topic.parts)
                )
            )
    if not changed:
        return response
    return dataclasses.replace(response, responses=tuple(entries))
