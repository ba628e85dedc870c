"""Apache Kafka only (``KAFKA_HOME`` or ``KAFKA_BOOTSTRAP``): real local retention.

The broker really deletes tiered data, by the pipeline's DeleteRecords or by its own
``retention.ms``, so consumers from the earliest offset take the OFFSET_OUT_OF_RANGE branch
(no offload policy): through consumer groups with commits and restarts they must still get
every record, read committed and uncommitted, exactly as before the deletion.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import KAFKA_4, BrokerInfo, S3Info, ensure_jars
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_tools import run_tool
from proxy.embedded.s3 import object_keys
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    by_partition,
    consume_confluent,
    consume_kafka_python,
    high_watermarks,
    running,
    tier_topic,
)
from tests.integration.tiered.wire import list_offsets
from tests.integration.tiering.workload import create_topic, delete_topic, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.brokers("kafka", "kafka3")]

OPEN_TRANSACTION_SEGMENT_MS = 20_000
"""The pipeline's segment.ms where a test needs its last segment too young to copy: the cycle
must survey the topic within this of the last append, even on a busy machine."""


def earliest(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "earliest"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low)
    finally:
        consumer.close()


def pending_upload_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """ListOffsets EARLIEST_PENDING_UPLOAD (-6, v11) as Kafka 4's GetOffsetShell asks it,
    whatever the broker behind ``bootstrap``: partition -> offset."""
    run = run_tool(
        ensure_jars(KAFKA_4),
        KafkaDistribution.get_offsets,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--time",
        "earliest-pending-upload",
    )
    lines = [line.rsplit(":", 2) for line in run.stdout.split()]
    return {int(partition): int(offset) for _topic, partition, offset in lines}


def consume_group_with_restart(
    bootstrap: str, topic: str, ends: dict[int, int], isolation: str
) -> list[Record]:
    """A consumer group reads a third, commits and leaves; a new member resumes the rest."""
    from confluent_kafka import Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"group-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
        "fetch.queue.backoff.ms": 0,
    }
    got: list[Record] = []
    stop_after = sum(ends.values()) // 3
    for member in range(2):
        consumer = Consumer(config)
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    partition, offset = message.partition(), message.offset()
                    assert partition is not None and offset is not None
                    got.append((partition, offset, message.key(), message.value()))
                    consumer.commit(message=message, asynchronous=False)
                    if member == 0 and len(got) >= stop_after:
                        break
                if member == 1 and len(consumer.assignment()) == len(ends):
                    positions = consumer.position([TopicPartition(topic, p) for p in ends])
                    if all(tp.offset >= ends[tp.partition] for tp in positions):
                        break
        finally:
            consumer.close()
    return got


def read_everything(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, list[Record]]:
    return {
        isolation: by_partition(consume_confluent(bootstrap, topic, ends, isolation=isolation))
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED)
    }


def test_delete_records_by_the_pipeline(
    broker: BrokerInfo, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    if not broker.supports_delete_records:
        pytest.skip(f"{broker.version} has no DeleteRecords")
    topic = f"kafka-delete-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    produce_mixed(broker.bootstrap, topic, 2, records=200)
    ends = high_watermarks(broker.bootstrap, topic, 2)
    before = read_everything(broker.bootstrap, topic, ends)
    report = asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1},
        )
    )
    assert report.topics[topic].log_starts_advanced == 2
    assert all(earliest(broker.bootstrap, topic, p) > 0 for p in range(2))
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        assert all(earliest(proxy.bootstrap, topic, p) == 0 for p in range(2))
        for isolation, expected in before.items():
            got = consume_group_with_restart(proxy.bootstrap, topic, ends, isolation)
            assert by_partition(got) == expected, isolation
        assert proxy.metric("tierproxy_remote_fetch_bytes_total") > 0
        # ListOffsets v11 -6, served above a Kafka 3.9 broker (asked as -1 at its v9): the
        # offset after the tiered range, or -1 when that is the high watermark.
        tiered = asyncio.run(list_offsets(proxy.bootstrap, topic, -5, 2))
        assert pending_upload_offsets(proxy.bootstrap, topic) == {
            p: offset + 1 if offset + 1 < ends[p] else -1
            for p, (_error, offset, _time, _epoch) in enumerate(tiered)
        }


@pytest.mark.parametrize(
    ("setting", "value"),
    [("retention.ms", "1000"), ("retention.bytes", str(1024 * 1024))],
    ids=["retention.ms", "retention.bytes"],
)
def test_the_brokers_own_retention(
    broker: BrokerInfo,
    s3: S3Info,
    spark: Any,
    s3_bucket: str,
    tmp_path: Path,
    setting: str,
    value: str,
) -> None:
    """The broker deletes tiered segments by its own time or size retention (the pipeline
    tiered everything first, so there is no gap): consumers from offset 0 through the proxy
    get every record."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    if not broker.supports_retention:
        pytest.skip(f"{broker.version} does not delete old segments")
    topic = f"kafka-retention-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(3500):
        producer.produce(topic, key=str(i).encode(), value=bytes([i % 256]) * 1000, partition=0)
    producer.flush(30)
    ends = high_watermarks(broker.bootstrap, topic, 1)
    before = read_everything(broker.bootstrap, topic, ends)
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{"segment.ms": 1},
        )
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    retention = ConfigEntry(setting, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[retention])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while earliest(broker.bootstrap, topic, 0) == 0:
        assert time.monotonic() < deadline, "the broker never deleted a segment"
        time.sleep(1)
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        got = consume_group_with_restart(proxy.bootstrap, topic, ends, READ_UNCOMMITTED)
        assert by_partition(got) == before[READ_UNCOMMITTED]


def test_read_committed_across_a_transaction_still_open_at_the_remote_end(
    broker: BrokerInfo, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """A transaction whose marker is not tiered yet keeps its records on the broker: the
    pipeline never moves the log start past its first offset, so READ_COMMITTED consumers
    through the proxy read across the tier boundary without a stall (the broker knows how
    the transaction ended; the remote tier does not yet)."""
    from confluent_kafka import Producer

    topic = f"kafka-open-txn-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    transactional = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"open-{topic}"}
    )
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(200):  # ~60 KiB before the transaction: tiered and dropped locally
        plain.produce(topic, value=bytes([i % 256]) * 300, partition=0)
    plain.flush(30)
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(5):
        transactional.produce(topic, key=b"txn", value=b"t%d" % i, partition=0)
    transactional.flush(30)
    for i in range(400):  # closed segments inside the transaction
        plain.produce(topic, key=str(i).encode(), value=bytes([i % 256]) * 300, partition=0)
    plain.flush(30)
    time.sleep(OPEN_TRANSACTION_SEGMENT_MS / 1000 + 0.5)
    # The marker comes more than segment.ms after the segments before it, so it starts a
    # segment of its own: the last one, too young to be copied by the cycle that follows.
    transactional.commit_transaction(30)
    for i in range(3):
        plain.produce(topic, value=b"tail %d" % i, partition=0)
    plain.flush(30)
    ends = high_watermarks(broker.bootstrap, topic, 1)
    expected = by_partition(
        consume_confluent(broker.bootstrap, topic, ends, isolation=READ_COMMITTED)
    )
    first_txn_offset = next(offset for _p, offset, key, _v in expected if key == b"txn")
    report = asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=metadata_topic,
            spill=tmp_path / "spill",
            **{
                "local.retention.ms": 1,
                "retention.ms": -1,
                "segment.ms": OPEN_TRANSACTION_SEGMENT_MS,
            },
        )
    )
    assert report.topics[topic].lag_bytes > 0, "the marker's segment was tiered too"
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        # A bound, not a window: the read ends at the ends; a busy machine may take minutes.
        got = consume_confluent(
            proxy.bootstrap, topic, ends, isolation=READ_COMMITTED, timeout_s=180
        )
        assert by_partition(got) == expected
        assert proxy.metric("tierproxy_remote_fetch_errors_total") == 0
    assert 0 < earliest(broker.bootstrap, topic, 0) <= first_txn_offset


def test_delete_records_through_the_proxy_purges_the_remote_tier(
    broker: BrokerInfo,
    s3: S3Info,
    spark: Any,
    s3_bucket: str,
    tmp_path: Path,
    kafka_distribution: KafkaDistribution,
) -> None:
    """Kafka's own DeleteRecordsCommand through the proxy, into the tiered range: nothing
    below the offset is served again, and the next tiering cycle deletes the segments below."""
    topic = f"kafka-purge-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    produce_mixed(broker.bootstrap, topic, 1, records=200)
    ends = high_watermarks(broker.bootstrap, topic, 1)
    expected = by_partition(consume_confluent(broker.bootstrap, topic, ends))
    tier: dict[str, Any] = {
        "topic": topic,
        "bucket": s3_bucket,
        "metadata_topic": metadata_topic,
        "spill": tmp_path / "spill",
        "local.retention.ms": 1,
        "retention.ms": -1,
    }
    first = asyncio.run(tier_topic(broker, s3, spark, **tier))
    assert first.topics[topic].segments_copied >= 3
    cut = expected[len(expected) // 2][1]  # an offset in the middle of the remote tier
    assert cut < earliest(broker.bootstrap, topic, 0)
    plan = tmp_path / "delete.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": cut}]})
    )
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        run = run_tool(
            kafka_distribution,
            kafka_distribution.delete_records,
            "--bootstrap-server",
            proxy.bootstrap,
            "--offset-json-file",
            str(plan),
        )
        assert f"low_watermark: {cut}" in run.stdout, run.stdout
        assert earliest(proxy.bootstrap, topic, 0) == cut
        got = by_partition(consume_confluent(proxy.bootstrap, topic, ends))
        assert got == [r for r in expected if r[1] >= cut]
    objects_before = len(object_keys(s3, s3_bucket))
    second = asyncio.run(tier_topic(broker, s3, spark, **tier))
    assert second.topics[topic].leftovers_deleted >= 1
    assert len(object_keys(s3, s3_bucket)) < objects_before


def delete_records_directly(bootstrap: str, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        future.result(30)


def test_a_recreated_topic_never_gets_its_deleted_namesakes_tiered_data(
    broker: BrokerInfo, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """The old topic's segments stay in the remote tier until the pipeline processes the
    deletion; meanwhile clients that fetch by name, with old Metadata and Fetch versions
    (kafka-python speaking Kafka 0.11's) or new ones, get only the new topic's records."""
    from confluent_kafka import Producer

    topic = f"kafka-recreated-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    produce_mixed(broker.bootstrap, topic, 1, records=100)
    tier: dict[str, Any] = {
        "topic": topic,
        "bucket": s3_bucket,
        "metadata_topic": metadata_topic,
        "spill": tmp_path / "spill",
        "local.retention.ms": 1,
        "retention.ms": -1,
    }
    asyncio.run(tier_topic(broker, s3, spark, **tier))
    proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
    with running(proxy):
        assert consume_kafka_python(proxy.bootstrap, topic, {0: 1})
        delete_topic(broker.bootstrap, topic)
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(7):
            producer.produce(topic, key=b"new", value=b"new %d" % i, partition=0)
        assert producer.flush(30) == 0
        # The new topic's own log starts at 3: offsets 0-2 are out of range at the broker,
        # where the old topic's remote tier would answer them.
        delete_records_directly(broker.bootstrap, topic, 3)
        ends = {0: 7}
        new = [(0, i, b"new", b"new %d" % i) for i in range(3, 7)]
        for _round in range(2):  # before and after the pipeline processed the deletion
            old_client = consume_kafka_python(proxy.bootstrap, topic, ends, api_version=(0, 11))
            assert by_partition(old_client) == new
            assert by_partition(consume_confluent(proxy.bootstrap, topic, ends)) == new
            asyncio.run(tier_topic(broker, s3, spark, **tier))


def download_segments(s3: S3Info, bucket: str, into: Path) -> dict[str, list[Path]]:
    """Every remote segment's files, named as Kafka names a segment's files on disk
    (``<base offset>.log``, ``.index``, ...), one directory per segment copy."""
    from proxy.embedded.s3 import s3_client

    client = s3_client(s3)
    segments: dict[str, list[Path]] = {}
    try:
        for key in object_keys(s3, bucket):
            prefix, suffix = key.rsplit(".", 1)
            base_offset, _segment_id = prefix.rsplit("/", 1)[1].split("-", 1)
            directory = into / prefix.replace("/", "_")
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{base_offset}.{suffix}"
            path.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            segments.setdefault(prefix, []).append(path)
    finally:
        client.close()
    return segments


def tool_errors(stderr: str, log: Path) -> list[str]:
    """DumpLogSegments' complaints, less one that Kafka 4's tool makes about every segment
    not based at 0, the broker's own included: its Java port compares the first record's
    offset with -1 + 1 ("-1 is followed by <base offset>"); Kafka 3.9's Scala tool skips
    the first record, as intended."""
    base_offset = int(log.stem)
    false_alarm = [f"Non-consecutive offsets in {log}", f"-1 is followed by {base_offset}"]
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return [] if lines == false_alarm else lines


def test_kafkas_dump_log_segments_reads_the_remote_segments_without_error(
    broker: BrokerInfo,
    kafka_distribution: KafkaDistribution,
    s3: S3Info,
    spark: Any,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    """The remote tier keeps Kafka's own formats (docs/architecture.md): Kafka's
    DumpLogSegments iterates every record of every tiered segment and verifies its offset and
    time indexes against it."""
    topic = f"kafka-dump-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    produce_mixed(broker.bootstrap, topic, 2, records=200)
    asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=s3_bucket,
            metadata_topic=f"__rlm-{topic}",
            spill=tmp_path / "spill",
            **{"local.retention.ms": 1, "retention.ms": -1},
        )
    )
    segments = download_segments(s3, s3_bucket, tmp_path / "remote")
    assert len(segments) >= 2
    checked = {"log": 0, "index": 0, "timeindex": 0}
    for files in segments.values():
        by_suffix = {path.suffix.lstrip("."): path for path in files}
        log = by_suffix["log"]
        dumped = run_tool(
            kafka_distribution,
            kafka_distribution.dump_log_segments,
            "--deep-iteration",
            "--files",
            str(log),
        )
        assert tool_errors(dumped.stderr, log) == [], dumped.stderr
        assert "baseOffset:" in dumped.stdout and "invalid bytes" not in dumped.stdout
        checked["log"] += 1
        for suffix in ("index", "timeindex"):
            if suffix not in by_suffix or by_suffix[suffix].stat().st_size == 0:
                continue
            index = str(by_suffix[suffix])
            tool = kafka_distribution.dump_log_segments
            # Every entry against the batch it names (mismatches go to stderr), then the
            # check a broker runs before it trusts an index at start-up.
            verified = run_tool(kafka_distribution, tool, "--verify-index-only", "--files", index)
            assert verified.stderr.strip() == "", verified.stderr
            sane = run_tool(kafka_distribution, tool, "--index-sanity-check", "--files", index)
            assert "passed sanity check" in sane.stdout, sane.stdout
            checked[suffix] += 1
    assert all(count > 0 for count in checked.values()), checked
