"""Spark's Kafka source options on ``format("tierproxy")``, against the same tiered topic as
the equality tests (Apache Kafka, SeaweedFS, local Spark)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.integration.spark_source.conftest import SourceTopic
from tests.integration.spark_source.test_equality import (
    assert_rows,
    load,
    load_raw,
    start_stream,
    without_headers,
)
from tests.integration.tiered.support import READ_UNCOMMITTED

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_assign_reads_only_the_named_partitions(spark: Any, source_topic: SourceTopic) -> None:
    frame = load(spark, source_topic, assign=json.dumps({source_topic.topic: [1]}), subscribe="")
    expected = [r for r in source_topic.rows[READ_UNCOMMITTED] if r[3] == 1]
    assert_rows(frame, without_headers(expected))


def test_subscribe_pattern_resolves_topics_from_the_brokers_metadata(
    spark: Any, source_topic: SourceTopic
) -> None:
    """A pattern is matched whole against the cluster's topics (Java's ``matches``): one
    that names the topic only with a wildcard reads exactly its rows."""
    pattern = re.escape(source_topic.topic[:-3]) + ".{3}"
    frame = load(spark, source_topic, subscribePattern=pattern, subscribe="")
    assert_rows(frame, without_headers(source_topic.rows[READ_UNCOMMITTED]))


def test_min_partitions_gives_more_tasks_and_the_same_rows(
    spark: Any, source_topic: SourceTopic
) -> None:
    tasks = load_raw(spark, source_topic).rdd.getNumPartitions()
    assert load_raw(spark, source_topic, minPartitions="40").rdd.getNumPartitions() > tasks
    finer = load(spark, source_topic, minPartitions="40")
    assert_rows(finer, without_headers(source_topic.rows[READ_UNCOMMITTED]))


def test_max_offsets_per_trigger_bounds_every_micro_batch(
    spark: Any, source_topic: SourceTopic, tmp_path: Any
) -> None:
    """The history in micro-batches of at most the limit (plus one per partition, from
    rounding shares up), and all of it."""
    limit = 150
    name = f"limited_{source_topic.topic.replace('-', '_')}"
    query = start_stream(spark, source_topic, name, tmp_path, maxOffsetsPerTrigger=str(limit))
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        total = spark.table(name).count()
    finally:
        query.stop()
    ends = sum(source_topic.high_watermarks.values())
    assert total >= len(source_topic.rows[READ_UNCOMMITTED])
    assert len(sizes) >= ends // (limit + 2)
    assert max(sizes) <= limit + len(source_topic.high_watermarks)


def test_refused_kafka_option_is_refused_as_spark_does(
    spark: Any, source_topic: SourceTopic
) -> None:
    with pytest.raises(Exception, match=r"auto\.offset\.reset"):
        load(spark, source_topic, **{"kafka.auto.offset.reset": "earliest"}).collect()
