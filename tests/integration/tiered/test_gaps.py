"""Apache Kafka deletes data that was never tiered: the gap never traps a consumer.

The scenario of the issue, scaled down: records are tiered, more are produced, then the
broker's own ``retention.bytes`` deletes old segments, including offsets the pipeline had
not copied yet. Kafka can never show such a gap (its earliest offset is the first it can
serve contiguously), so through the proxy a consumer from the earliest offset reads exactly
the broker's records, once, instead of looping over the unreachable remote range; the gap is
counted, ``tierproxy status`` shows it, and the next tiering cycle says so and leaves a hole
in the remote log that is shown, not presented as one range.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from protocol.errors import KafkaError
from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import proxy_process, storage_settings, write_config
from tests.integration.tiered.support import (
    earliest_offsets,
    fetch_once,
    running,
    status_rows,
    tier_topic,
    watermarks,
)
from tests.integration.tiering.workload import create_topic, produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NO_LOCAL_RETENTION = {"retention.ms": -1, "retention.bytes": -1, "local.retention.ms": -1}
"""The pipeline never moves the broker's log start: only the broker's own retention does."""


def set_topic_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def consume_from_earliest(bootstrap: str, topic: str, end: int, seconds: float) -> list[int]:
    """Offsets a group consumer with auto.offset.reset=earliest reads in ``seconds``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gap-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
        }
    )
    offsets: list[int] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            offset = message.offset()
            assert offset is not None
            offsets.append(offset)
            if offset + 1 >= end:
                break
    finally:
        consumer.close()
    return offsets


def test_data_deleted_before_it_was_tiered_is_a_gap_not_a_loop(
    broker: BrokerInfo, s3: S3Info, spark: Any, s3_bucket: str, tmp_path: Path
) -> None:
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 3000, first=0)
    tier: dict[str, Any] = {
        "topic": topic,
        "bucket": s3_bucket,
        "metadata_topic": metadata_topic,
        "spill": tmp_path / "spill",
        **NO_LOCAL_RETENTION,
    }
    asyncio.run(tier_topic(broker, s3, spark, **tier))
    produce_numbered(broker.bootstrap, topic, 6000, first=3000)
    set_topic_config(broker.bootstrap, topic, "retention.bytes", str(2 * 1024 * 1024))
    deadline = time.monotonic() + 60
    while earliest_offsets(broker.bootstrap, topic, 1)[0] < 4000:
        assert time.monotonic() < deadline, "the broker's retention.bytes deleted nothing"
        time.sleep(1)
    ((broker_start, end),) = watermarks(broker.bootstrap, topic, 1).values()
    settings = storage_settings(s3, s3_bucket, metadata_topic)
    proxy = proxy_process(broker, tmp_path, settings)
    with running(proxy):
        # EARLIEST is the broker's own start: the remote tier does not reach it.
        assert earliest_offsets(proxy.bootstrap, topic, 1)[0] == broker_start
        error, _hw, records = asyncio.run(fetch_once(proxy.bootstrap, topic, 0, 10))
        assert (error, records) == (KafkaError.OFFSET_OUT_OF_RANGE, b"")
        offsets = consume_from_earliest(proxy.bootstrap, topic, end, seconds=60)
        assert offsets == list(range(broker_start, end)), "records lost, repeated or skipped"
        assert proxy.metric("tierproxy_remote_log_gap_records") >= broker_start - 3000
    config = write_config(
        tmp_path / "status.toml", {"bootstrap.servers": broker.bootstrap, **settings}
    )
    (row,) = status_rows(config, topic)
    assert row["missing"] and row["missing"][-1][1] == broker_start - 1
    report = asyncio.run(tier_topic(broker, s3, spark, **tier))
    assert report.topics[topic].missing_offsets > 0
    assert any("before they were tiered" in note for note in report.topics[topic].notes)
    (row,) = status_rows(config, topic)
    assert row["remote_log_start"] == broker_start  # the run after the hole
    assert row["missing"][0][1] == broker_start - 1  # the hole, shown
