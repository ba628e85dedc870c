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
