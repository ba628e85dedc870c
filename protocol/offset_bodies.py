"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords bodies as the read path reads and
rewrites them: typed and version-independent.

The three APIs share a shape, topics of partitions each asking about one offset, but not
their field names (``name`` or ``topic``, ``partition_index`` or ``partition``), and fields
come with versions (ListOffsets' ``leader_epoch`` from v4, OffsetForLeaderEpoch's
``replica_id`` from v3). This module is the one place that knows them. The rest of the
proxy sees frozen views of what a request asks and what a response answers, and edits a
response by partition key; bodies stay :data:`~protocol.messages.Body` values, handed back
to :mod:`protocol.messages` for encoding. Fields the views do not model are kept: entries
change with ``dataclasses.replace`` on the client's or broker's own entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from protocol.messages import Body, ErrorCode

__all__ = [
    "DeleteRecordsEditor",
    "Deleted",
    "DeletionAsked",
    "EpochAnswer",
    "EpochQuery",
    "EpochsEditor",
    "ListOffsetsEditor",
    "ListedOffset",
    "OffsetAsked",
    "PartitionName",
    "read_delete_records_request",
    "read_epochs_request",
    "read_list_offsets_request",
    "rewrite_list_offsets_request",
]

PartitionName = tuple[str, int]
"""A partition as these APIs name it: (topic name, partition)."""

FIRST_LIST_OFFSETS_EPOCH_VERSION: Final = 4
_NO_REPLICA: Final = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fields:
    """Where one API keeps its topic name and partition index."""

    topic_name: str
    partition_index: str


_LIST_OFFSETS: Final = _Fields(topic_name="name", partition_index="partition_index")
_EPOCHS: Final = _Fields(topic_name="topic", partition_index="partition")
_DELETE_RECORDS: Final = _LIST_OFFSETS


def _entries(body: Body, fields: _Fields) -> Iterator[tuple[PartitionName, Any]]:
    kio: Any = body
    for topic in kio.topics:
        name = str(getattr(topic, fields.topic_name))
        for part in topic.partitions:
            yield (name, int(getattr(part, fields.partition_index))), part


# -- ListOffsets ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAsked:
    """One partition of a ListOffsets request: the timestamp (or sentinel) asked."""

    name: PartitionName
    timestamp: int


def read_list_offsets_request(body: Body) -> tuple[int, tuple[OffsetAsked, ...]]:
    """A ListOffsets request body's ``replica_id`` (-1 for consumers) and its partitions."""
    kio: Any = body
    asked = tuple(
        OffsetAsked(name=name, timestamp=int(part.timestamp))
        for name, part in _entries(body, _LIST_OFFSETS)
    )
    return int(kio.replica_id), asked


def rewrite_list_offsets_request(body: Body, timestamps: Mapping[PartitionName, int]) -> Body:
    """``body`` asking ``timestamps[name]`` instead for the partitions named there."""
    kio: Any = body
    topics = []
    for topic in kio.topics:
        parts = tuple(
            dataclasses.replace(part, timestamp=timestamps[(topic.name, part.partition_index)])
            if (topic.name, part.partition_index) in timestamps
            else part
            for part in topic.partitions
        )
        topics.append(dataclasses.replace(topic, partitions=parts))
    return Body(dataclasses.replace(kio, topics=tuple(topics)))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedOffset:
    """One partition of a ListOffsets response; ``leader_epoch`` is -1 below v4."""

    name: PartitionName
    error: int
    timestamp: int
    offset: int
    leader_epoch: int


_E = TypeVar("_E")


class _Editor(Generic[_E]):
    """A decoded response whose partitions are read and replaced by name, then rebuilt once;
    :meth:`body` returns the very object given when nothing changed."""

    def __init__(self, body: Body, fields: _Fields) -> None:
        self._body: Any = body
        self._fields = fields
        self._replaced: dict[PartitionName, dict[str, Any]] = {}

    def _read(self, name: PartitionName, part: Any) -> _E:
        raise NotImplementedError

    def partitions(self) -> Iterator[_E]:
        """Every partition of the response as the broker answered it, in its order."""
        for name, part in _entries(self._body, self._fields):
            yield self._read(name, part)

    def _replace(self, name: PartitionName, **fields: Any) -> None:
        self._replaced.setdefault(name, {}).update(fields)

    def body(self) -> Body:
        """The response with every change."""
        if not self._replaced:
            return Body(self._body)
        topics = []
        for topic in self._body.topics:
            topic_name = getattr(topic, self._fields.topic_name)
            parts = tuple(
                dataclasses.replace(part, **changes)
                if (changes := self._replaced.get(self._key(topic_name, part))) is not None
                else part
                for part in topic.partitions
            )
            topics.append(dataclasses.replace(topic, partitions=parts))
        return Body(dataclasses.replace(self._body, topics=tuple(topics)))

    def _key(self, topic_name: Any, part: Any) -> PartitionName:
        return str(topic_name), int(getattr(part, self._fields.partition_index))


class ListOffsetsEditor(_Editor[ListedOffset]):
    """A ListOffsets response of ``version``, edited by partition."""

    def __init__(self, body: Body, version: int) -> None:
        super().__init__(body, _LIST_OFFSETS)
        self._epochs = version >= FIRST_LIST_OFFSETS_EPOCH_VERSION

    def _read(self, name: PartitionName, part: Any) -> ListedOffset:
        return ListedOffset(
            name=name,
            error=int(part.error_code),
            timestamp=int(part.timestamp),
            offset=int(part.offset),
            leader_epoch=int(part.leader_epoch) if self._epochs else -1,
        )

    def put(self, answer: ListedOffset) -> None:
        """Answer ``answer.name`` with ``answer`` (its leader epoch only from v4)."""
        fields: dict[str, Any] = {
            "error_code": ErrorCode(answer.error),
            "timestamp": answer.timestamp,
            "offset": answer.offset,
        }
        if self._epochs:
            fields["leader_epoch"] = answer.leader_epoch
        self._replace(answer.name, **fields)


# -- OffsetForLeaderEpoch -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochQuery:
    """One partition of an OffsetForLeaderEpoch request: the epoch whose end is asked."""

    name: PartitionName
    leader_epoch: int


def read_epochs_request(body: Body) -> tuple[int, tuple[EpochQuery, ...]]:
    """An OffsetForLeaderEpoch request body's ``replica_id`` (-1 for consumers, and below
    v3, which has none) and its partitions."""
    kio: Any = body
    asked = tuple(
        EpochQuery(name=name, leader_epoch=int(part.leader_epoch))
        for name, part in _entries(body, _EPOCHS)
    )
    return int(getattr(kio, "replica_id", _NO_REPLICA)), asked


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochAnswer:
    """One partition of an OffsetForLeaderEpoch response."""

    name: PartitionName
    error: int
    leader_epoch: int
    end_offset: int


class EpochsEditor(_Editor[EpochAnswer]):
    """An OffsetForLeaderEpoch response, edited by partition."""

    def __init__(self, body: Body) -> None:
        super().__init__(body, _EPOCHS)

    def _read(self, name: PartitionName, part: Any) -> EpochAnswer:
        return EpochAnswer(
            name=name,
            error=int(part.error_code),
            leader_epoch=int(part.leader_epoch),
            end_offset=int(part.end_offset),
        )

    def put(self, answer: EpochAnswer) -> None:
        """Answer ``answer.name`` with ``answer``'s epoch and end offset."""
        self._replace(answer.name, leader_epoch=answer.leader_epoch, end_offset=answer.end_offset)


# -- DeleteRecords --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionAsked:
    """One partition of a DeleteRecords request: delete below ``offset`` (-1: below the
    high watermark)."""

    name: PartitionName
    offset: int


def read_delete_records_request(body: Body) -> tuple[DeletionAsked, ...]:
    """The partitions of a DeleteRecords request body."""
    return tuple(
        DeletionAsked(name=name, offset=int(part.offset))
        for name, part in _entries(body, _DELETE_RECORDS)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Deleted:
    """One partition of a DeleteRecords response: the log's new start, or an error."""

    name: PartitionName
    error: int
    low_watermark: int


class DeleteRecordsEditor(_Editor[Deleted]):
    """A DeleteRecords response, edited by partition."""

    def __init__(self, body: Body) -> None:
        super().__init__(body, _DELETE_RECORDS)

    def _read(self, name: PartitionName, part: Any) -> Deleted:
        return Deleted(name=name, error=int(part.error_code), low_watermark=int(part.low_watermark))

    def put(self, answer: Deleted) -> None:
        """Answer ``answer.name`` with ``answer``."""
        self._replace(
            answer.name, error_code=ErrorCode(answer.error), low_watermark=answer.low_watermark
        )
