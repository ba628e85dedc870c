"""A cycle's first step, resolving each topic's policy, against a fake client (no Spark).

The broker's topic configs are merged with the file's rules per topic, so a broker setting can
make one topic's policy invalid while the file loaded fine; the cycle must skip that topic,
say why once, and tier the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar, cast

from protocol.metadata_records import MetadataRecord
from storage.config import from_settings
from storage.kafka_client import KafkaClient
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.config import TieringConfig
from storage.tiering.pipeline import TieringPipeline
from storage.tiering.policy import compile_rules
from storage.tiering.report import CycleReport
from tests.fakes.cluster_client import FakeClusterClient

T = TypeVar("T")
R = TypeVar("R")

RULES = {
    "topics": [{"pattern": ".*", "remote.storage.enable": True, "local.retention.ms": 3_600_000}]
}


class MetadataManager:
    partition_count = 1

    def __init__(self) -> None:
        self.cache = RemoteLogMetadataCache()

    async def publish(self, record: MetadataRecord) -> None:
        self.cache.apply(record)

    async def wait_until_caught_up(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Every record is applied when it is published."""


class NoStages:
    """An empty log has nothing to copy, so no stage may run."""

    parallelism = 1

    async def run(
        self,
        description: str,
        items: Sequence[T],
        func: Callable[[Iterator[T]], Iterator[R]],
        *,
        total_bytes: int,
    ) -> list[R]:
        raise AssertionError(f"unexpected {description} stage")


def pipeline(client: FakeClusterClient, spill: Path) -> TieringPipeline:
    return TieringPipeline(
        config=from_settings(
            TieringConfig, {"bootstrap.servers": "127.0.0.1:1", "tiering.spill.dir": str(spill)}
        ),
        rules=compile_rules(RULES),
        storage=from_settings(RemoteStorageConfig, {}),
        client=cast(KafkaClient, client),
        rlmm=MetadataManager(),
        rsm=cast(RemoteStorageManager, object()),
        runner=NoStages(),
        metadata_topic="__remote_log_metadata",
        clock=lambda: 1_700_000_000_000,
    )


def invalid_notes(report: CycleReport, topic: str) -> list[str]:
    stats = report.topics.get(topic)
    return [n for n in stats.notes if "settings are invalid" in n] if stats else []


async def test_invalid_policy_skips_only_that_topic_and_is_reported_once(tmp_path: Path) -> None:
    client = FakeClusterClient(("good", "bad"), {"bad": {"retention.ms": "1000"}})
    tiering = pipeline(client, tmp_path)
    first = await tiering.run_cycle()
    assert not first.errors, first.errors
    (note,) = invalid_notes(first, "bad")
    assert "'bad'" in note and "local.retention.ms (3600000)" in note
    assert "retention.ms (1000)" in note
    assert first.topics["bad"].partitions == 0
    assert first.topics["good"].partitions == 1
    assert invalid_notes(first, "good") == []
    assert client.fetched == ["good"]

    again = await tiering.run_cycle()
    assert invalid_notes(again, "bad") == []
    assert again.topics["good"].partitions == 1
    assert client.fetched == ["good", "good"]

    client.topic_configs["bad"]["retention.ms"] = "2000"
    changed = await tiering.run_cycle()
    (note,) = invalid_notes(changed, "bad")
    assert "retention.ms (2000)" in note


async def test_unparsable_broker_value_skips_the_topic(tmp_path: Path) -> None:
    client = FakeClusterClient(("good", "bad"), {"bad": {"retention.ms": "soon"}})
    report = await pipeline(client, tmp_path).run_cycle()
    (note,) = invalid_notes(report, "bad")
    assert "retention.ms='soon'" in note
    assert report.topics["good"].partitions == 1
