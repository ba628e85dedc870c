"""Flat-file snapshots: round trip, atomic files, and detection of damaged files."""

from __future__ import annotations

import logging
import struct
import uuid
from pathlib import Path

import crc32c
import pytest

from protocol.metadata_records import (
    FlatFileSnapshot,
    RemoteLogSegmentMetadataRecordStored,
    encode_flat_file,
)
from protocol.murmur2 import metadata_partition_for
from storage.model import RemotePartitionDeleteState, TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.snapshot import COMMITTED_OFFSETS_FILE, SNAPSHOT_FILE_PREFIX, SnapshotStore
from tests.unit.storage.rlmm.reference import TP, S, copy, lineage, seg

PARTITIONS = 5
OTHER = TopicIdPartition(topic_id=uuid.UUID(int=0xB0B), topic="payments", partition=0)


def populated() -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0),), number=1, max_timestamp=5))
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2))  # a divergent copy, same start
    copy(cache, seg(4, 5, ((0, 0), (2, 5)), number=3))
    cache.add_segment(seg(6, 9, ((2, 6),), number=4))
    copy(cache, seg(0, 99, ((7, 0),), tp=OTHER, number=5))
    cache.update_partition_delete(
        OTHER, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, epoch=3, event_timestamp=9
    )
    return cache


def positions_for(*tps: TopicIdPartition) -> dict[int, int]:
    return {metadata_partition_for(str(tp), PARTITIONS): 40 + i for i, tp in enumerate(tps)}


def describe(cache: RemoteLogMetadataCache) -> dict[TopicIdPartition, object]:
    return {
        tp: (
            cache.segments(tp),
            cache.lineage(tp),
            cache.delete_status(tp),
            cache.remote_log_start_offset(tp),
            cache.remote_log_end_offset(tp),
            [cache.segment_for(tp, o, lineage((0, 0), (2, 5))) for o in range(8)],
        )
        for tp in cache.partitions()
    }


def test_round_trip_restores_the_same_cache(tmp_path: Path) -> None:
    cache = populated()
    store = SnapshotStore(tmp_path, PARTITIONS)
    positions = positions_for(TP, OTHER)
    store.write(store.plan(cache, positions, cache.partitions()))

    restored_cache = RemoteLogMetadataCache()
    restored = store.load(restored_cache)
    assert describe(restored_cache) == describe(cache)
    assert restored.resume_after == positions
    assert restored.applied_through == {
        (TP.topic_id, TP.partition): positions[metadata_partition_for(str(TP), PARTITIONS)],
        (OTHER.topic_id, OTHER.partition): positions[
            metadata_partition_for(str(OTHER), PARTITIONS)
        ],
    }
    assert (tmp_path / COMMITTED_OFFSETS_FILE).read_text().splitlines() == [
        f"{m} {o}" for m, o in sorted(positions.items())
    ]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_missing_directory_restores_nothing(tmp_path: Path) -> None:
    restored = SnapshotStore(tmp_path / "absent", PARTITIONS).load(RemoteLogMetadataCache())
    assert restored.applied_through == {}
    assert restored.resume_after == {}


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_snapshot_is_dropped_and_its_metadata_partition_replayed(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = populated()
    store = SnapshotStore(tmp_path, PARTITIONS)
    positions = positions_for(TP, OTHER)
    store.write(store.plan(cache, positions, cache.partitions()))
    path = tmp_path / str(TP) / f"{SNAPSHOT_FILE_PREFIX}{TP.topic_id.hex}"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[30] ^= 0x40
    elif damage == "truncate":
        del data[-9:]
    else:
        data.clear()
    path.write_bytes(bytes(data))

    restored_cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = store.load(restored_cache)
    assert f"rebuilding {TP} from the metadata topic" in caplog.text
    assert restored_cache.partitions() == [OTHER]
    assert (TP.topic_id, TP.partition) not in restored.applied_through
    replayed = metadata_partition_for(str(TP), PARTITIONS)
    assert replayed not in restored.resume_after
    other = metadata_partition_for(str(OTHER), PARTITIONS)
    assert restored.resume_after.get(other) == positions[other]


def test_a_damaged_committed_offsets_file_replays_everything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = populated()
    store = SnapshotStore(tmp_path, PARTITIONS)
    store.write(store.plan(cache, positions_for(TP, OTHER), cache.partitions()))
    (tmp_path / COMMITTED_OFFSETS_FILE).write_text("0 12\nnonsense\n")
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = store.load(RemoteLogMetadataCache())
    assert "replaying the metadata topic" in caplog.text
    assert restored.resume_after == {}
    assert len(restored.applied_through) == 2  # the snapshots still skip what they hold


def test_finished_partition_deletion_removes_its_snapshot(tmp_path: Path) -> None:
    cache = populated()
    store = SnapshotStore(tmp_path, PARTITIONS)
    store.write(store.plan(cache, positions_for(TP, OTHER), cache.partitions()))
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        cache.update_partition_delete(OTHER, state, epoch=3, event_timestamp=10)
    store.write(store.plan(cache, positions_for(TP, OTHER), [OTHER]))
    assert not (tmp_path / str(OTHER)).exists()
    restored_cache = RemoteLogMetadataCache()
    store.load(restored_cache)
    assert restored_cache.partitions() == [TP]


def test_a_snapshot_the_cache_refuses_is_dropped_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A well-formed file whose entries the cache refuses (here one segment twice) must
    not leave half a partition behind."""
    entry = RemoteLogSegmentMetadataRecordStored(
        segment_id=uuid.UUID(int=1),
        start_offset=0,
        end_offset=9,
        leader_epoch=0,
        max_timestamp=0,
        event_timestamp=0,
        segment_leader_epochs=((0, 0),),
        segment_size_in_bytes=100,
        state=S.COPY_SEGMENT_FINISHED,
    )
    body = encode_flat_file(
        FlatFileSnapshot(topic_id=TP.topic_id, metadata_topic_offset=7, entries=(entry, entry))
    )
    folder = tmp_path / str(TP)
    folder.mkdir()
    (folder / f"{SNAPSHOT_FILE_PREFIX}{TP.topic_id.hex}").write_bytes(
        body + struct.pack(">I", crc32c.crc32c(body))
    )
    cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = SnapshotStore(tmp_path, PARTITIONS).load(cache)
    assert "is repeated" in caplog.text
    assert cache.partitions() == []
    assert len(cache) == 0
    assert restored.applied_through == {}
