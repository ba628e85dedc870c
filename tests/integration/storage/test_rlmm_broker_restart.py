"""The metadata manager outlives a restart of its broker.

While the broker is away, its consumer keeps waiting (with Kafka's back-off, logging why) and
a publish keeps retrying; once the broker is back on the same port with its data, both go on
where they were, and a second manager started afterwards sees every record exactly once (the
idempotent producer writes a retried batch once).

Uses a broker of its own: the shared one must not be restarted under other tests.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from protocol.metadata_records import RemoteLogSegmentMetadataRecord
from proxy.embedded import KAFKA_4, KafkaBroker, ensure_jars
from storage.model import RemoteLogSegmentState, TopicIdPartition
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.records import segment_record
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from tests.fakes.segments import segment_metadata

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TP = TopicIdPartition(topic_id=uuid.UUID(int=0x51), topic="orders", partition=0)


def segment(start: int) -> RemoteLogSegmentMetadataRecord:
    return segment_record(
        segment_metadata(
            TP,
            start_offset=start,
            size=1024,
            timestamp=1_700_000_000_000,
            segment_id=uuid.UUID(int=start + 1),
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        )
    )


async def test_publish_and_consume_go_on_after_the_broker_restarts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = RemoteLogMetadataConfig(
        topic_name=f"rlmm-restart-{uuid.uuid4().hex[:8]}",
        topic_partitions=2,
        snapshot_dir="",
        consume_wait_ms=120_000,
        initialization_timeout_ms=60_000,
    )
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path / "kafka") as server:
        info = server.start()
        async with TopicBasedRemoteLogMetadataManager(
            settings, bootstrap_servers=info.bootstrap
        ) as manager:
            await manager.publish(segment(0))
            await asyncio.to_thread(server.stop)
            publishing = asyncio.create_task(manager.publish(segment(10)))
            await asyncio.sleep(2)  # the consumer and the producer find no broker meanwhile
            assert not publishing.done()
            await asyncio.to_thread(server.start)
            await publishing
            assert [m.start_offset for m in manager.cache.segments(TP)] == [0, 10]
        assert "retrying in" in caplog.text
        async with TopicBasedRemoteLogMetadataManager(
            settings, bootstrap_servers=info.bootstrap
        ) as reader:
            assert reader.applied_records == 2
            assert reader.skipped_records == 0
