"""Options in the forms of Spark's Kafka source."""

from __future__ import annotations

import pytest

from storage.config import ConfigError
from storage.spark_source.options import Bound, BoundKind, parse_options
from storage.spark_source.settings import typed_settings


def test_defaults_are_sparks_batch_and_stream_defaults() -> None:
    batch = parse_options({"subscribe": "a, b"})
    assert batch.topics == ("a", "b")
    assert batch.starting.of("a", 0).kind is BoundKind.EARLIEST
    assert batch.ending.of("a", 0).kind is BoundKind.LATEST
    assert batch.include_local and not batch.read_committed and not batch.include_headers
    assert parse_options({"subscribe": "a"}, streaming=True).starting.of("a", 0).kind is (
        BoundKind.LATEST
    )


def test_json_offsets_per_partition_with_sentinels() -> None:
    options = parse_options(
        {
            "subscribe": "t",
            "startingOffsets": '{"t": {"0": 23, "1": -2}}',
            "endingOffsets": '{"t": {"0": -1}}',
        }
    )
    assert options.starting.of("t", 0) == Bound(kind=BoundKind.OFFSET, value=23)
    assert options.starting.of("t", 1).kind is BoundKind.EARLIEST
    assert options.starting.of("t", 2).kind is BoundKind.EARLIEST  # not named: the default
    assert options.ending.of("t", 0).kind is BoundKind.LATEST


def test_a_timestamp_wins_over_offsets_as_in_spark() -> None:
    options = parse_options(
        {"subscribe": "t", "startingOffsets": "latest", "startingTimestamp": "1000"}
    )
    assert options.starting.of("t", 5) == Bound(kind=BoundKind.TIMESTAMP, value=1000)
    by_partition = parse_options({"subscribe": "t", "endingOffsetsByTimestamp": '{"t": {"1": 7}}'})
    assert by_partition.ending.of("t", 1) == Bound(kind=BoundKind.TIMESTAMP, value=7)
    assert by_partition.ending.of("t", 0).kind is BoundKind.LATEST


def test_pattern_matches_whole_names() -> None:
    options = parse_options({"subscribePattern": "orders-.*"})
    assert options.matches("orders-eu") and not options.matches("x-orders-eu")


def test_settings_are_typed_by_their_declared_type() -> None:
    options = parse_options(
        {
            "subscribe": "t",
            "kafka.bootstrap.servers": "127.0.0.1:9092",
            "tierproxy.remote.log.metadata.topic.partitions": "3",
            "tierproxy.remote.log.storage.s3.path.style.access": "true",
            "tierproxy.remote.log.storage.prefix": "20261124",
            "tierproxy.remote.log.storage.s3.endpoint": "http://127.0.0.1:8333",
        }
    )
    assert typed_settings(options.settings) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "remote.log.metadata.topic.partitions": 3,
        "remote.log.storage.s3.path.style.access": True,
        "remote.log.storage.prefix": "20261124",  # a str setting keeps digits as text
        "remote.log.storage.s3.endpoint": "http://127.0.0.1:8333",
    }


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "subscribePattern": "b"}, "subscribe"),
        ({"subscribe": "a", "isolationLevel": "serializable"}, "isolationLevel"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
        ({"subscribe": "a", "startingOffsets": "{oops"}, "startingOffsets"),
        ({"subscribe": "a", "includeLocal": "yes"}, "includelocal"),
        ({"subscribe": "a", "startingTimestamp": "noon"}, "startingtimestamp"),
        ({"subscribePattern": "("}, "subscribePattern"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_options(options)


def test_assign_reads_the_named_partitions_only() -> None:
    options = parse_options({"assign": '{"a": [0, 2], "b": [1]}'})
    assert options.topics == ("a", "b")
    assert options.reads("a", 2) and not options.reads("a", 1) and options.reads("b", 1)
    assert parse_options({"subscribe": "a"}).reads("a", 7)


@pytest.mark.parametrize(
    "given",
    [
        {"assign": '{"a": [0]}', "subscribe": "a"},
        {"assign": '{"a": [0]}', "subscribePattern": "a.*"},
        {"assign": "[0, 1]"},
        {"assign": '{"a": []}'},
        {"assign": '{"a": ["x"]}'},
    ],
)
def test_assign_is_one_of_three_and_json(given: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="assign"):
        parse_options(given)


def test_spark_kafka_options_with_their_defaults() -> None:
    options = parse_options({"subscribe": "t"})
    assert options.min_partitions is None
    assert options.fail_on_data_loss
    assert options.max_offsets_per_trigger is None and options.min_offsets_per_trigger is None
    assert options.max_trigger_delay_ms == 15 * 60 * 1000
    given = parse_options(
        {
            "subscribe": "t",
            "minPartitions": "8",
            "failOnDataLoss": "false",
            "maxOffsetsPerTrigger": "1000",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "kafka.fetch.max.bytes": "1",  # a consumer setting: accepted, nothing to apply it to
        }
    )
    assert given.min_partitions == 8 and not given.fail_on_data_loss
    assert (given.max_offsets_per_trigger, given.min_offsets_per_trigger) == (1000, 10)
    assert given.max_trigger_delay_ms == 30_000


@pytest.mark.parametrize(
    ("delay", "ms"), [("500", 500), ("2m", 120_000), ("1h", 3_600_000), (" 3 s ", 3000)]
)
def test_max_trigger_delay_takes_sparks_time_units(delay: str, ms: int) -> None:
    assert parse_options({"subscribe": "t", "maxTriggerDelay": delay}).max_trigger_delay_ms == ms


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"minPartitions": "0"}, "minpartitions must be positive"),
        ({"maxOffsetsPerTrigger": "-1"}, "maxoffsetspertrigger must be positive"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, "higher than"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"failOnDataLoss": "maybe"}, "failondataloss"),
        ({"kafka.auto.offset.reset": "earliest"}, "auto.offset.reset"),
        ({"kafka.value.deserializer": "x"}, "value.deserializer"),
        ({"kafka.enable.auto.commit": "true"}, "enable.auto.commit"),
    ],
)
def test_what_sparks_kafka_source_refuses_is_refused(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options({"subscribe": "t", **given})
