"""The rows' schema: Spark's Kafka source's, so a job written for it runs unchanged.

``headers`` is there only with ``includeHeaders``, as in Spark. Rows reach the JVM as Arrow
batches; their Arrow schema must be exactly the one PySpark derives from the Spark schema
(``to_arrow_schema(..., timezone="UTC")``) or the batch is refused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["arrow_schema", "kafka_schema"]


def kafka_schema(*, include_headers: bool) -> Any:
    """The Spark ``StructType`` of Spark's Kafka source (built without a JVM: executors'
    Python workers have none to parse DDL)."""
    from pyspark.sql import types as t  # noqa: PLC0415 (PySpark only in Spark processes)

    fields = [
        t.StructField("key", t.BinaryType()),
        t.StructField("value", t.BinaryType()),
        t.StructField("topic", t.StringType()),
        t.StructField("partition", t.IntegerType()),
        t.StructField("offset", t.LongType()),
        t.StructField("timestamp", t.TimestampType()),
        t.StructField("timestampType", t.IntegerType()),
    ]
    if include_headers:
        header = t.StructType(
            [t.StructField("key", t.StringType()), t.StructField("value", t.BinaryType())]
        )
        fields.append(t.StructField("headers", t.ArrayType(header)))
    return t.StructType(fields)


def arrow_schema(*, include_headers: bool) -> Any:
    """The Arrow schema PySpark expects for :func:`kafka_schema`'s rows."""
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

    return to_arrow_schema(kafka_schema(include_headers=include_headers), timezone="UTC")
