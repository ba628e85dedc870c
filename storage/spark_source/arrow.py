"""Columns of one group of batches as one Arrow record batch, from numpy arrays without a
copy (headers, rare, from Python lists)."""

from __future__ import annotations

from typing import Any

from storage.spark_source.schema import arrow_schema
from storage.spark_source.split import Columns

__all__ = ["to_record_batch"]

_MICROS_PER_MILLI = 1000


def to_record_batch(columns: Columns, *, topic: str, partition: int, include_headers: bool) -> Any:
    """A ``pyarrow.RecordBatch`` of the rows, in Spark's Kafka source schema."""
    import pyarrow as pa  # noqa: PLC0415 (executors only)

    schema = arrow_schema(include_headers=include_headers)
    rows = len(columns)
    arrays = [
        columns.keys,
        columns.values,
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps * _MICROS_PER_MILLI, schema.field("timestamp").type),
        pa.array(columns.timestamp_types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(columns.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
