"""The tiering pipeline end to end: real broker, SeaweedFS (S3), Spark local[2].

One Spark session serves every test (the harness's session fixture). Each test uses its own
topic, bucket and metadata topic, so the tests do not see each other's segments.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.session import get_session

from protocol.indexes.leader_epoch_checkpoint import parse_leader_epoch_checkpoint
from protocol.indexes.transaction_index import parse_transaction_index
from protocol.records import ControlType, iter_batches, read_control_record
from proxy.cli import main as cli_main
from storage.kafka_client import FetchTarget, KafkaClient
from storage.model import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import create_remote_storage
from storage.rsm.layout import kafka_uuid_string
from storage.segment.builder import SegmentBuilder
from storage.tiering.cycle import CLOCK_MARGIN_MS
from storage.tiering.job import TieringSettings, open_pipeline, settings_from_flat
from storage.tiering.pipeline import TieringPipeline, wall_clock_ms
from storage.tiering.status import collect_status
from tests.integration.tiering.workload import (
    create_topic,
    delete_topic,
    produce_mixed,
    produce_timed,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3
SEGMENT_BYTES = 32 * 1024
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True)
class Batch:
    base: int
    last: int
    data: bytes


def flat_settings(
    broker: Any, s3: Any, bucket: str, topic: str, spill: Path, **policy: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "remote.log.storage.backend": "s3",
        "remote.log.storage.s3.bucket": bucket,
        "remote.log.storage.s3.endpoint": s3.endpoint_url,
        "remote.log.storage.s3.region": s3.region,
        "remote.log.storage.s3.access.key.id": s3.access_key,
        "remote.log.storage.s3.secret.access.key": s3.secret_key,
        "remote.log.storage.s3.path.style.access": True,
        "remote.log.storage.retry.max.attempts": 2,
        "remote.log.metadata.topic.name": f"__rlm-{topic}",
        "remote.log.metadata.topic.partitions": 3,
        "tiering.spill.dir": str(spill),
        "tiering.task.max.bytes": 40 * 1024,
        "topics": [
            {
                "pattern": topic,
                "remote.storage.enable": True,
                "segment.bytes": SEGMENT_BYTES,
                "segment.ms": 86_400_000,
                **policy,
            }
        ],
    }


def settings_for(
    broker: Any, s3: Any, bucket: str, topic: str, spill: Path, **policy: Any
) -> TieringSettings:
    return settings_from_flat(flat_settings(broker, s3, bucket, topic, spill, **policy))


def toml_file(flat: dict[str, Any], path: Path) -> Path:
    """``flat`` as a tierproxy config file (dotted keys, one [[topics]] table per rule)."""

    def value(v: Any) -> str:
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    lines = [f"{k} = {value(v)}" for k, v in flat.items() if k != "topics"]
    for table in flat.get("topics", ()):
        lines += ["[[topics]]", *(f"{k} = {value(v)}" for k, v in table.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class Env:
    """The servers and names one test works with."""

    broker: Any
    s3: Any
    bucket: str
    spark: Any
    topic: str
    spill: Path

    def settings(self, **policy: Any) -> TieringSettings:
        return settings_for(self.broker, self.s3, self.bucket, self.topic, self.spill, **policy)


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Env:
    return Env(
        broker=request.getfixturevalue("broker"),
        s3=request.getfixturevalue("s3"),
        bucket=request.getfixturevalue("s3_bucket"),
        spark=request.getfixturevalue("spark"),
        topic=request.getfixturevalue("unique_topic"),
        spill=tmp_path / "spill",
    )


async def read_log(client: KafkaClient, topic: str, partition: int) -> tuple[list[Batch], int]:
    """Every batch of the partition from the broker, and its high watermark."""
    batches: list[Batch] = []
    offset = 0
    while True:
        (answer,) = await client.fetch(
            None,
            [FetchTarget(topic=topic, partition=partition, offset=offset, max_bytes=1 << 20)],
            max_wait_ms=10,
        )
        if offset >= answer.high_watermark:
            return batches, answer.high_watermark
        for position, header in iter_batches(answer.records):
            if header.last_offset < offset:
                continue
            batches.append(
                Batch(
                    base=header.base_offset,
                    last=header.last_offset,
                    data=answer.records[position : position + header.size],
                )
            )
            offset = header.next_offset


def finished_segments(
    pipeline: TieringPipeline, tp: TopicIdPartition
) -> list[RemoteLogSegmentMetadata]:
    return pipeline.cache.segments(tp, {FINISHED})


def topic_partitions(pipeline: TieringPipeline, topic: str) -> list[TopicIdPartition]:
    found = [pipeline.cache.topic_id_partition(topic, p) for p in range(PARTITIONS)]
    return [tp for tp in found if tp is not None]


async def remote_files(
    rsm: RemoteStorageManager, segment: RemoteLogSegmentMetadata
) -> LogSegmentData:
    log, offset, time_index, txn, snapshot, epochs = await asyncio.gather(
        rsm.fetch_log_segment(segment, 0),
        rsm.fetch_index(segment, IndexType.OFFSET),
        rsm.fetch_index(segment, IndexType.TIMESTAMP),
        rsm.fetch_index(segment, IndexType.TRANSACTION),
        rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT),
        rsm.fetch_index(segment, IndexType.LEADER_EPOCH),
    )
    return LogSegmentData(
        log=bytes(log),
        offset_index=offset,
        time_index=time_index,
        transaction_index=txn,
        producer_snapshot=snapshot,
        leader_epoch_checkpoint=epochs,
    )


def brute_force_aborted(batches: list[Batch]) -> list[tuple[int, int, int]]:
    """(producer id, first offset, marker offset) of every aborted transaction."""
    open_txns: dict[int, int] = {}
    aborted = []
    for batch in batches:
        header = next(h for _, h in iter_batches(batch.data))
        if not header.is_transactional:
            continue
        if not header.is_control:
            open_txns.setdefault(header.producer_id, header.base_offset)
            continue
        marker = read_control_record(batch.data, 0, header)
        first = open_txns.pop(header.producer_id, None)
        if marker.type is ControlType.ABORT and first is not None:
            aborted.append((header.producer_id, first, header.base_offset))
    return aborted


def check_offset_index(segment: RemoteLogSegmentMetadata, files: LogSegmentData) -> None:
    positions = {position: header for position, header in iter_batches(files.log)}
    previous = -1
    for relative, position in struct.iter_unpack(">ii", files.offset_index):
        assert position > previous
        previous = position
        assert positions[position].last_offset == segment.start_offset + relative


def check_time_index(segment: RemoteLogSegmentMetadata, files: LogSegmentData) -> None:
    entries = list(struct.iter_unpack(">qi", files.time_index))
    stamps = [ts for ts, _ in entries]
    assert stamps == sorted(set(stamps))
    assert entries and entries[-1][0] == segment.max_timestamp
    largest_so_far: dict[int, int] = {}
    running = -1
    for _, header in iter_batches(files.log):
        running = max(running, header.max_timestamp)
        largest_so_far[header.last_offset] = running
    for stamp, relative in entries:
        assert largest_so_far[segment.start_offset + relative] == stamp


async def test_copies_every_batch_kind_byte_for_byte(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    broker, spark, topic = env.broker, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS)
    settings = env.settings()
    async with (
        open_pipeline(settings, spark) as pipeline,
        KafkaClient(broker.bootstrap) as client,
    ):
        first = await pipeline.run_cycle()
        assert not first.errors, first.errors
        assert first.segments_copied >= PARTITIONS * 3
        again = await pipeline.run_cycle()
        assert again.segments_copied == 0 and not again.errors
        rsm = create_remote_storage(settings.storage)
        try:
            aborted_seen: list[tuple[int, int, int]] = []
            aborted_expected: list[tuple[int, int, int]] = []
            for tp in topic_partitions(pipeline, topic):
                batches, high_watermark = await read_log(client, topic, tp.partition)
                segments = finished_segments(pipeline, tp)
                # No gap, no overlap, from the log start, below the LSO.
                assert segments[0].start_offset == 0
                for before, after in itertools.pairwise(segments):
                    assert after.start_offset == before.end_offset + 1
                tiered_end = segments[-1].end_offset
                assert tiered_end < high_watermark
                untiered = sum(len(b.data) for b in batches if b.base > tiered_end)
                assert untiered < SEGMENT_BYTES
                lineage: tuple[Any, ...] = ()
                producers: tuple[Any, ...] = ()
                for segment in segments:
                    files = await remote_files(rsm, segment)
                    inside = [
                        b for b in batches if segment.start_offset <= b.base <= segment.end_offset
                    ]
                    # The .log is exactly what the broker returns for the range.
                    assert files.log == b"".join(b.data for b in inside)
                    assert segment.segment_size_in_bytes == len(files.log) <= SEGMENT_BYTES
                    check_offset_index(segment, files)
                    check_time_index(segment, files)
                    aborted_seen += [
                        (t.producer_id, t.first_offset, t.last_offset)
                        for t in parse_transaction_index(files.transaction_index)
                    ]
                    assert parse_leader_epoch_checkpoint(files.leader_epoch_checkpoint)
                    # Every file equals what the builder makes building the segments in order.
                    builder = SegmentBuilder(
                        base_offset=segment.start_offset,
                        prior_epochs=lineage,
                        prior_producers=producers,
                    )
                    builder.append(files.log)
                    reference = builder.finish()
                    assert reference.data == files
                    assert reference.segment_leader_epochs == segment.segment_leader_epochs
                    lineage, producers = reference.lineage, reference.producers
                aborted_expected += [a for a in brute_force_aborted(batches) if a[2] <= tiered_end]
            assert sorted(aborted_seen) == sorted(aborted_expected)
            assert aborted_expected, "the workload aborts transactions"
            rows = await collect_status(
                client,
                pipeline.cache,
                settings.rules,
                topic_pattern=topic,
                metadata_topic=settings.metadata.topic_name,
            )
            assert [r.partition for r in rows] == list(range(PARTITIONS))
            for row in rows:
                row_tp = pipeline.cache.topic_id_partition(topic, row.partition)
                assert row_tp is not None
                segments = finished_segments(pipeline, row_tp)
                assert row.remote_log_start == 0
                assert row.remote_log_end == segments[-1].end_offset
                assert row.segments == len(segments)
                assert row.local_log_end > row.remote_log_end
                assert row.lag_offsets == row.last_stable_offset - row.remote_log_end - 1
        finally:
            await rsm.close()
    config = toml_file(
        flat_settings(broker, env.s3, env.bucket, topic, env.spill), env.spill.parent / "t.toml"
    )
    exit_code = await asyncio.to_thread(
        cli_main, ["status", "--config", str(config), "--topic", topic, "--json"]
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert exit_code == 0
    assert [(r["partition"], r["remote_log_end"]) for r in printed] == [
        (r.partition, r.remote_log_end) for r in rows
    ]


class FailingStorage:
    """Uploads every file of a segment, then fails as if the task had been killed: the
    upload raises, or (``kill_worker``) the task's Python worker exits on the spot."""

    def __init__(
        self, inner: RemoteStorageManager, fail_partition: int, *, kill_worker: bool
    ) -> None:
        self._inner = inner
        self._fail_partition = fail_partition
        self._kill_worker = kill_worker

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        await self._inner.copy_log_segment(metadata, data)
        tp = metadata.topic_id_partition
        if tp.partition == self._fail_partition and metadata.start_offset > 0:
            if self._kill_worker:
                os._exit(1)
            raise RuntimeError("injected: the copy task died after its upload started")

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes | bytearray:
        return await self._inner.fetch_log_segment(metadata, start, end)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return await self._inner.fetch_index(metadata, index_type)

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        await self._inner.delete_log_segment(metadata)

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True)
class FailingStorageFactory:
    fail_partition: int
    kill_worker: bool = False

    def __call__(self, config: RemoteStorageConfig) -> RemoteStorageManager:
        return FailingStorage(
            create_remote_storage(config), self.fail_partition, kill_worker=self.kill_worker
        )


async def bucket_keys(s3: Any, bucket: str) -> list[str]:
    keys: list[str] = []
    async with get_session().create_client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
        region_name=s3.region,
    ) as client:
        paginator = client.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=bucket):
            keys += [item["Key"] for item in page.get("Contents", [])]
    return keys


@pytest.fixture
def pickled_by_value() -> Iterator[None]:
    """Ship this module's classes to Spark's Python workers by value, whatever their path."""
    from pyspark import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    yield
    cloudpickle.unregister_pickle_by_value(module)  # type: ignore[no-untyped-call]


@pytest.mark.usefixtures("pickled_by_value")
async def test_killed_copy_leaves_no_finished_entry_and_is_cleaned_up(env: Env) -> None:
    broker, s3, s3_bucket, spark, topic = env.broker, env.s3, env.bucket, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS)
    settings = env.settings()
    async with open_pipeline(
        settings, spark, task_storage_factory=FailingStorageFactory(fail_partition=1)
    ) as pipeline:
        broken = await pipeline.run_cycle()
        tp = pipeline.cache.topic_id_partition(topic, 1)
        assert tp is not None
        stuck = pipeline.cache.segments(tp, {RemoteLogSegmentState.COPY_SEGMENT_STARTED})
        assert broken.copy_failures(topic) == len(stuck) > 0
        finished = finished_segments(pipeline, tp)
        assert [s.start_offset for s in finished] == [0]
        keys = await bucket_keys(s3, s3_bucket)
        assert any(kafka_uuid_string(stuck[0].segment_id.id) in key for key in keys)
    await assert_next_cycle_heals(env, settings, topic, stuck)


@pytest.mark.usefixtures("pickled_by_value")
async def test_a_task_that_dies_after_announcing_leaves_started_copies_the_next_cycle_redoes(
    env: Env,
) -> None:
    """A task announces each segment (COPY_SEGMENT_STARTED) itself before uploading it; when
    its worker dies, the job fails, nothing is finished, and what any task announced is a
    leftover that the next cycle deletes before copying the same offsets again."""
    broker, spark, topic = env.broker, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS)
    settings = env.settings()
    factory = FailingStorageFactory(fail_partition=1, kill_worker=True)
    async with open_pipeline(settings, spark, task_storage_factory=factory) as pipeline:
        broken = await pipeline.run_cycle()
        assert any("the copy job failed" in e for e in broken.errors), broken.errors
        assert broken.segments_copied == 0
        stuck = [
            s
            for tp in topic_partitions(pipeline, topic)
            for s in pipeline.cache.segments(tp, {RemoteLogSegmentState.COPY_SEGMENT_STARTED})
        ]
        tp = pipeline.cache.topic_id_partition(topic, 1)
        assert tp is not None
        starts = sorted(s.start_offset for s in stuck if s.topic_id_partition == tp)
        assert starts[0] == 0
        assert len(starts) >= 2  # the segment whose upload it died in was announced first
        assert all(not finished_segments(pipeline, p) for p in topic_partitions(pipeline, topic))
    await assert_next_cycle_heals(env, settings, topic, stuck)


async def assert_next_cycle_heals(
    env: Env, settings: TieringSettings, topic: str, stuck: list[RemoteLogSegmentMetadata]
) -> None:
    """A cycle without faults deletes the ``stuck`` copies and leaves every partition tiered
    from offset 0 without a gap or an overlap, and no object that no segment owns.

    It runs in another pipeline, which cannot know that the failed job's tasks ended: it
    leaves their copies alone until the job's deadline has passed, so its clock is set past
    that."""
    past_deadlines = settings.tiering.copy_timeout_ms + CLOCK_MARGIN_MS
    async with open_pipeline(
        settings, env.spark, clock=lambda: wall_clock_ms() + past_deadlines
    ) as pipeline:
        healed = await pipeline.run_cycle()
        assert not healed.errors, healed.errors
        assert healed.topics[topic].leftovers_deleted == len(stuck)
        assert healed.segments_copied >= len(stuck)
        for partition in topic_partitions(pipeline, topic):
            assert not pipeline.cache.unreferenced_segments(partition)
            assert not pipeline.cache.segments(
                partition, {RemoteLogSegmentState.COPY_SEGMENT_STARTED}
            )
            segments = finished_segments(pipeline, partition)
            assert segments[0].start_offset == 0
            for before, after in itertools.pairwise(segments):
                assert after.start_offset == before.end_offset + 1
        live = {
            kafka_uuid_string(s.segment_id.id)
            for p in topic_partitions(pipeline, topic)
            for s in pipeline.cache.segments(p)
        }
        for key in await bucket_keys(env.s3, env.bucket):
            name = key.rsplit("/", 1)[-1]
            assert name[21:].split(".")[0] in live, key


async def test_retention_deletes_exactly_the_expired_segments(env: Env) -> None:
    broker, s3, s3_bucket, spark, topic = env.broker, env.s3, env.bucket, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, 1)
    stamps = await asyncio.to_thread(
        produce_timed, broker.bootstrap, topic, groups=6, per_group=50, hours_ago=10
    )
    # segment.ms of 30 minutes closes one segment per hour-apart group, the last by age.
    keep_all = env.settings(**{"segment.ms": 1_800_000, "segment.bytes": 1 << 20})
    async with open_pipeline(keep_all, spark) as pipeline:
        report = await pipeline.run_cycle()
        assert report.segments_copied == 6 and not report.errors
        found = pipeline.cache.topic_id_partition(topic, 0)
        assert found is not None
        tp = found
        before = finished_segments(pipeline, tp)
        assert [s.max_timestamp for s in before] == stamps
    retention_ms = int(5.5 * 3_600_000)
    expiring = env.settings(
        **{"segment.ms": 1_800_000, "segment.bytes": 1 << 20, "retention.ms": retention_ms}
    )
    async with open_pipeline(expiring, spark) as pipeline:
        now = int(time.time() * 1000)
        report = await pipeline.run_cycle()
        expected = [s for s in before if s.max_timestamp <= now - retention_ms]
        assert len(expected) == 5
        assert report.topics[topic].segments_expired == len(expected)
        remaining = finished_segments(pipeline, tp)
        assert remaining == before[len(expected) :]
        assert pipeline.cache.remote_log_start_offset(tp) == remaining[0].start_offset
        keys = await bucket_keys(s3, s3_bucket)
        for segment in expected:
            assert not any(kafka_uuid_string(segment.segment_id.id) in key for key in keys)
        for segment in remaining:  # the log, its five index files and its manifest
            assert sum(kafka_uuid_string(segment.segment_id.id) in key for key in keys) == 7
    # Everything expired. A broker that moves its log start (DeleteRecords) lets the last
    # segment go too; on one that cannot, the newest segment stays as the tiered end, or the
    # next cycle would copy the whole log again.
    everything = env.settings(
        **{"segment.ms": 1_800_000, "segment.bytes": 1 << 20, "retention.ms": 3_600_000}
    )
    async with open_pipeline(everything, spark) as pipeline:
        report = await pipeline.run_cycle()
        again = await pipeline.run_cycle()
        assert again.segments_copied == 0
        left = finished_segments(pipeline, tp)
        if broker.supports_delete_records:
            assert left == []
        else:
            assert left == before[-1:]
            assert report.topics[topic].segments_expired == 0


async def test_deleted_topic_runs_the_partition_deletion_lifecycle(env: Env) -> None:
    broker, s3, s3_bucket, spark, topic = env.broker, env.s3, env.bucket, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, 2)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, 2, records=60)
    settings = env.settings()
    async with open_pipeline(settings, spark) as pipeline:
        copied = await pipeline.run_cycle()
        assert copied.segments_copied > 0
        partitions = topic_partitions(pipeline, topic)
        assert await bucket_keys(s3, s3_bucket)
        await asyncio.to_thread(delete_topic, broker.bootstrap, topic)
        report = await pipeline.run_cycle()
        assert not report.errors, report.errors
        for tp in partitions:
            assert pipeline.cache.segments(tp) == []
            assert pipeline.cache.delete_status(tp) is None
        assert await bucket_keys(s3, s3_bucket) == []
        repeat = await pipeline.run_cycle()
        assert not repeat.errors and repeat.topics.get(topic) is None


async def test_compacted_topic_is_refused(env: Env) -> None:
    broker, spark, topic = env.broker, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, 1)
    await asyncio.to_thread(
        produce_timed, broker.bootstrap, topic, groups=1, per_group=20, hours_ago=1000
    )
    settings = env.settings(**{"cleanup.policy": "compact", "segment.ms": 1})
    async with open_pipeline(settings, spark) as pipeline:
        report = await pipeline.run_cycle()
        assert report.segments_copied == 0
        assert any("compacted" in note for note in report.topics[topic].notes)


async def test_delete_records_moves_log_start_only_over_tiered_data(env: Env) -> None:
    broker, spark = env.broker, env.spark
    if broker.kind != "kafka" or not broker.supports_delete_records:
        pytest.skip(f"needs Apache Kafka's DeleteRecords; the broker is {broker.kind}")
    topic = env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS, records=100)
    settings = env.settings(**{"local.retention.ms": 1, "retention.ms": -1})
    async with (
        open_pipeline(settings, spark) as pipeline,
        KafkaClient(broker.bootstrap) as client,
    ):
        report = await pipeline.run_cycle()
        assert not report.errors, report.errors
        assert report.topics[topic].log_starts_advanced == PARTITIONS
        rsm = create_remote_storage(settings.storage)
        try:
            for tp in topic_partitions(pipeline, topic):
                segments = finished_segments(pipeline, tp)
                (earliest,) = await client.list_offsets(None, [(topic, tp.partition, -2)])
                assert earliest.offset == segments[-1].end_offset + 1
                # Every offset is readable: below the log start from the remote tier.
                remote: set[int] = set()
                for segment in segments:
                    data = await rsm.fetch_log_segment(segment, 0)
                    for _, header in iter_batches(data):
                        remote.update(range(header.base_offset, header.last_offset + 1))
                assert set(range(earliest.offset)) <= remote
                (answer,) = await client.fetch(
                    None,
                    [
                        FetchTarget(
                            topic=topic,
                            partition=tp.partition,
                            offset=earliest.offset,
                            max_bytes=1 << 20,
                        )
                    ],
                    max_wait_ms=10,
                )
                assert answer.error == 0 and answer.log_start_offset == earliest.offset
        finally:
            await rsm.close()


def test_settings_reject_unknown_policy_keys(tmp_path: Path) -> None:
    from storage.config import ConfigError
    from storage.tiering.job import load_tiering_settings

    path = tmp_path / "tierproxy.toml"
    path.write_text('[[topics]]\npattern = "x"\nremote.storage.enabled = true\n')
    with pytest.raises(ConfigError, match=r"remote\.storage\.enabled"):
        load_tiering_settings(path)
    path.write_text('bootstrap.servers = "h:1"\n[[topics]]\npattern = "x"\nsegment.ms = 5\n')
    assert load_tiering_settings(path).rules.matching("x") is not None


async def test_the_default_spill_directory_is_not_left_behind(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``tiering.spill.dir`` fetch tasks spill under the system temp directory; a
    cycle moves its run's files into the spill pool, and closing the pipeline removes the
    pool and then the directory itself, once nothing else uses it."""
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    await asyncio.to_thread(create_topic, env.broker.bootstrap, env.topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, env.broker.bootstrap, env.topic, PARTITIONS)
    flat = flat_settings(env.broker, env.s3, env.bucket, env.topic, env.spill)
    del flat["tiering.spill.dir"]
    async with open_pipeline(settings_from_flat(flat), env.spark) as pipeline:
        report = await pipeline.run_cycle()
    assert not report.errors, report.errors
    assert report.segments_copied > 0
    assert list(system_temp.iterdir()) == []


async def test_copy_tasks_keep_one_producer_id_per_python_worker(env: Env) -> None:
    """A Python worker keeps its metadata producer, and so its producer id, from task to task
    and from cycle to cycle, rather than one InitProducerId per task: over two cycles of two
    tasks each, the tasks' COPY_SEGMENT_STARTED records (the batches that are not the
    driver's transactions) come from no more producer ids than Spark runs workers."""
    broker, spark, topic = env.broker, env.spark, env.topic
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS)
    settings = env.settings()
    async with open_pipeline(settings, spark) as pipeline:
        first = await pipeline.run_cycle()
        await asyncio.to_thread(produce_mixed, broker.bootstrap, topic, PARTITIONS)
        second = await pipeline.run_cycle()
    assert not first.errors and not second.errors, (first.errors, second.errors)
    assert first.segments_copied > 0 and second.segments_copied > 0
    producer_ids: set[int] = set()
    async with KafkaClient(broker.bootstrap) as client:
        metadata_topic = settings.metadata.topic_name
        for partition in range(settings.metadata.topic_partitions):
            batches, _ = await read_log(client, metadata_topic, partition)
            for batch in batches:
                for _, header in iter_batches(batch.data):
                    if not header.is_transactional:
                        producer_ids.add(header.producer_id)
    assert 1 <= len(producer_ids) <= spark.sparkContext.defaultParallelism, producer_ids
