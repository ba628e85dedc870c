"""Builders and readers of record batches, the bytes a partition's log holds.

:func:`data_batch` and :func:`marker` build batches with the product's own encoder
(:mod:`protocol.records`): record ``o`` of a data batch has key ``str(o)`` and timestamp
``BASE_TIMESTAMP + o`` unless the test says otherwise. :func:`batches_of` cuts a records
field into whole batches; :func:`record_timestamps` decodes records with aiokafka's reader,
an implementation independent of the product's.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.records import (
    Compression,
    ControlType,
    Record,
    build_control_batch,
    build_record_batch,
    iter_batches,
)

__all__ = ["BASE_TIMESTAMP", "batches_of", "data_batch", "marker", "record_timestamps"]

BASE_TIMESTAMP = 1_700_000_000_000


def data_batch(
    offset: int,
    count: int,
    *,
    epoch: int = 0,
    value_size: int = 10,
    timestamp: int | None = None,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    transactional: bool = False,
) -> bytes:
    """A batch of ``count`` records from ``offset``; record ``o`` has timestamp base + o."""
    start = BASE_TIMESTAMP + offset if timestamp is None else timestamp
    records = [
        Record(
            key=str(offset + i).encode(), value=bytes([i % 251]) * value_size, timestamp=start + i
        )
        for i in range(count)
    ]
    return build_record_batch(
        base_offset=offset,
        records=records,
        compression=compression,
        partition_leader_epoch=epoch,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )


def marker(offset: int, producer_id: int, control: ControlType, *, epoch: int = 0) -> bytes:
    """A COMMIT or ABORT marker of ``producer_id`` at ``offset``."""
    return build_control_batch(
        base_offset=offset,
        control_type=control,
        producer_id=producer_id,
        producer_epoch=0,
        timestamp=BASE_TIMESTAMP + offset,
        partition_leader_epoch=epoch,
    )


def batches_of(records: bytes | None) -> list[bytes]:
    """The whole batches of a records field (a partial batch at its end is left out)."""
    data = records or b""
    return [data[p : p + h.size] for p, h in iter_batches(data)]


def record_timestamps(batches: Sequence[bytes]) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of every record, decoded with aiokafka's record reader."""
    from aiokafka.record.default_records import DefaultRecordBatch

    return [
        (record.offset, record.timestamp)
        for batch in batches
        for record in DefaultRecordBatch(bytearray(batch))
    ]
