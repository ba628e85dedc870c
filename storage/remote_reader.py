"""The remote log reader: what a Fetch or a ListOffsets by time gets from the remote tier.

Kafka's ``RemoteLogManager.read`` and ``findOffsetByTimestamp``, over tierproxy's caches:

Which segment
    The leader-epoch lineage (the broker's history; by default the remote tier's own, from
    the metadata cache) says which epoch wrote the fetch offset, and the metadata cache
    returns the copy that holds the offset *as written in that epoch*. Copies left by
    truncated leaders (KIP-405 scenarios 3-5) are never read, and a read stops where its
    copy stops agreeing with the lineage (``agreeing_end``). Like Kafka, one read returns
    batches of one segment; when the offset falls in a gap at a segment's end, the next
    segment on the lineage answers.

Which bytes
    The offset index (from the index cache) gives a position at or before the batch that
    holds the offset; :func:`storage.segment.reader.read_batches` returns whole batches
    from there, within ``max_bytes`` but at least one, reading the ``.log`` through the
    chunk cache. A read whose read-ahead (sized by the chunk cache from the reader's rate)
    reaches past the segment's end prefetches the start of the next segments, so catch-up
    consumers cross segment boundaries warm; the cache is told which segment each follows,
    so the reader's rate, and the depth of its read-ahead, carry over into the next one.

Aborted transactions (READ_COMMITTED)
    Collected from the transaction indexes of this segment and the following ones on the
    lineage until an entry's last stable offset reaches the end of the returned data
    (``TransactionIndex.collectAbortedTxns``). Kafka goes on into the local log's indexes
    when the remote ones end first; the proxy cannot read the broker's, so it uses the
    producer snapshot of the last remote segment instead: a transaction still open there
    may be aborted by a marker the remote tier does not hold, so the data returned stops
    before the first offset of the earliest such transaction (a "remote last stable
    offset"). A read that would start at or after it raises
    :class:`UnresolvedTransactionError`.

Errors
    :class:`OffsetNotInRemoteError` when no readable copy holds the offset (the caller
    answers OFFSET_OUT_OF_RANGE or asks the broker); the storage errors of
    :mod:`storage.rsm.base` pass through; ``CorruptIndexError`` and
    ``CorruptRecordBatchError`` when an object is damaged.

Missing objects
    ``RemoteResourceNotFoundError`` means one of two things. If the metadata no longer
    lists the segment as readable, retention deleted it between the lookup and the read,
    and the caller's next lookup answers right. If it still does, an object the metadata
    promises is gone (moved, deleted by hand, a bucket policy): the reader tells its
    :class:`MissingObjectReport` (segment and object key), so that it is logged and shown,
    and the error still goes to the caller, who must not treat it as "no such offset".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from protocol.buffers import Buffers, contiguous
from protocol.indexes.leader_epoch_checkpoint import EpochEntry, epoch_for_offset
from protocol.indexes.offset_index import OffsetIndex
from protocol.indexes.producer_snapshot import NO_TXN, parse_producer_snapshot
from protocol.indexes.time_index import TimeIndex
from protocol.indexes.transaction_index import (
    AbortedTxn,
    collect_aborted_txns,
    parse_transaction_index,
)
from protocol.record_reader import batch_records
from protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    batches_below,
    iter_batches,
    next_offset_after,
    parse_batch_header,
)
from storage.chunk_cache import ChunkCache
from storage.index_cache import RemoteIndexCache
from storage.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rlmm.lineage import agreeing_end
from storage.rsm.base import RemoteResourceNotFoundError
from storage.segment.reader import read_batches

__all__ = [
    "MissingObjectReport",
    "OffsetNotInRemoteError",
    "RemoteLogReader",
    "RemoteRecords",
    "RemoteSegmentLookup",
    "TimestampAndOffset",
    "UnresolvedTransactionError",
]

_PREFETCH_SEGMENTS: Final = 16
"""Most segments a read-ahead reaches into beyond the one read (small segments only): the
deepest read-ahead, 64 MiB, spans 16 segments of 4 MiB."""
_READABLE: Final = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_SCAN_BYTES: Final = 256 * 1024
"""Bytes scanned per step when looking for a timestamp (reads go through the chunk cache,
so a step costs at most one GET)."""


class RemoteSegmentLookup(Protocol):
    """What the reader asks the remote log metadata cache (``RemoteLogMetadataCache``)."""

    def segment_for(
        self, tp: TopicIdPartition, offset: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None: ...

    def segment_for_timestamp(
        self, tp: TopicIdPartition, timestamp: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None: ...

    def lineage(self, tp: TopicIdPartition) -> tuple[EpochEntry, ...]: ...

    def log_start_offset(self, tp: TopicIdPartition) -> int: ...

    def segment_state(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentState | None: ...


class MissingObjectReport(Protocol):
    """Who hears of objects that the metadata lists as readable but remote storage lacks."""

    def object_missing(self, segment: RemoteLogSegmentMetadata, key: str) -> None:
        """``key`` (the object, as :class:`RemoteResourceNotFoundError` names it) of
        ``segment`` was not found. Called on the event loop, once per failed read."""
        ...


class OffsetNotInRemoteError(LookupError):
    """No readable remote segment holds the offset under the lineage."""


class UnresolvedTransactionError(Exception):
    """The data at the fetch offset belongs to a transaction whose outcome the remote tier
    does not hold yet (its marker is still only in the broker's local log)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteRecords:
    """Whole batches from one remote segment."""

    records: memoryview | Buffers
    """Batches from the one holding the fetch offset, up to where the copy leaves the
    lineage; the caller trims them to the range it may serve. Views of the chunk cache's
    bytes (no copy; in pieces when they span chunks): they keep their chunks alive until
    the response is written, even if the cache evicts them meanwhile."""
    segment: RemoteLogSegmentMetadata
    aborted: tuple[AbortedTxn, ...]
    """Aborted transactions overlapping the returned range (READ_COMMITTED reads only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TimestampAndOffset:
    """A ListOffsets answer: the first record at or after a timestamp."""

    timestamp: int
    offset: int
    leader_epoch: int | None


class RemoteLogReader:
    """Reads whole batches and timestamps from the remote tier through the caches."""

    def __init__(
        self,
        *,
        metadata: RemoteSegmentLookup,
        indexes: RemoteIndexCache,
        chunks: ChunkCache,
        missing: MissingObjectReport | None = None,
    ) -> None:
        """:param missing: told of each object found missing (see the module docstring)."""
        self._metadata = metadata
        self._indexes = indexes
        self._chunks = chunks
        self._missing = missing

    async def read(
        self,
        tp: TopicIdPartition,
        fetch_offset: int,
        max_bytes: int,
        *,
        lineage: Sequence[EpochEntry] | None = None,
        read_committed: bool = False,
    ) -> RemoteRecords:
        """Whole batches from the one holding ``fetch_offset``, within ``max_bytes`` (but at
        least one batch), from one segment.

        :param lineage: the partition's leader-epoch history; the remote tier's own by
            default.
        :raises OffsetNotInRemoteError: when no readable copy holds ``fetch_offset``.
        :raises UnresolvedTransactionError: (READ_COMMITTED) see the module docstring.
        :raises RemoteStorageError: when remote storage fails (``RemoteResourceNotFoundError``
            if the segment was deleted meanwhile).
        :raises CorruptIndexError: if an index file is damaged.
        :raises CorruptRecordBatchError: if the ``.log`` object is damaged.
        """
        if lineage is None:
            lineage = self._metadata.lineage(tp)
        segment = self._metadata.segment_for(tp, fetch_offset, lineage)
        while True:
            if segment is None:
                raise OffsetNotInRemoteError(f"offset {fetch_offset} of {tp} is not in remote")
            records = await self._read_segment(segment, fetch_offset, max_bytes, lineage)
            if records:
                break
            # The segment ends in a gap before the offset: the next one on the lineage holds it.
            segment = self._metadata.segment_for(tp, segment.end_offset + 1, lineage)
        # A copy that a later unclean election truncated may hold the offset while its
        # following records are the truncated leader's: stop where it leaves the lineage
        # (a scan of every batch, only needed when it leaves it inside this segment).
        agrees_until = agreeing_end(segment, fetch_offset, lineage)
        if agrees_until < segment.end_offset:
            records = batches_below(records, agrees_until + 1)
        aborted: tuple[AbortedTxn, ...] = ()
        if read_committed and records:
            records, aborted = await self._committed(tp, segment, fetch_offset, records, lineage)
        return RemoteRecords(records=records, segment=segment, aborted=aborted)

    async def find_offset_by_timestamp(
        self,
        tp: TopicIdPartition,
        timestamp: int,
        *,
        lineage: Sequence[EpochEntry] | None = None,
    ) -> TimestampAndOffset | None:
        """The first remote record whose timestamp is at or after ``timestamp``.

        ``None`` when no readable segment on the lineage has such a record (the broker's
        local log may). The leader epoch comes from the segment's own epochs.

        :raises RemoteStorageError: when remote storage fails.
        :raises CorruptIndexError: if an index file is damaged.
        :raises CorruptRecordBatchError: if the ``.log`` object is damaged.
        """
        if lineage is None:
            lineage = self._metadata.lineage(tp)
        starting_offset = self._metadata.log_start_offset(tp)
        segment = self._metadata.segment_for_timestamp(tp, timestamp, lineage)
        while segment is not None:
            found = await self._find_in_segment(segment, timestamp, starting_offset)
            if found is not None:
                offset, record_timestamp = found
                epochs = [
                    EpochEntry(epoch=e, start_offset=o) for e, o in segment.segment_leader_epochs
                ]
                return TimestampAndOffset(
                    timestamp=record_timestamp,
                    offset=offset,
                    leader_epoch=epoch_for_offset(epochs, offset),
                )
            # The segment's max timestamp is only a bound; look at the next one.
            next_segment = self._metadata.segment_for(tp, segment.end_offset + 1, lineage)
            while next_segment is not None and next_segment.max_timestamp < timestamp:
                next_segment = self._metadata.segment_for(tp, next_segment.end_offset + 1, lineage)
            segment = next_segment
        return None

    # -- objects -----------------------------------------------------------------------

    async def _index(self, segment: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The segment's ``index_type`` file through the index cache; a missing one is
        reported (see the module docstring) and raised."""
        try:
            return await self._indexes.get(segment, index_type)
        except RemoteResourceNotFoundError as err:
            self._report(segment, err)
            raise

    async def _bytes(
        self, segment: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview | Buffers:
        """Bytes ``[start, end)`` of the segment's ``.log`` through the chunk cache; a missing
        object is reported (see the module docstring) and raised."""
        try:
            return await self._chunks.read(segment, start, end)
        except RemoteResourceNotFoundError as err:
            self._report(segment, err)
            raise

    def _report(self, segment: RemoteLogSegmentMetadata, err: RemoteResourceNotFoundError) -> None:
        if self._missing is None:
            return
        if self._metadata.segment_state(segment.segment_id) != _READABLE:
            return  # deleted by retention meanwhile: not missing, gone
        self._missing.object_missing(segment, err.key or str(err))

    # -- reading batches ---------------------------------------------------------------

    async def _read_segment(
        self,
        segment: RemoteLogSegmentMetadata,
        fetch_offset: int,
        max_bytes: int,
        lineage: Sequence[EpochEntry],
    ) -> memoryview | Buffers:
        index = OffsetIndex(
            await self._index(segment, IndexType.OFFSET), base_offset=segment.start_offset
        )
        target = max(fetch_offset, segment.start_offset)
        start = index.lookup(target).position
        following = _Following(self._metadata, segment, lineage)
        ahead = self._chunks.read_ahead_bytes(segment, start)
        if ahead:
            # Before the read too: a reader's first read (its chunks GET) and the read-ahead
            # into the next segments go out together, not one GET time apart; this read's
            # own chunks first (the read joins their GETs).
            size = segment.segment_size_in_bytes
            self._chunks.prefetch(segment, start, min(max_bytes, size - start))
            self._read_ahead_past(following, start, ahead)
        records = await read_batches(
            fetch=lambda start, end: self._bytes(segment, start, end),
            offset_index=index,
            target_offset=target,
            max_bytes=max_bytes,
            segment_size=segment.segment_size_in_bytes,
        )
        position = start + len(records)
        self._read_ahead_past(following, position, self._chunks.read_ahead_bytes(segment, position))
        return records

    def _read_ahead_past(self, following: _Following, position: int, ahead: int) -> None:
        """Prefetch the segments after ``following.segment`` as far as a reader at
        ``position`` of it reads ahead (``ahead`` bytes, at least a chunk), more than one
        when they are smaller than the read-ahead."""
        segment = following.segment
        size_bytes = position + max(ahead, self._chunks.chunk_bytes)
        size_bytes -= segment.segment_size_in_bytes
        if size_bytes < 0:
            return
        for next_segment in following:
            self._chunks.prefetch(next_segment, 0, size_bytes, after=segment)
            size_bytes -= next_segment.segment_size_in_bytes
            if size_bytes <= 0:
                return
            segment = next_segment

    # -- transactions ------------------------------------------------------------------

    async def _committed(
        self,
        tp: TopicIdPartition,
        segment: RemoteLogSegmentMetadata,
        fetch_offset: int,
        records: memoryview | Buffers,
        lineage: Sequence[EpochEntry],
    ) -> tuple[memoryview | Buffers, tuple[AbortedTxn, ...]]:
        upper = next_offset_after(records)
        found: list[AbortedTxn] = []
        current: RemoteLogSegmentMetadata | None = segment
        last = segment
        while current is not None:
            last = current
            index = parse_transaction_index(await self._index(current, IndexType.TRANSACTION))
            result = collect_aborted_txns(index, fetch_offset, upper)
            found.extend(result.aborted)
            if result.is_complete:
                return records, tuple(found)
            current = self._metadata.segment_for(tp, current.end_offset + 1, lineage)
        snapshot = parse_producer_snapshot(await self._index(last, IndexType.PRODUCER_SNAPSHOT))
        open_starts = [
            e.current_txn_first_offset for e in snapshot if e.current_txn_first_offset != NO_TXN
        ]
        if not open_starts or min(open_starts) >= upper:
            return records, tuple(found)
        remote_lso = min(open_starts)
        if remote_lso <= fetch_offset:
            raise UnresolvedTransactionError(
                f"offset {fetch_offset} of {tp} lies in a transaction open at the remote "
                f"tier's end (from offset {remote_lso})"
            )
        records = batches_below(records, remote_lso)
        if not records:
            raise UnresolvedTransactionError(
                f"the batch at offset {fetch_offset} of {tp} reaches into a transaction open "
                f"at the remote tier's end (from offset {remote_lso})"
            )
        upper = next_offset_after(records)
        return records, tuple(txn for txn in found if txn.first_offset < upper)

    # -- timestamps --------------------------------------------------------------------

    async def _find_in_segment(
        self, segment: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the segment's first record at or after ``timestamp``
        and at or after ``starting_offset`` (the log start: records below it are deleted).

        Kafka's ``LogSegment.findOffsetByTimestamp``: the time index gives an offset after
        which the answer lies, the offset index a position before it, and the batches from
        there are scanned record by record.
        """
        first = max(segment.start_offset, starting_offset)
        time_index = TimeIndex(
            await self._index(segment, IndexType.TIMESTAMP), base_offset=segment.start_offset
        )
        offset_index = OffsetIndex(
            await self._index(segment, IndexType.OFFSET), base_offset=segment.start_offset
        )
        from_offset = max(time_index.lookup(timestamp).offset, first)
        position = offset_index.lookup(from_offset).position
        size = segment.segment_size_in_bytes
        while position + BATCH_HEADER_SIZE <= size:
            window = contiguous(await self._bytes(segment, position, position + _SCAN_BYTES))
            consumed = 0
            for at, header in iter_batches(window):
                consumed = at + header.size
                if header.last_offset < first or header.max_timestamp < timestamp:
                    continue
                found = _first_record_at(window, at, header, timestamp, first)
                if found is not None:
                    return found
            if consumed == 0:
                if len(window) < BATCH_HEADER_SIZE:
                    return None
                header = parse_batch_header(window)
                window = contiguous(await self._bytes(segment, position, position + header.size))
                if len(window) < header.size:
                    return None  # a partial batch ends the object
                if header.max_timestamp >= timestamp:
                    found = _first_record_at(window, 0, header, timestamp, first)
                    if found is not None:
                        return found
                consumed = header.size
            position += consumed
        return None


class _Following:
    """The segments after ``segment`` on the lineage, up to :data:`_PREFETCH_SEGMENTS`, each
    looked up once however often one read walks them (before and after it reads: the
    metadata cache's ``segment_for`` makes a new metadata value per call)."""

    __slots__ = ("_ended", "_found", "_lineage", "_metadata", "segment")

    def __init__(
        self,
        metadata: RemoteSegmentLookup,
        segment: RemoteLogSegmentMetadata,
        lineage: Sequence[EpochEntry],
    ) -> None:
        self._metadata = metadata
        self.segment = segment
        self._lineage = lineage
        self._found: list[RemoteLogSegmentMetadata] = []
        self._ended = False

    def __iter__(self) -> Iterator[RemoteLogSegmentMetadata]:
        yield from self._found
        last = self._found[-1] if self._found else self.segment
        while not self._ended and len(self._found) < _PREFETCH_SEGMENTS:
            following = self._metadata.segment_for(
                last.topic_id_partition, last.end_offset + 1, self._lineage
            )
            if following is None:
                self._ended = True
                return
            self._found.append(following)
            yield following
            last = following


def _first_record_at(
    buf: bytes | bytearray | memoryview,
    position: int,
    header: BatchHeader,
    timestamp: int,
    min_offset: int,
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the batch's first record at or after ``min_offset`` with a
    timestamp ``>=`` the target.

    Records of a LOG_APPEND_TIME batch all carry the batch's max timestamp (Kafka's
    ``DefaultRecord.timestamp``), as :func:`~protocol.record_reader.batch_records` gives them.

    :raises CorruptRecordBatchError: if the records cannot be decoded.
    """
    for record in batch_records(buf, position, header):
        if record.offset >= min_offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None
