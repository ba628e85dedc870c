"""A cycle's first step, resolving each topic's policy, against a fake broker (no Spark).

The broker's topic configs are merged with the file's rules per topic, so a broker setting can
make one topic's policy invalid while the file loaded fine; the cycle must skip that topic,
say why once, and tier the others.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from protocol.errors import KafkaError
from protocol.metadata_records import MetadataRecord
from storage.config import from_settings
from storage.kafka_client import (
    DYNAMIC_TOPIC_CONFIG,
    ClusterMetadata,
    ConfigEntry,
    FetchedPartition,
    FetchTarget,
    KafkaClient,
    PartitionMetadata,
    TopicMetadata,
)
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.config import TieringConfig
from storage.tiering.pipeline import TieringPipeline
from storage.tiering.policy import compile_rules
from storage.tiering.report import CycleReport

T = TypeVar("T")
R = TypeVar("R")

RULES = {
    "topics": [{"pattern": ".*", "remote.storage.enable": True, "local.retention.ms": 3_600_000}]
}


class FakeBroker:
    """Metadata, DescribeConfigs and an empty log for every partition (nothing to copy)."""

    def __init__(self, retention_ms: dict[str, str]) -> None:
        self.retention_ms = retention_ms
        """Per topic, a ``retention.ms`` set on the topic itself."""
        self.fetched: list[str] = []

    async def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        names = ("good", "bad")
        return ClusterMetadata(
            cluster_id="c",
            controller_id=1,
            brokers={},
            topics={
                name: TopicMetadata(
                    name=name,
                    topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                    is_internal=False,
                    error=KafkaError.NONE,
                    partitions=(
                        PartitionMetadata(
                            partition=0, leader_id=1, leader_epoch=0, error=KafkaError.NONE
                        ),
                    ),
                )
                for name in names
                if topics is None or name in topics
            },
        )

    async def describe_configs(
        self, topics: Sequence[str]
    ) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
        return {
            name: {
                "retention.ms": ConfigEntry(
                    name="retention.ms", value=self.retention_ms[name], source=DYNAMIC_TOPIC_CONFIG
                )
            }
            if name in self.retention_ms
            else {}
            for name in topics
        }

    async def fetch(
        self, leader_id: int | None, targets: Sequence[FetchTarget], **_: Any
    ) -> list[FetchedPartition]:
        self.fetched += [t.topic for t in targets]
        return [
            FetchedPartition(
                topic=t.topic,
                partition=t.partition,
                error=KafkaError.NONE,
                high_watermark=0,
                last_stable_offset=0,
                log_start_offset=0,
                records=b"",
            )
            for t in targets
        ]


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


def pipeline(broker: FakeBroker, spill: Path) -> TieringPipeline:
    return TieringPipeline(
        config=from_settings(
            TieringConfig, {"bootstrap.servers": "127.0.0.1:1", "tiering.spill.dir": str(spill)}
        ),
        rules=compile_rules(RULES),
        storage=from_settings(RemoteStorageConfig, {}),
        client=cast(KafkaClient, broker),
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
    broker = FakeBroker({"bad": "1000"})
    tiering = pipeline(broker, tmp_path)
    first = await tiering.run_cycle()
    assert not first.errors, first.errors
    (note,) = invalid_notes(first, "bad")
    assert "'bad'" in note and "local.retention.ms (3600000)" in note
    assert "retention.ms (1000)" in note
    assert first.topics["bad"].partitions == 0
    assert first.topics["good"].partitions == 1
    assert invalid_notes(first, "good") == []
    assert broker.fetched == ["good"]

    again = await tiering.run_cycle()
    assert invalid_notes(again, "bad") == []
    assert again.topics["good"].partitions == 1
    assert broker.fetched == ["good", "good"]

    broker.retention_ms["bad"] = "2000"
    changed = await tiering.run_cycle()
    (note,) = invalid_notes(changed, "bad")
    assert "retention.ms (2000)" in note


async def test_unparsable_broker_value_skips_the_topic(tmp_path: Path) -> None:
    broker = FakeBroker({"bad": "soon"})
    report = await pipeline(broker, tmp_path).run_cycle()
    (note,) = invalid_notes(report, "bad")
    assert "retention.ms='soon'" in note
    assert report.topics["good"].partitions == 1
