"""A metadata state directory belongs to one process, one cluster, one metadata topic and one
remote tier.

- Two managers (two processes, or a restart whose predecessor has not exited) configured
  with one snapshot directory each lock a slot of their own, and never write each other's
  files; a later start takes a free slot and restarts warm.
- One directory used first against one Apache Kafka cluster and then against another (a
  second broker started here, with the same metadata topic name and the same remote tier):
  the other cluster's snapshots and committed offsets are set aside with one warning and
  the new topic is replayed whole; the tiering pipeline deletes nothing it did not read in
  the new cluster's topic.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.metadata_records import MetadataRecord
from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, ensure_jars
from proxy.embedded.tierproxy import proxy_process
from storage.console import report_console
from storage.model import (
    LogSegmentData,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.records import metadata_of
from storage.rlmm.slots import LOCK_FILE
from storage.rlmm.snapshot import BINDING_FILE, COMMITTED_OFFSETS_FILE, StateBinding
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.rsm.factory import storage_identity
from storage.rsm.layout import RemoteLayout
from storage.rsm.local import LocalRemoteStorage
from storage.tiering.job import run_tiering, settings_from_flat
from tests.integration.storage.test_rlmm_topic import (
    USER_PARTITIONS,
    delete_record,
    describe,
    history,
    start_record,
    update_record,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
SEGMENT_DATA = LogSegmentData(
    log=b"x" * 100,
    offset_index=b"",
    time_index=b"",
    transaction_index=b"",
    producer_snapshot=b"",
    leader_epoch_checkpoint=b"",
)


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """A second, brand-new Apache Kafka cluster (its own cluster id)."""
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("other")) as kafka:
        yield kafka.start()


def config(topic: str, snapshots: Path | None) -> RemoteLogMetadataConfig:
    return RemoteLogMetadataConfig(
        topic_name=topic,
        topic_partitions=3,
        snapshot_dir=str(snapshots or ""),
        snapshot_interval_ms=3_600_000,  # only on close, so tests control when
        consume_wait_ms=30_000,
        initialization_timeout_ms=60_000,
    )


def manager(
    bootstrap: str, topic: str, snapshots: Path | None, identity: str = "file:///tier/"
) -> TopicBasedRemoteLogMetadataManager:
    return TopicBasedRemoteLogMetadataManager(
        config(topic, snapshots), bootstrap_servers=bootstrap, storage_identity=identity
    )


async def publish_all(bootstrap: str, topic: str, records: list[MetadataRecord]) -> None:
    async with manager(bootstrap, topic, None) as writer:
        for record in records:
            await writer.publish(record)


def not_used(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "storage.rlmm.snapshot" and "are not used" in r.getMessage()
    ]


async def test_two_managers_on_one_directory_each_lock_a_slot_of_their_own(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    topic = f"rlmm-slots-{uuid.uuid4().hex[:8]}"
    snapshots = tmp_path / "state"
    records = list(history(4))
    half = len(records) // 2
    async with (
        manager(broker.bootstrap, topic, snapshots) as first,
        manager(broker.bootstrap, topic, snapshots) as second,
    ):
        assert first.snapshot_dir == snapshots / "0"
        assert second.snapshot_dir == snapshots / "1"
        for record in records[:half]:
            await first.publish(record)
        await second.wait_until_caught_up()
        await second.close()  # its last snapshot goes to its own slot
        for record in records[half:]:
            await first.publish(record)
    for slot in ("0", "1"):
        assert (snapshots / slot / COMMITTED_OFFSETS_FILE).is_file()
        assert (snapshots / slot / LOCK_FILE).is_file()
    # Slot 1 stopped half way and slot 0 went on: a start from either equals a replay.
    async with (
        manager(broker.bootstrap, topic, snapshots) as restarted,
        manager(broker.bootstrap, topic, None) as replayed,
    ):
        assert restarted.snapshot_dir == snapshots / "0"  # free again, and warm
        assert restarted.applied_records == 0
        assert describe(restarted.cache) == describe(replayed.cache)
    async with manager(broker.bootstrap, topic, snapshots) as other_slot:
        assert other_slot.snapshot_dir == snapshots / "0"
        async with manager(broker.bootstrap, topic, snapshots) as lagging:
            assert lagging.snapshot_dir == snapshots / "1"
            assert lagging.applied_records == len(records) - half  # it read its tail
            assert describe(lagging.cache) == describe(other_slot.cache)


async def test_a_directory_used_against_another_cluster_is_set_aside_and_the_topic_replayed(
    broker: BrokerInfo,
    other_cluster: BrokerInfo,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"rlmm-clusters-{uuid.uuid4().hex[:8]}"  # one name on both clusters
    snapshots = tmp_path / "state"
    on_first = list(history(5))
    async with manager(broker.bootstrap, topic, snapshots) as first:
        for record in on_first:
            await first.publish(record)
    # The other cluster's topic has more records than the first one's committed offsets
    # reach: kept offsets would skip its first ones.
    on_other = list(history(6)) + [
        dataclasses.replace(r, topic="payments", topic_id=uuid.UUID(int=0xB0B)) for r in history(7)
    ]
    await publish_all(other_cluster.bootstrap, topic, on_other)

    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        async with (
            manager(other_cluster.bootstrap, topic, snapshots) as moved,
            manager(other_cluster.bootstrap, topic, None) as replayed,
        ):
            assert moved.applied_records == replayed.applied_records == len(on_other)
            assert describe(moved.cache) == describe(replayed.cache)
            cluster_id = StateBinding.decode(
                (snapshots / "0" / BINDING_FILE).read_bytes()
            ).cluster_id
    [line] = not_used(caplog)
    assert "they belong to cluster id " in line, line
    assert f", not {cluster_id}, metadata topic id " in line  # this cluster's, bound now
    assert "metadata topic id" in line
    assert f"replaying the metadata topic {topic} from its beginning" in line

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        async with (
            manager(broker.bootstrap, topic, snapshots) as back,
            manager(broker.bootstrap, topic, None) as replayed,
        ):
            assert describe(back.cache) == describe(replayed.cache)
    assert len(not_used(caplog)) == 1

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        async with manager(
            broker.bootstrap, topic, snapshots, identity="s3://elsewhere/ at AWS"
        ) as moved_tier:
            assert moved_tier.applied_records == len(on_first)
    [line] = not_used(caplog)
    assert "remote storage file:///tier/, not s3://elsewhere/ at AWS" in line


@pytest.mark.spark
async def test_the_pipeline_deletes_nothing_on_the_strength_of_another_clusters_snapshot(
    broker: BrokerInfo,
    other_cluster: BrokerInfo,
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first cluster knew remote data of partitions whose topics the second cluster
    does not have; a ``tier --once`` against the second cluster with the same state
    directory and remote tier must not take them for deleted topics."""
    settings: dict[str, Any] = {
        "remote.log.storage.backend": "local",
        "remote.log.storage.local.dir": str(tmp_path / "remote"),
        "remote.log.metadata.topic.name": f"rlmm-pipeline-{uuid.uuid4().hex[:8]}",
        "remote.log.metadata.topic.partitions": 3,
        "remote.log.metadata.snapshot.dir": str(tmp_path / "state"),
    }
    identity = storage_identity(settings_from_flat(settings).storage)
    rsm = LocalRemoteStorage(tmp_path / "remote")
    kept: list[TopicIdPartition] = USER_PARTITIONS[:2]
    async with TopicBasedRemoteLogMetadataManager(
        settings_from_flat(settings).metadata,
        bootstrap_servers=broker.bootstrap,
        command="tier",
        storage_identity=identity,
    ) as first:
        for number, tp in enumerate(kept):
            segment_id = uuid.UUID(int=number + 1)
            started = start_record(tp, segment_id, 0, 9, ((0, 0),))
            await first.publish(started)
            await rsm.copy_log_segment(metadata_of(started), SEGMENT_DATA)
            await first.publish(update_record(tp, segment_id, S.COPY_SEGMENT_FINISHED))
        await first.publish(delete_record(kept[1], P.DELETE_PARTITION_MARKED))
    objects = sorted(p for p in (tmp_path / "remote").rglob("*") if p.is_file())
    assert len(objects) == 2 * len(RemoteLayout().segment_keys(metadata_of(started)))

    with caplog.at_level(logging.INFO):
        code = await run_tiering(
            settings_from_flat({"bootstrap.servers": other_cluster.bootstrap, **settings}),
            spark,
            once=True,
            console=report_console(),
        )
    assert code == 0, caplog.text
    assert sorted(p for p in (tmp_path / "remote").rglob("*") if p.is_file()) == objects
    assert len(not_used(caplog)) == 1
    assert "DELETE_PARTITION" not in caplog.text
    await rsm.close()


def test_two_serve_processes_with_one_state_directory_keep_slots_of_their_own(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    """The scale-out case: several ``tierproxy serve`` processes on one host from one config."""
    state = tmp_path / "state"
    settings = {
        "remote.log.storage.backend": "local",
        "remote.log.storage.local.dir": str(tmp_path / "remote"),
        "remote.log.metadata.topic.name": f"rlmm-serve-{uuid.uuid4().hex[:8]}",
        "remote.log.metadata.topic.partitions": 3,
        "remote.log.metadata.snapshot.dir": str(state),
    }
    first = proxy_process(broker, tmp_path, settings)
    second = proxy_process(broker, tmp_path, settings)
    first.start()
    try:
        second.start()
        try:
            log = second.process.log_path.read_text(errors="replace")
            assert f"metadata snapshots of this process go to {state / '1'}" in log, log
            assert f"{state / '0'} (pid {first.process.pid}) held by another process" in log
            assert (state / "0" / LOCK_FILE).read_text() == f"{first.process.pid}\n"
            assert (state / "1" / LOCK_FILE).read_text() == f"{second.process.pid}\n"
        finally:
            second.stop()
    finally:
        first.stop()
    for slot in ("0", "1"):  # each wrote its own, complete state on the way out
        assert (state / slot / BINDING_FILE).is_file()
        assert (state / slot / COMMITTED_OFFSETS_FILE).is_file()
    again = proxy_process(broker, tmp_path, settings)
    again.start()
    again.stop()
    log = again.process.log_path.read_text(errors="replace")
    assert f"metadata snapshots of this process go to {state / '0'}" in log  # free again
    assert "held by another process" not in log
