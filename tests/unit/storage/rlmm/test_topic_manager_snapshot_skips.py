"""Read your writes means applied from the topic: a published record that the consumer skips
because a snapshot claims to hold it already fails its publish (no broker needed: the
consumer's apply step is driven directly)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from protocol.metadata_records import RemoteLogSegmentMetadataRecord, encode_metadata_record
from proxy.embedded import free_port
from proxy.embedded.ports import LOOPBACK
from storage.model import RemoteLogSegmentState
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.records import segment_record
from storage.rlmm.state import RemoteLogMetadataError
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from tests.fakes.segments import segment_metadata
from tests.unit.storage.rlmm.reference import TP


def record(start: int) -> RemoteLogSegmentMetadataRecord:
    return segment_record(
        segment_metadata(
            TP,
            start_offset=start,
            size=100,
            segment_id=uuid.UUID(int=start + 1),
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        )
    )


async def test_a_record_a_snapshot_claims_to_hold_fails_its_publisher() -> None:
    config = dataclasses.replace(RemoteLogMetadataConfig(), snapshot_dir="")
    rlmm = TopicBasedRemoteLogMetadataManager(config, bootstrap_servers=f"{LOOPBACK}:{free_port()}")
    try:
        # As after loading a snapshot of TP that reaches offset 10 of metadata partition 0,
        # and catching up.
        rlmm._skip_through = {(TP.topic_id, TP.partition): 10}
        rlmm._started = True
        rlmm._apply(0, 7, encode_metadata_record(record(0)))
        with pytest.raises(RemoteLogMetadataError, match="claims to hold it already"):
            await rlmm._applied_through(0, 7)
        assert len(rlmm.cache) == 0
        rlmm._apply(0, 11, encode_metadata_record(record(0)))
        await rlmm._applied_through(0, 11)  # past the snapshot: applied
        assert len(rlmm.cache) == 1
    finally:
        await rlmm.close()
