"""Fetch v4-v17 bodies as the read path reads and rewrites them: typed and version-independent.

kio gives one dataclass per Fetch version, and the fields move between versions:
``replica_state.replica_id`` replaces ``replica_id`` in v15, topic ids replace topic names in
v13, sessions start at v7, ``log_start_offset`` at v5, ``preferred_read_replica`` at v11.
This module is the one place that knows which version holds what. The rest of the proxy
sees :class:`FetchRequestView` (what a request asks for), :class:`FetchedPartition` (one
partition of a response) and :class:`FetchResponseEditor` (replace or add partitions of a
decoded response, then rebuild it once), all typed, and hands kio bodies back to
:mod:`protocol.messages` for encoding.

Rewriting keeps every field the proxy does not model (a partition's ``current_leader`` and
``diverging_epoch``, the request's ``rack_id``, ...): entries are changed with
``dataclasses.replace`` on the client's or broker's own entry where there is one.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol, cast

from protocol.buffers import Buffers
from protocol.errors import KafkaError
from protocol.messages import ApiKey, Body, ErrorCode, build, nested_class, response_class

__all__ = [
    "FIRST_LOG_START_VERSION",
    "FIRST_SESSION_VERSION",
    "FIRST_TOPIC_ID_VERSION",
    "AbortedTransaction",
    "FetchPosition",
    "FetchRequestView",
    "FetchResponseEditor",
    "FetchedPartition",
    "PartitionKey",
    "empty_fetch_response",
    "read_fetch_request",
    "rewrite_fetch_request",
    "session_not_found_response",
]

FIRST_LOG_START_VERSION: Final = 5
FIRST_SESSION_VERSION: Final = 7
FIRST_PREFERRED_REPLICA_VERSION: Final = 11
FIRST_TOPIC_ID_VERSION: Final = 13
READ_COMMITTED: Final = 1
NO_SESSION: Final = 0
FINAL_EPOCH: Final = -1

PartitionKey = tuple[str | uuid.UUID, int]
"""A partition as the request names it: (topic name, or topic id from v13, partition)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPosition:
    """The per-partition fields of a Fetch request that a fetch session remembers."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestView:
    """What a consumer's (or follower's) Fetch asks for, whatever its version."""

    version: int
    replica_id: int
    """-1 for consumers; a follower's broker id otherwise."""
    session_id: int
    session_epoch: int
    read_committed: bool
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: tuple[tuple[PartitionKey, FetchPosition], ...]
    """Every partition listed, in request order."""
    forgotten: tuple[PartitionKey, ...]

    @property
    def sessionless(self) -> bool:
        """Outside any fetch session (KIP-227): session 0, epoch -1 (always below v7)."""
        return self.session_id == NO_SESSION and self.session_epoch == FINAL_EPOCH


class AbortedTransaction(Protocol):
    """An aborted transaction as a Fetch response lists it."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedPartition:
    """One partition of a Fetch response, whatever its version.

    ``log_start_offset`` is -1 below v5 (the field does not exist there); ``aborted`` is
    ``None`` when the response lists none (READ_UNCOMMITTED, or no transaction).
    """

    key: PartitionKey
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | memoryview | Buffers
    """The broker's bytes, or views of the remote tier's (encoded without a copy)."""
    aborted: tuple[AbortedTransaction, ...] | None


def _topic_key(topic: Any, version: int) -> str | uuid.UUID:
    key: str | uuid.UUID = topic.topic_id if version >= FIRST_TOPIC_ID_VERSION else topic.topic
    return key


def _position(part: Any) -> FetchPosition:
    return FetchPosition(
        fetch_offset=int(part.fetch_offset),
        partition_max_bytes=int(part.partition_max_bytes),
        current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
        last_fetched_epoch=int(getattr(part, "last_fetched_epoch", -1)),
        log_start_offset=int(getattr(part, "log_start_offset", -1)),
    )


def read_fetch_request(request: Body, version: int) -> FetchRequestView:
    """The typed view of a decoded Fetch request body of ``version``."""
    body: Any = request
    state = getattr(body, "replica_state", None)
    replica_id = int(state.replica_id if state is not None else body.replica_id)
    sessions = version >= FIRST_SESSION_VERSION
    topics: Iterable[Any] = body.topics
    return FetchRequestView(
        version=version,
        replica_id=replica_id,
        session_id=int(body.session_id) if sessions else NO_SESSION,
        session_epoch=int(body.session_epoch) if sessions else FINAL_EPOCH,
        read_committed=int(body.isolation_level) == READ_COMMITTED,
        max_wait_ms=int(body.max_wait / timedelta(milliseconds=1)),
        min_bytes=int(body.min_bytes),
        max_bytes=int(body.max_bytes),
        partitions=tuple(
            ((_topic_key(topic, version), int(part.partition)), _position(part))
            for topic in topics
            for part in topic.partitions
        ),
        forgotten=tuple(
            (_topic_key(topic, version), int(partition))
            for topic in (body.forgotten_topics_data if sessions else ())
            for partition in topic.partitions
        ),
    )


def rewrite_fetch_request(
    request: Body,
    version: int,
    partitions: Sequence[tuple[PartitionKey, FetchPosition]],
    *,
    min_bytes: int | None,
    session_epoch: int | None = None,
) -> Body:
    """``request`` listing exactly ``partitions``, reusing the client's entries where it
    listed the partition (only the offset and byte limit change), and with ``min_bytes`` and
    ``session_epoch`` (v7+) if given."""
    body: Any = request
    topic_class = nested_class(type(body), "topics")
    partition_class = nested_class(topic_class, "partitions")
    originals = {
        (_topic_key(topic, version), int(part.partition)): part
        for topic in body.topics
        for part in topic.partitions
    }
    grouped: dict[str | uuid.UUID, list[Any]] = {}
    for key, position in partitions:
        original = originals.get(key)
        fields = {
            "fetch_offset": position.fetch_offset,
            "partition_max_bytes": position.partition_max_bytes,
        }
        if original is not None:
            part = dataclasses.replace(original, **fields)
        else:
            part = build(
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
        build(topic_class, topic=name, topic_id=name, partitions=tuple(parts))
        for name, parts in grouped.items()
    )
    changes: dict[str, Any] = {"topics": topics}
    if min_bytes is not None:
        changes["min_bytes"] = min_bytes
    if session_epoch is not None:
        changes["session_epoch"] = session_epoch
    return Body(dataclasses.replace(body, **changes))


def session_not_found_response(version: int) -> Body:
    """A whole-response FETCH_SESSION_ID_NOT_FOUND: the client starts a new session."""
    return _whole_response(version, KafkaError.FETCH_SESSION_ID_NOT_FOUND)


def empty_fetch_response(version: int, *, session_id: int = NO_SESSION) -> Body:
    """An answer without error and without partitions, in fetch session ``session_id``
    (v7+; none by default), for the proxy to fill (with :class:`FetchResponseEditor`) when
    it answers a Fetch without the broker."""
    return _whole_response(version, KafkaError.NONE, session_id=session_id)


def _whole_response(version: int, error: KafkaError, *, session_id: int = NO_SESSION) -> Body:
    return Body(
        build(
            response_class(ApiKey.FETCH, version),
            throttle_time=timedelta(0),
            error_code=ErrorCode(int(error)),
            session_id=session_id,
            responses=(),
            node_endpoints=(),
        )
    )


@dataclass(slots=True, kw_only=True)
class _TopicEntries:
    key: str | uuid.UUID
    original: Any | None
    parts: list[Any]


class FetchResponseEditor:
    """A decoded Fetch response whose partitions are read, replaced and added, then rebuilt.

    Partitions are addressed by their :class:`PartitionKey`; the rebuilt body keeps the
    broker's order, with added partitions after their topic's own (or in a new topic entry
    at the end). :meth:`body` returns the very object it was given when nothing changed.
    """

    def __init__(self, body: Body, version: int) -> None:
        self._body: Any = body
        self.version = version
        self._topic_class = nested_class(type(body), "responses")
        self._partition_class = nested_class(self._topic_class, "partitions")
        self._topics = [
            _TopicEntries(
                key=_topic_key(topic, version), original=topic, parts=list(topic.partitions)
            )
            for topic in cast(Any, body).responses
        ]
        self._where: dict[PartitionKey, tuple[_TopicEntries, int]] = {
            (topic.key, int(part.partition_index)): (topic, index)
            for topic in self._topics
            for index, part in enumerate(topic.parts)
        }
        self._changed = False

    @property
    def error(self) -> int:
        """The whole response's error code (v7+; NONE below)."""
        if self.version < FIRST_SESSION_VERSION:
            return int(KafkaError.NONE)
        return int(self._body.error_code)

    @property
    def throttle_time_ms(self) -> int:
        """How long the broker asked the client to wait before its next request."""
        return int(self._body.throttle_time / timedelta(milliseconds=1))

    def set_throttle_time_ms(self, throttle_time_ms: int) -> None:
        """Ask the client to wait ``throttle_time_ms`` before its next request (KIP-219)."""
        if throttle_time_ms != self.throttle_time_ms:
            self._body = dataclasses.replace(
                self._body, throttle_time=timedelta(milliseconds=throttle_time_ms)
            )
            self._changed = True

    @property
    def session_id(self) -> int:
        return int(self._body.session_id) if self.version >= FIRST_SESSION_VERSION else NO_SESSION

    def partitions(self) -> Iterator[FetchedPartition]:
        """Every partition the broker answered, in its order (additions not included)."""
        for key, (topic, index) in list(self._where.items()):
            if topic.original is not None:
                yield self._read(key, topic.parts[index])

    def __contains__(self, key: PartitionKey) -> bool:
        return key in self._where

    def _read(self, key: PartitionKey, part: Any) -> FetchedPartition:
        return FetchedPartition(
            key=key,
            error=int(part.error_code),
            high_watermark=int(part.high_watermark),
            last_stable_offset=int(part.last_stable_offset),
            log_start_offset=int(getattr(part, "log_start_offset", -1)),
            records=bytes(part.records) if part.records else b"",
            aborted=None if part.aborted_transactions is None else part.aborted_transactions,
        )

    def set_log_start(self, key: PartitionKey, log_start_offset: int) -> None:
        """Report ``log_start_offset`` for a partition the broker answered (v5+ only)."""
        if self.version < FIRST_LOG_START_VERSION:
            return
        topic, index = self._where[key]
        part = topic.parts[index]
        if int(part.log_start_offset) != log_start_offset:
            topic.parts[index] = dataclasses.replace(part, log_start_offset=log_start_offset)
            self._changed = True

    def set_records(self, key: PartitionKey, records: bytes | memoryview | Buffers) -> None:
        """Replace the records of a partition the broker answered (fewer whole batches)."""
        topic, index = self._where[key]
        topic.parts[index] = dataclasses.replace(topic.parts[index], records=records)
        self._changed = True

    def put(self, partition: FetchedPartition) -> None:
        """Answer ``partition.key`` with ``partition``: replaces the broker's entry (keeping
        the fields not modelled here) or adds one after its topic's others."""
        aborted = None
        if partition.aborted is not None:
            aborted_class = nested_class(self._partition_class, "aborted_transactions")
            aborted = tuple(
                aborted_class(producer_id=t.producer_id, first_offset=t.first_offset)
                for t in partition.aborted
            )
        fields: dict[str, Any] = {
            "partition_index": partition.key[1],
            "error_code": ErrorCode(partition.error),
            "high_watermark": partition.high_watermark,
            "last_stable_offset": partition.last_stable_offset,
            "aborted_transactions": aborted,
            "records": partition.records,
        }
        if self.version >= FIRST_LOG_START_VERSION:
            fields["log_start_offset"] = partition.log_start_offset
        if self.version >= FIRST_PREFERRED_REPLICA_VERSION:
            fields["preferred_read_replica"] = -1
        self._changed = True
        found = self._where.get(partition.key)
        if found is not None:
            topic, index = found
            topic.parts[index] = dataclasses.replace(topic.parts[index], **fields)
            return
        entry = build(self._partition_class, **fields)
        owner = next((t for t in self._topics if t.key == partition.key[0]), None)
        if owner is None:
            owner = _TopicEntries(key=partition.key[0], original=None, parts=[])
            self._topics.append(owner)
        owner.parts.append(entry)
        self._where[partition.key] = (owner, len(owner.parts) - 1)

    def body(self) -> Body:
        """The response with every change; the object given when nothing changed."""
        if not self._changed:
            return Body(self._body)
        entries = []
        for topic in self._topics:
            if topic.original is not None:
                entries.append(dataclasses.replace(topic.original, partitions=tuple(topic.parts)))
            else:
                entries.append(
                    build(
                        self._topic_class,
                        topic=topic.key,
                        topic_id=topic.key,
                        partitions=tuple(topic.parts),
                    )
                )
        return Body(dataclasses.replace(self._body, responses=tuple(entries)))
