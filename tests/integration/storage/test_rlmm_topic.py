"""The topic-based metadata manager against the real test broker.

Each test uses its own metadata topic (a unique name, 3 partitions) so that tests never see
each other's records. Covered: publish and consume round trip with read-your-writes and the
KIP-405 partitioning, state-machine violations refused before producing and when consumed,
a topic with the wrong partition count, and restarts from snapshots (clean and damaged)
giving the same cache as a full replay of the topic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from protocol.metadata_records import (
    DeletePartitionStateRecord,
    MetadataRecord,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    decode_metadata_record,
    encode_metadata_record,
)
from protocol.murmur2 import metadata_partition_for
from protocol.record_reader import ConsumedRecord
from storage.kafka_client.consumer import AssignedConsumer
from storage.model import RemoteLogSegmentState, RemotePartitionDeleteState, TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.records import segment_record
from storage.rlmm.snapshot import SNAPSHOT_FILE_PREFIX
from storage.rlmm.state import InvalidStateTransitionError
from storage.rlmm.topic_manager import MetadataTopicError, TopicBasedRemoteLogMetadataManager
from tests.fakes.segments import segment_metadata

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
PARTITIONS = 3
TOPIC_ID = uuid.UUID(int=0x405)
USER_PARTITIONS = [
    TopicIdPartition(topic_id=TOPIC_ID, topic="orders", partition=p) for p in range(4)
]


def config(snapshot_dir: Path | None = None, **overrides: Any) -> RemoteLogMetadataConfig:
    return RemoteLogMetadataConfig(
        topic_name=overrides.pop("topic_name"),
        topic_partitions=overrides.pop("topic_partitions", PARTITIONS),
        snapshot_dir=str(snapshot_dir or ""),
        snapshot_interval_ms=3_600_000,  # only on close, so tests control when
        consume_wait_ms=30_000,
        initialization_timeout_ms=60_000,
        **overrides,
    )


@pytest.fixture
def topic_name() -> str:
    return f"rlmm-test-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def manager(
    bootstrap: str, settings: RemoteLogMetadataConfig
) -> AsyncIterator[TopicBasedRemoteLogMetadataManager]:
    async with TopicBasedRemoteLogMetadataManager(settings, bootstrap_servers=bootstrap) as started:
        yield started


def start_record(
    tp: TopicIdPartition,
    segment_id: uuid.UUID,
    start: int,
    end: int,
    epochs: tuple[tuple[int, int], ...],
) -> RemoteLogSegmentMetadataRecord:
    return segment_record(
        segment_metadata(
            tp,
            start_offset=start,
            end_offset=end,
            epochs=epochs,
            size=1024 * (end - start + 1),
            timestamp=1_700_000_000_000 + end,
            event_timestamp=1_700_000_000_000,
            segment_id=segment_id,
            state=S.COPY_SEGMENT_STARTED,
        )
    )


def update_record(
    tp: TopicIdPartition, segment_id: uuid.UUID, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdateRecord:
    return RemoteLogSegmentMetadataUpdateRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        segment_id=segment_id,
        leader_epoch=1,
        event_timestamp=1_700_000_000_500,
        state=state,
    )


def delete_record(
    tp: TopicIdPartition, state: RemotePartitionDeleteState
) -> DeletePartitionStateRecord:
    return DeletePartitionStateRecord(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        epoch=2,
        event_timestamp=9,
        state=state,
    )


def history(seed: int) -> Iterator[MetadataRecord]:
    """A valid event sequence over four partitions: copies, an unclean leader change with a
    divergent copy, a failed copy cleaned up, retention from the head, and one partition
    deleted (the last one is only marked)."""
    rng = random.Random(seed)
    for tp in USER_PARTITIONS:
        next_offset, epoch = 0, 0
        copies = []
        for _ in range(rng.randint(3, 6)):
            length = rng.randint(1, 50)
            segment_id = uuid.UUID(int=rng.getrandbits(128))
            epochs: tuple[tuple[int, int], ...] = ((epoch, next_offset),)
            if rng.random() < 0.3:
                epoch += 1
                epochs += ((epoch, next_offset + length // 2),)
            yield start_record(tp, segment_id, next_offset, next_offset + length, epochs)
            yield update_record(tp, segment_id, S.COPY_SEGMENT_FINISHED)
            copies.append(segment_id)
            next_offset += length + 1
        divergent = uuid.UUID(int=rng.getrandbits(128))  # a truncated leader's late copy
        yield start_record(
            tp, divergent, next_offset - 10, next_offset + 5, ((epoch - 1 if epoch else 0, 0),)
        )
        yield update_record(tp, divergent, S.COPY_SEGMENT_FINISHED)
        failed = uuid.UUID(int=rng.getrandbits(128))
        yield start_record(tp, failed, next_offset, next_offset + 9, ((epoch, next_offset),))
        yield update_record(tp, failed, S.DELETE_SEGMENT_STARTED)
        yield update_record(tp, copies[0], S.DELETE_SEGMENT_STARTED)
        yield update_record(tp, copies[0], S.DELETE_SEGMENT_FINISHED)
    yield delete_record(USER_PARTITIONS[0], P.DELETE_PARTITION_MARKED)
    yield delete_record(USER_PARTITIONS[0], P.DELETE_PARTITION_STARTED)
    yield delete_record(USER_PARTITIONS[0], P.DELETE_PARTITION_FINISHED)
    yield delete_record(USER_PARTITIONS[3], P.DELETE_PARTITION_MARKED)


def describe(cache: RemoteLogMetadataCache) -> dict[TopicIdPartition, object]:
    """Everything a reader can ask the cache, per partition."""
    result: dict[TopicIdPartition, object] = {}
    for tp in sorted(cache.partitions(), key=str):
        lineage = cache.lineage(tp)
        end = cache.remote_log_end_offset(tp) or 0
        result[tp] = (
            cache.segments(tp),
            lineage,
            cache.delete_status(tp),
            cache.remote_log_start_offset(tp),
            end,
            cache.remote_log_holes(tp),
            [cache.segment_for(tp, o, lineage) for o in range(0, end + 2, 3)],
            cache.unreferenced_segments(tp),
        )
    return result


async def raw_records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of the metadata topic as ``(partition, key, value)``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found: list[tuple[int, bytes | None, bytes | None]] = []
        for tp in partitions:
            while await consumer.position(tp) < ends[tp]:
                for _, messages in (await consumer.getmany(tp, timeout_ms=500)).items():
                    found.extend((tp.partition, m.key, m.value) for m in messages)
        return found
    finally:
        await consumer.stop()


async def produce_raw(bootstrap: str, topic: str, record: MetadataRecord) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        partition = metadata_partition_for(f"{record.topic}-{record.partition}", PARTITIONS)
        await producer.send_and_wait(topic, encode_metadata_record(record), partition=partition)
    finally:
        await producer.stop()


async def test_publish_is_read_back_and_partitioned_by_murmur2(
    broker: Any, topic_name: str
) -> None:
    settings = config(topic_name=topic_name)
    records = list(history(1))
    async with manager(broker.bootstrap, settings) as writer:
        assert writer.partition_count == PARTITIONS
        for record in records:
            await writer.publish(record)
            if (
                isinstance(record, RemoteLogSegmentMetadataUpdateRecord)
                and record.state != S.DELETE_SEGMENT_FINISHED
            ):
                tp = USER_PARTITIONS[record.partition]
                if writer.cache.delete_status(tp) is None:
                    # Read your writes: the cache holds the new state when publish returns.
                    found = [
                        m for m in writer.cache.segments(tp) if m.segment_id.id == record.segment_id
                    ]
                    assert [m.state for m in found] == [record.state]
        assert writer.applied_records == len(records)
        assert writer.skipped_records == 0
        async with manager(broker.bootstrap, settings) as reader:
            assert describe(reader.cache) == describe(writer.cache)
            assert reader.cache.partitions() == USER_PARTITIONS[1:]

    stored = await raw_records(broker.bootstrap, topic_name)
    assert all(key is None for _, key, _ in stored)
    for partition in range(PARTITIONS):
        published = [
            r
            for r in records
            if metadata_partition_for(f"{r.topic}-{r.partition}", PARTITIONS) == partition
        ]
        assert [
            decode_metadata_record(v or b"") for p, _, v in stored if p == partition
        ] == published


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
    finally:
        await admin.close()
    (resource,) = response.to_object()["resources"]
    return {c["config_names"]: c["config_value"] for c in resource["config_entries"]}


async def test_the_topic_is_created_once_and_its_partition_count_checked(
    broker: Any, topic_name: str
) -> None:
    async with manager(
        broker.bootstrap, config(topic_name=topic_name, topic_retention_ms=86_400_000)
    ):
        pass
    configs = await topic_configs(broker.bootstrap, topic_name)
    assert configs.get("retention.ms") == "86400000"
    assert configs.get("cleanup.policy") == "delete"
    async with manager(broker.bootstrap, config(topic_name=topic_name)) as again:
        assert again.partition_count == PARTITIONS
    mismatched = TopicBasedRemoteLogMetadataManager(
        config(topic_name=topic_name, topic_partitions=PARTITIONS + 2),
        bootstrap_servers=broker.bootstrap,
    )
    with pytest.raises(MetadataTopicError, match="has 3 partitions"):
        await mismatched.start()
    await mismatched.close()


async def test_state_violations_are_refused(broker: Any, topic_name: str) -> None:
    tp = USER_PARTITIONS[1]
    segment_id = uuid.uuid4()
    async with manager(broker.bootstrap, config(topic_name=topic_name)) as rlmm:
        # Refused before anything is produced.
        with pytest.raises(
            InvalidStateTransitionError, match="only a RemoteLogSegmentMetadataRecord"
        ):
            await rlmm.publish(update_record(tp, segment_id, S.COPY_SEGMENT_FINISHED))
        await rlmm.publish(start_record(tp, segment_id, 0, 99, ((0, 0),)))
        with pytest.raises(InvalidStateTransitionError, match="may only move to"):
            await rlmm.publish(update_record(tp, segment_id, S.DELETE_SEGMENT_FINISHED))
        assert rlmm.cache.invalid_transitions == 2
        assert len(await raw_records(broker.bootstrap, topic_name)) == 1

        # Written by someone who skipped the check: the consumer refuses it, counts it, and
        # goes on with the records after it.
        await produce_raw(
            broker.bootstrap, topic_name, update_record(tp, segment_id, S.DELETE_SEGMENT_FINISHED)
        )
        await rlmm.publish(update_record(tp, segment_id, S.COPY_SEGMENT_FINISHED))
        assert rlmm.skipped_records == 1
        assert rlmm.cache.invalid_transitions == 3
        assert [m.state for m in rlmm.cache.segments(tp)] == [S.COPY_SEGMENT_FINISHED]


async def test_restart_from_snapshots_equals_a_full_replay(
    broker: Any, topic_name: str, tmp_path: Path
) -> None:
    records = list(history(2))
    head, tail = records[: len(records) * 2 // 3], records[len(records) * 2 // 3 :]
    snapshots = tmp_path / "rlmm"
    async with manager(broker.bootstrap, config(snapshots, topic_name=topic_name)) as first:
        for record in head:
            await first.publish(record)
    assert (snapshots / "0" / "_rlmm_committed_offsets").is_file()  # slot 0: the first taker
    async with manager(broker.bootstrap, config(topic_name=topic_name)) as other_writer:
        for record in tail:
            await other_writer.publish(record)

    async with (
        manager(broker.bootstrap, config(snapshots, topic_name=topic_name)) as restarted,
        manager(broker.bootstrap, config(topic_name=topic_name)) as replayed,
    ):
        assert restarted.applied_records == len(tail)  # only the tail was read
        assert replayed.applied_records == len(records)
        assert describe(restarted.cache) == describe(replayed.cache)


async def test_a_damaged_snapshot_is_rebuilt_from_the_topic(
    broker: Any, topic_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = list(history(3))
    snapshots = tmp_path / "rlmm"
    async with manager(broker.bootstrap, config(snapshots, topic_name=topic_name)) as first:
        for record in records:
            await first.publish(record)
    damaged = USER_PARTITIONS[2]
    path = snapshots / "0" / str(damaged) / f"{SNAPSHOT_FILE_PREFIX}{damaged.topic_id.hex}"
    path.write_bytes(path.read_bytes()[:-7])

    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        async with (
            manager(broker.bootstrap, config(snapshots, topic_name=topic_name)) as restarted,
            manager(broker.bootstrap, config(topic_name=topic_name)) as replayed,
        ):
            assert describe(restarted.cache) == describe(replayed.cache)
            rebuilt = metadata_partition_for(str(damaged), PARTITIONS)
            in_rebuilt = [
                r
                for r in records
                if metadata_partition_for(f"{r.topic}-{r.partition}", PARTITIONS) == rebuilt
            ]
            # The damaged partition's metadata partition was read again from its start; the
            # records of other partitions in it were skipped as already in their snapshots.
            assert 0 < restarted.applied_records <= len(in_rebuilt)
    assert f"rebuilding {damaged} from the metadata topic" in caplog.text


async def test_a_start_waits_until_the_answers_records_are_applied(
    broker: Any, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's position moves when a Fetch answer arrives, a loop turn or more before
    the manager applies its records (longer when several leaders answer): a start that went
    by the consumer's position could return with an empty cache (seen once in CI). Here the
    answer's records reach the manager only after the end offsets are known."""
    settings = config(topic_name=topic_name)
    records = list(history(1))
    async with manager(broker.bootstrap, settings) as writer:
        for record in records:
            await writer.publish(record)
        poll, end_offsets = AssignedConsumer.poll, AssignedConsumer.end_offsets

        async def late_poll(self: AssignedConsumer) -> dict[int, list[ConsumedRecord]]:
            found = await poll(self)
            await asyncio.sleep(0.3)
            return found

        async def early_end_offsets(self: AssignedConsumer, via: Any = None) -> dict[int, int]:
            await asyncio.sleep(0.1)
            return await end_offsets(self, via)

        monkeypatch.setattr(AssignedConsumer, "poll", late_poll)
        monkeypatch.setattr(AssignedConsumer, "end_offsets", early_end_offsets)
        async with manager(broker.bootstrap, settings) as reader:
            assert describe(reader.cache) == describe(writer.cache)
