"""Build a KIP-405 remote segment from the raw record batches of one partition range.

The input is what a Fetch returns: v2 record batches exactly as the broker stores them,
possibly in several chunks (one :meth:`SegmentBuilder.append` per Fetch). The output is the
``.log`` (the batches, unchanged) and the files Kafka keeps next to a segment, derived the
way ``LogSegment.recover`` rebuilds them batch by batch:

- offset index: before a batch that starts more than ``index.interval.bytes`` after the
  position of the previous entry (or the segment start), an entry ``(batch last offset,
  batch position)``;
- time index: at the same moments, ``(largest timestamp so far, last offset of the batch
  that has it)`` if the largest timestamp grew, plus a final such entry when the segment is
  closed (``onBecomeInactiveSegment``);
- transaction index: one ``AbortedTxn`` per ABORT marker that closes an open transaction
  (see :mod:`storage.segment.producer_state`); transactions may have started in earlier
  segments, which is why the builder takes the previous segment's producer snapshot;
- leader-epoch checkpoint: the lineage before the segment (``prior_epochs``) extended with
  every batch whose partition leader epoch is newer than the latest known, cut at the
  segment end; KIP-405's ``segmentLeaderEpochs`` are the part of it inside the segment;
- producer snapshot: the producers at the segment end.

The builder never copies the batches: it keeps views of the chunks it accepted (each chunk's
whole batches) and joins them only when the segment is finished, and a segment built from
one chunk is that chunk as is. A copy task that maps its spill file hands the mapping itself
to the upload; a copy of segment bytes would cost most of the pipeline's CPU budget. So the
chunks must not change while the builder or its :class:`BuiltSegment` is in use.

Input rules (a :class:`SegmentBuildError` names the offset and byte position otherwise):

- every whole batch must pass its CRC-32C check and be record batch v2;
- the first batch must contain ``base_offset`` (``base offset <= base_offset <= last
  offset``): a Fetch for ``base_offset`` returns the batch holding it, which starts earlier
  when ``base_offset`` lies inside a batch (after DeleteRecords, or a compressed batch). The
  segment still *starts* at ``base_offset``, as its metadata and index base say; readers
  never ask it for smaller offsets;
- every later batch must start right after the previous one (``base offset == previous last
  offset + 1``): no gap, no overlap;
- offsets and positions must fit Kafka's 32-bit relative offsets and positions.

A partial batch at the end of a chunk (a Fetch cut at its byte limit) is left out; the
caller fetches again from :attr:`SegmentBuilder.next_offset`. A refused chunk leaves the
builder unusable: build the segment again from corrected input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from protocol.errors import RemoteProtocolError
from protocol.indexes.leader_epoch_checkpoint import (
    EpochEntry,
    assign,
    encode_leader_epoch_checkpoint,
    entries_in_range,
    truncate_from_end,
)
from protocol.indexes.offset_index import OffsetIndexBuilder
from protocol.indexes.producer_snapshot import ProducerSnapshotEntry, encode_producer_snapshot
from protocol.indexes.time_index import NO_TIMESTAMP, TimeIndexBuilder
from protocol.indexes.transaction_index import AbortedTxn, encode_transaction_index
from protocol.records import BatchHeader, batch_crc_ok, iter_batches, read_control_record
from storage.model import LogSegmentData
from storage.segment.producer_state import InvalidTxnStateError, ProducerStateTracker

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "BuiltSegment",
    "SegmentBuildError",
    "SegmentBuilder",
]

DEFAULT_INDEX_INTERVAL_BYTES = 4096
"""Kafka's ``index.interval.bytes`` default."""
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default (one day)."""
_INT32_MAX = 2**31 - 1


class SegmentBuildError(ValueError):
    """The batches cannot form a valid segment; ``offset``/``position`` say where."""

    def __init__(self, message: str, *, offset: int | None, position: int | None) -> None:
        super().__init__(message)
        self.offset = offset
        self.position = position
        """Byte position in the segment being built (not in the appended chunk)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltSegment:
    """A finished segment: the files to upload and the values its metadata needs."""

    data: LogSegmentData
    start_offset: int
    end_offset: int
    """Last offset in the segment (inclusive), as in ``RemoteLogSegmentMetadata``."""
    max_timestamp: int
    """Largest batch max timestamp, or -1 if no batch has one."""
    size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    """``(leader epoch, start offset)`` within ``[start_offset, end_offset]``."""
    lineage: tuple[EpochEntry, ...]
    """All epochs up to the segment end: ``prior_epochs`` for the next segment."""
    producers: tuple[ProducerSnapshotEntry, ...]
    """Producers at the segment end: ``prior_producers`` for the next segment."""
    aborted_txns: tuple[AbortedTxn, ...]


class SegmentBuilder:
    """Accumulates the batches of one segment and derives its indexes on the way."""

    def __init__(
        self,
        *,
        base_offset: int,
        prior_epochs: Iterable[EpochEntry] = (),
        prior_producers: Iterable[ProducerSnapshotEntry] = (),
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        """Start a segment at ``base_offset``.

        :param prior_epochs: the partition's leader-epoch lineage before this segment (the
            previous segment's :attr:`BuiltSegment.lineage`, or the broker's).
        :param prior_producers: the previous segment's producer snapshot; without it, a
            transaction that started before ``base_offset`` and is aborted in this segment
            cannot be indexed.
        :param producer_id_expiration_ms: producers idle this long before the segment's
            largest timestamp are left out of the snapshot, standing in for the wall clock
            Kafka expires them by.
        :raises ValueError: for a negative ``base_offset`` or ``index_interval_bytes``.
        """
        if base_offset < 0 or index_interval_bytes < 0:
            raise ValueError("base_offset and index_interval_bytes must not be negative")
        self._base_offset = base_offset
        self._interval = index_interval_bytes
        self._expiration_ms = producer_id_expiration_ms
        self._lineage: tuple[EpochEntry, ...] = ()
        for entry in prior_epochs:
            self._lineage = assign(self._lineage, entry.epoch, entry.start_offset)
        self._producers = ProducerStateTracker(tuple(prior_producers))
        self._chunks: list[memoryview] = []
        self._size = 0
        self._offset_index = OffsetIndexBuilder(base_offset)
        self._time_index = TimeIndexBuilder(base_offset)
        self._aborted: list[AbortedTxn] = []
        self._next_offset: int | None = None
        self._last_entry_position = 0
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._failed = False

    @property
    def next_offset(self) -> int:
        """The offset the next batch must contain: where to fetch from next."""
        return self._base_offset if self._next_offset is None else self._next_offset

    @property
    def size_in_bytes(self) -> int:
        """Bytes of whole batches accepted so far."""
        return self._size

    def append(self, batches: bytes | bytearray | memoryview) -> None:
        """Add the whole batches in ``batches`` (a partial trailing batch is left out).

        The builder keeps a view of ``batches``: do not modify them afterwards.

        :raises SegmentBuildError: on a bad CRC, a legacy or corrupt batch, an offset gap or
            overlap, a transaction marker that cannot be read, or a segment beyond 2 GiB or
            2^31 offsets; the builder is unusable afterwards.
        """
        if self._failed:
            raise SegmentBuildError(
                "an earlier append was refused; start the segment again",
                offset=None,
                position=None,
            )
        self._failed = True
        view = memoryview(batches).cast("B")
        start = self._size
        try:
            for position, header in iter_batches(view):
                self._check(view, position, header)
                self._index(header)
                self._replay(view, position, header)
                self._next_offset = header.next_offset
                self._size += header.size
        except RemoteProtocolError as err:
            raise SegmentBuildError(
                f"corrupt record batch in the data for offset {self.next_offset}: {err}",
                offset=self.next_offset,
                position=self._size,
            ) from err
        if self._size > start:
            self._chunks.append(view[: self._size - start])
        self._failed = False

    def _check(self, view: memoryview, position: int, header: BatchHeader) -> None:
        here = self._size
        if not batch_crc_ok(view, position, header):
            raise SegmentBuildError(
                f"CRC mismatch in the batch at offset {header.base_offset} (segment position "
                f"{here})",
                offset=header.base_offset,
                position=here,
            )
        if header.last_offset_delta < 0:
            raise SegmentBuildError(
                f"batch at offset {header.base_offset} has a negative last offset delta",
                offset=header.base_offset,
                position=here,
            )
        if self._next_offset is None:
            if not header.base_offset <= self._base_offset <= header.last_offset:
                raise SegmentBuildError(
                    f"the first batch holds offsets {header.base_offset}..{header.last_offset},"
                    f" not the segment's base offset {self._base_offset}",
                    offset=header.base_offset,
                    position=here,
                )
        elif header.base_offset != self._next_offset:
            kind = "gap" if header.base_offset > self._next_offset else "overlap"
            raise SegmentBuildError(
                f"offset {kind}: batch at offset {header.base_offset} follows one that ended "
                f"at {self._next_offset - 1}",
                offset=header.base_offset,
                position=here,
            )
        if header.last_offset - self._base_offset > _INT32_MAX or here + header.size > _INT32_MAX:
            raise SegmentBuildError(
                f"batch at offset {header.base_offset} does not fit a segment at base offset "
                f"{self._base_offset} (32-bit relative offsets and positions)",
                offset=header.base_offset,
                position=here,
            )

    def _index(self, header: BatchHeader) -> None:
        """Offset and time index entries, as ``LogSegment.recover`` appends them."""
        here = self._size
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        if here - self._last_entry_position > self._interval:
            self._offset_index.append(header.last_offset, here)
            self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._last_entry_position = here
        epoch = header.partition_leader_epoch
        if epoch >= 0 and (not self._lineage or epoch > self._lineage[-1].epoch):
            self._lineage = assign(self._lineage, epoch, header.base_offset)

    def _replay(self, view: memoryview, position: int, header: BatchHeader) -> None:
        """Producer state and aborted transactions, as ``LogSegment.updateProducerState``."""
        if header.producer_id < 0:
            return
        if not header.is_control:
            try:
                self._producers.append_data(header)
            except InvalidTxnStateError as err:
                raise SegmentBuildError(
                    str(err), offset=header.base_offset, position=self._size
                ) from err
            return
        if header.record_count == 0:
            # Compaction emptied the marker: Kafka completes nothing for it.
            return
        aborted = self._producers.end_transaction(
            header, read_control_record(view, position, header)
        )
        if aborted is not None:
            self._aborted.append(aborted)

    def finish(self) -> BuiltSegment:
        """Close the segment and render its files.

        :raises SegmentBuildError: if no batch was appended or an append was refused.
        """
        if self._failed or self._next_offset is None:
            raise SegmentBuildError(
                "no valid batches to build a segment from",
                offset=self._base_offset,
                position=0,
            )
        end_offset = self._next_offset - 1
        self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
        lineage = truncate_from_end(self._lineage, end_offset + 1)
        if self._max_timestamp != NO_TIMESTAMP:
            self._producers.expire(self._max_timestamp - self._expiration_ms)
        producers = self._producers.snapshot()
        aborted = tuple(self._aborted)
        return BuiltSegment(
            data=LogSegmentData(
                log=_joined(self._chunks),
                offset_index=self._offset_index.to_bytes(),
                time_index=self._time_index.to_bytes(),
                transaction_index=encode_transaction_index(aborted),
                producer_snapshot=encode_producer_snapshot(producers),
                leader_epoch_checkpoint=encode_leader_epoch_checkpoint(lineage),
            ),
            start_offset=self._base_offset,
            end_offset=end_offset,
            max_timestamp=self._max_timestamp,
            size_in_bytes=self._size,
            segment_leader_epochs=tuple(
                (e.epoch, e.start_offset)
                for e in entries_in_range(lineage, self._base_offset, end_offset + 1)
            ),
            lineage=lineage,
            producers=producers,
            aborted_txns=aborted,
        )


def _joined(chunks: list[memoryview]) -> bytes | memoryview:
    """The chunks as one buffer: the only chunk itself, or one copy of them all."""
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)
