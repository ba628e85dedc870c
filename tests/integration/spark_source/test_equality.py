"""``format("tierproxy")`` returns exactly the topic's records: compared with a direct
consumer read (and Spark's own Kafka source) made before the broker deleted the tiered range.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from tests.integration.spark_source.conftest import Row, SourceTopic, comparable
from tests.integration.tiered.support import READ_COMMITTED, READ_UNCOMMITTED

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def load(spark: Any, source: SourceTopic, **options: str) -> Any:
    """The data source's rows; up to the ends read before the deletion unless ``options``
    say otherwise (the streaming test produces more)."""
    return comparable(load_raw(spark, source, **options))


def load_raw(spark: Any, source: SourceTopic, **options: str) -> Any:
    """:func:`load`'s frame as the source gives it (its partitions are the source's tasks)."""
    ends = {source.topic: {str(p): end for p, end in source.high_watermarks.items()}}
    reader = spark.read.format("tierproxy").option("subscribe", source.topic)
    for key, value in {**source.settings, "endingOffsets": json.dumps(ends), **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def start_stream(spark: Any, source: SourceTopic, name: str, tmp_path: Any, **options: str) -> Any:
    """A streaming query from the earliest offset into the memory table ``name``."""
    reader = spark.readStream.format("tierproxy").option("subscribe", source.topic)
    for key, value in {**source.settings, "startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )


def without_headers(rows: list[Row]) -> list[Row]:
    return [row[:7] for row in rows]


def assert_rows(frame: Any, expected: list[Row]) -> None:
    """Equal rows, in order; a mismatch names the first differing offsets, not every row."""
    actual = [tuple(row) for row in frame.collect()]
    got = {(r[3], r[4]) for r in actual}
    wanted = {(r[3], r[4]) for r in expected}
    assert got == wanted, (
        f"{len(actual)} rows, {len(expected)} expected; missing "
        f"{sorted(wanted - got)[:10]}, extra {sorted(got - wanted)[:10]}"
    )
    assertDataFrameEqual(frame, expected, checkRowOrder=True)


def test_whole_topic_with_headers_equals_a_consumer_read(
    spark: Any, source_topic: SourceTopic
) -> None:
    frame = load(spark, source_topic, includeHeaders="true")
    assert_rows(frame, source_topic.rows[READ_UNCOMMITTED])


def test_every_codec_and_transactions_from_remote_only(
    spark: Any, source_topic: SourceTopic
) -> None:
    """Without the broker's tail: the remote tier's records (every codec), and nothing else."""
    frame = load(spark, source_topic, includeLocal="false")
    rows = frame.collect()
    assert rows, "nothing read from the remote tier"
    last = {p: max(r.offset for r in rows if r.partition == p) for p in (0, 1)}
    expected = [r for r in source_topic.rows[READ_UNCOMMITTED] if r[4] <= last[r[3]]]
    deleted = {  # the last record the broker deleted: the remote tier must hold it
        p: max(
            r[4]
            for r in source_topic.rows[READ_UNCOMMITTED]
            if r[3] == p and r[4] < source_topic.broker_log_starts[p]
        )
        for p in last
    }
    assert all(last[p] >= deleted[p] for p in last), (last, deleted)
    assert_rows(frame, without_headers(expected))


def test_offsets(spark: Any, source_topic: SourceTopic) -> None:
    starts = {"0": 17, "1": 250}
    ends = {"0": 400, "1": -1}
    frame = load(
        spark,
        source_topic,
        startingOffsets=json.dumps({source_topic.topic: starts}),
        endingOffsets=json.dumps({source_topic.topic: ends}),
    )
    stop = {0: 400, 1: source_topic.high_watermarks[1]}
    expected = [
        r for r in source_topic.rows[READ_UNCOMMITTED] if starts[str(r[3])] <= r[4] < stop[r[3]]
    ]
    assert_rows(frame, without_headers(expected))


def test_timestamps(spark: Any, source_topic: SourceTopic) -> None:
    targets = sorted(source_topic.offsets_for_times)
    first, last = targets[2], targets[-3]
    frame = load(spark, source_topic, startingTimestamp=str(first), endingTimestamp=str(last))
    begin = dict(source_topic.offsets_for_times[first])
    end = {
        p: (o if o >= 0 else source_topic.high_watermarks[p])
        for p, o in source_topic.offsets_for_times[last]
    }
    expected = [r for r in source_topic.rows[READ_UNCOMMITTED] if begin[r[3]] <= r[4] < end[r[3]]]
    assert expected
    assert_rows(frame, without_headers(expected))


def test_read_committed_skips_aborted_transactions(spark: Any, source_topic: SourceTopic) -> None:
    frame = load(spark, source_topic, isolationLevel="read_committed")
    committed = source_topic.rows[READ_COMMITTED]
    assert len(committed) < len(source_topic.rows[READ_UNCOMMITTED])
    assert_rows(frame, without_headers(committed))


def test_same_rows_as_sparks_kafka_source(spark: Any, source_topic: SourceTopic) -> None:
    """Spark's Kafka source read the topic through the broker before the deletion."""
    frame = load(spark, source_topic, includeHeaders="true")
    assert_rows(frame, source_topic.kafka_source_rows)


def test_stream_starts_at_the_earliest_remote_offset_and_continues_into_live_data(
    spark: Any, source_topic: SourceTopic, tmp_path: Any
) -> None:
    """One streaming query: the tiered history first, then records produced while it runs."""
    name = f"stream_{source_topic.topic.replace('-', '_')}"
    query = start_stream(spark, source_topic, name, tmp_path)
    try:
        query.processAllAvailable()
        history = comparable(spark.table(name)).where(
            " OR ".join(
                f"(partition = {p} AND offset < {end})"
                for p, end in source_topic.high_watermarks.items()
            )
        )
        assert_rows(history, without_headers(source_topic.rows[READ_UNCOMMITTED]))
        live = [(b"live-%d" % i, p) for i, p in enumerate([0, 1, 0, 1])]
        produce_live(source_topic, live)
        query.processAllAvailable()
        rows = comparable(spark.table(name)).collect()
        assert [
            (r.key, r.partition) for r in rows if (r.key or b"").startswith(b"live-")
        ] == sorted(live, key=lambda kp: (kp[1], kp[0]))
        assert len(rows) >= len(source_topic.rows[READ_UNCOMMITTED]) + len(live)
    finally:
        query.stop()


def produce_live(source: SourceTopic, records: list[tuple[bytes, int]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": source.settings["kafka.bootstrap.servers"]})
    for key, partition in records:
        producer.produce(source.topic, key=key, value=b"live", partition=partition)
    producer.flush(30)
