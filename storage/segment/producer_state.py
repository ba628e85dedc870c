"""Producer state across a partition's batches, as Kafka's ``ProducerStateManager`` keeps it.

The segment builder replays each batch through this tracker, as a Kafka broker does when it
rebuilds a segment's indexes (``LogSegment.recover``), to learn two things Kafka derives from
producer state: the aborted transactions of the segment (an ABORT marker closes the
transaction its producer opened with its first transactional batch, possibly in an earlier
segment) with the last stable offset at the time, and the snapshot of every producer at the
segment's end. Batches come from the leader's log, so nothing is validated beyond what Kafka
refuses even for replicated data.

The rules mirror ``ProducerAppendInfo``/``ProducerStateEntry``:

- a data batch of producer ``p`` records its epoch (a new epoch forgets the sequence
  history), last sequence, last offset, offset delta and max timestamp; the first
  transactional batch with no transaction open starts one at its base offset;
- a marker ends ``p``'s open transaction (none open: nothing to complete), records the
  marker's epoch, coordinator epoch and timestamp, and forgets ``p``'s open transaction;
- the last stable offset of a completed transaction is the first offset of the oldest
  transaction still open by *another* producer, else the marker offset + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.indexes.producer_snapshot import NO_TXN, ProducerSnapshotEntry
from protocol.indexes.transaction_index import AbortedTxn
from protocol.records import NO_SEQUENCE, BatchHeader, ControlRecord, ControlType

__all__ = ["InvalidTxnStateError", "ProducerStateTracker"]

_INT32_MAX = 2**31 - 1


class InvalidTxnStateError(ValueError):
    """A producer wrote a non-transactional batch while its transaction was open.

    Kafka refuses such a log even on replication (``InvalidTxnStateException``).
    """


@dataclass(slots=True, kw_only=True)
class _LastBatch:
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int


@dataclass(slots=True, kw_only=True)
class _Producer:
    """Mutable state of one producer id (``ProducerStateEntry`` with only the last batch)."""

    epoch: int
    coordinator_epoch: int
    last_timestamp: int
    txn_first_offset: int | None
    last_batch: _LastBatch | None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.last_batch = None


def _last_sequence(header: BatchHeader) -> int:
    """``DefaultRecordBatch.lastSequence``: sequences wrap from int32 max to 0."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    delta = header.last_offset_delta
    if header.base_sequence > _INT32_MAX - delta:
        return delta - (_INT32_MAX - header.base_sequence) - 1
    return header.base_sequence + delta


class ProducerStateTracker:
    """Producer ids, their open transactions and the aborted transactions seen so far."""

    def __init__(self, prior: tuple[ProducerSnapshotEntry, ...] = ()) -> None:
        """Start from a snapshot: the producers at the end of the previous segment."""
        self._producers: dict[int, _Producer] = {}
        for entry in prior:
            last_batch = None
            if entry.last_offset >= 0:
                last_batch = _LastBatch(
                    last_sequence=entry.last_sequence,
                    last_offset=entry.last_offset,
                    offset_delta=entry.offset_delta,
                    timestamp=entry.timestamp,
                )
            txn = entry.current_txn_first_offset
            self._producers[entry.producer_id] = _Producer(
                epoch=entry.producer_epoch,
                coordinator_epoch=entry.coordinator_epoch,
                last_timestamp=entry.timestamp,
                txn_first_offset=txn if txn >= 0 else None,
                last_batch=last_batch,
            )

    def _producer(self, producer_id: int) -> _Producer:
        state = self._producers.get(producer_id)
        if state is None:
            # ProducerStateEntry.empty: no epoch (-1), no coordinator epoch (-1), no timestamp.
            state = _Producer(
                epoch=-1,
                coordinator_epoch=-1,
                last_timestamp=-1,
                txn_first_offset=None,
                last_batch=None,
            )
            self._producers[producer_id] = state
        return state

    def append_data(self, header: BatchHeader) -> None:
        """Replay a data batch of a producer (``producer_id >= 0``).

        :raises InvalidTxnStateError: for a non-transactional batch inside a transaction.
        """
        state = self._producer(header.producer_id)
        state.set_epoch(header.producer_epoch)
        state.last_batch = _LastBatch(
            last_sequence=_last_sequence(header),
            last_offset=header.last_offset,
            offset_delta=header.last_offset_delta,
            timestamp=header.max_timestamp,
        )
        state.last_timestamp = header.max_timestamp
        if state.txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} wrote a non-transactional batch at offset "
                f"{header.base_offset} inside its transaction from {state.txn_first_offset}"
            )
        if state.txn_first_offset is None and header.is_transactional:
            state.txn_first_offset = header.base_offset

    def end_transaction(self, header: BatchHeader, marker: ControlRecord) -> AbortedTxn | None:
        """Replay a COMMIT or ABORT marker; the aborted transaction it closes, if any.

        Markers of unknown control types are ignored, as consumers ignore them.
        """
        if marker.type is ControlType.UNKNOWN:
            return None
        state = self._producer(header.producer_id)
        first = state.txn_first_offset
        aborted = None
        if first is not None and marker.type is ControlType.ABORT:
            aborted = AbortedTxn(
                producer_id=header.producer_id,
                first_offset=first,
                last_offset=header.base_offset,
                last_stable_offset=self._last_stable_offset(header),
            )
        state.set_epoch(header.producer_epoch)
        state.coordinator_epoch = marker.coordinator_epoch
        state.txn_first_offset = None
        state.last_timestamp = header.max_timestamp
        return aborted

    def _last_stable_offset(self, marker: BatchHeader) -> int:
        others = [
            state.txn_first_offset
            for producer_id, state in self._producers.items()
            if producer_id != marker.producer_id and state.txn_first_offset is not None
        ]
        return min(others, default=marker.base_offset + 1)

    def expire(self, before_timestamp: int) -> None:
        """Forget producers without an open transaction whose last write is older.

        Kafka expires such producers after ``producer.id.expiration.ms`` of wall-clock time
        (``isProducerExpired``); without this, a snapshot would keep every producer id a
        partition ever saw.
        """
        self._producers = {
            producer_id: state
            for producer_id, state in self._producers.items()
            if state.txn_first_offset is not None or state.last_timestamp > before_timestamp
        }

    def snapshot(self) -> tuple[ProducerSnapshotEntry, ...]:
        """Every producer's state as snapshot entries, ordered by producer id."""
        entries = []
        for producer_id in sorted(self._producers):
            state = self._producers[producer_id]
            batch = state.last_batch
            entries.append(
                ProducerSnapshotEntry(
                    producer_id=producer_id,
                    producer_epoch=state.epoch,
                    last_sequence=batch.last_sequence if batch else NO_SEQUENCE,
                    last_offset=batch.last_offset if batch else -1,
                    offset_delta=batch.offset_delta if batch else 0,
                    timestamp=state.last_timestamp,
                    coordinator_epoch=state.coordinator_epoch,
                    current_txn_first_offset=(
                        state.txn_first_offset if state.txn_first_offset is not None else NO_TXN
                    ),
                )
            )
        return tuple(entries)
