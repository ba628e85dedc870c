"""The start-up check of the remote tier: the oldest and newest readable segment of a sample
of partitions are looked for (never read), and what is missing is reported and summed up."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Sequence

import pytest

from storage.model import RemoteLogSegmentMetadata, TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from storage.startup import check_segment_sample
from tests.unit.storage.rlmm.reference import copy, seg

log = logging.getLogger("test.startup")


def partition(number: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id=uuid.UUID(int=0x51), topic="orders", partition=number)


class Probe:
    def __init__(self, *, missing: Collection[int], broken: Collection[int] = ()) -> None:
        self.missing, self.broken = missing, broken
        self.asked: list[int] = []

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        number = metadata.segment_id.id.int
        self.asked.append(number)
        if number in self.broken:
            raise RemoteStorageError("503 SlowDown", retriable=True)
        if number in self.missing:
            raise RemoteResourceNotFoundError("not found", key=f"s3://b/{number}.log")
        return metadata.segment_size_in_bytes


class Report:
    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []

    def object_missing(self, segment: RemoteLogSegmentMetadata, key: str) -> None:
        self.found.append((segment.segment_id.id.int, key))


def cache_of(partitions: int, segments: int) -> RemoteLogMetadataCache:
    """Partition p holds segments numbered p * 100 + i, ten offsets each."""
    cache = RemoteLogMetadataCache()
    for p in range(partitions):
        for i in range(segments):
            copy(cache, seg(10 * i, 10 * i + 9, ((0, 0),), tp=partition(p), number=p * 100 + i))
    return cache


def first(items: Sequence[TopicIdPartition], count: int) -> list[TopicIdPartition]:
    return sorted(items, key=lambda tp: tp.partition)[:count]


async def test_the_oldest_and_newest_segment_of_each_sampled_partition_are_looked_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = cache_of(partitions=4, segments=5)
    probe, report = Probe(missing={4, 100}), Report()
    with caplog.at_level(logging.INFO, logger="test.startup"):
        missing = await check_segment_sample(
            cache, probe, report, log=log, partitions=2, choose=first
        )
    assert sorted(probe.asked) == [0, 4, 100, 104]  # partitions 0 and 1, each end
    assert missing == 2
    assert sorted(report.found) == [(4, "s3://b/4.log"), (100, "s3://b/100.log")]
    [line] = caplog.records
    assert line.levelno == logging.WARNING
    assert "2 of the 4 oldest and newest segments of 2 of 4 tiered partitions are missing" in (
        line.getMessage()
    )


async def test_a_partition_of_one_segment_is_looked_at_once_and_all_present_is_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = cache_of(partitions=1, segments=1)
    probe = Probe(missing=set())
    with caplog.at_level(logging.INFO, logger="test.startup"):
        assert await check_segment_sample(cache, probe, Report(), log=log) == 0
    assert probe.asked == [0]
    [line] = caplog.records
    assert line.levelno == logging.INFO
    assert "0 of the 1 oldest and newest segments" in line.getMessage()


async def test_storage_failures_are_counted_not_taken_for_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = cache_of(partitions=1, segments=2)
    report = Report()
    with caplog.at_level(logging.INFO, logger="test.startup"):
        missing = await check_segment_sample(
            cache, Probe(missing=set(), broken={0, 1}), report, log=log
        )
    assert (missing, report.found) == (0, [])
    assert "2 could not be checked (503 SlowDown)" in caplog.text


async def test_an_empty_metadata_cache_checks_nothing() -> None:
    probe = Probe(missing=set())
    assert await check_segment_sample(RemoteLogMetadataCache(), probe, Report(), log=log) == 0
    assert probe.asked == []
