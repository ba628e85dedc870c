"""Flat-file snapshots: round trip, atomic files, detection of damaged files, and state that
is never used with another cluster's topic or past the topic's end."""

from __future__ import annotations

import dataclasses
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
from storage.rlmm.snapshot import (
    BINDING_FILE,
    COMMITTED_OFFSETS_FILE,
    SNAPSHOT_FILE_PREFIX,
    Restored,
    SnapshotStore,
    StateBinding,
)
from tests.unit.storage.rlmm.reference import TP, S, copy, lineage, seg, stored_entry

PARTITIONS = 5
OTHER = TopicIdPartition(topic_id=uuid.UUID(int=0xB0B), topic="payments", partition=0)
BINDING = StateBinding(
    cluster_id="cluster-a",
    metadata_topic="__tierproxy_remote_log_metadata",
    metadata_topic_id=uuid.UUID(int=0xA),
    remote_storage="file:///data/tier/",
)
ENDS = dict.fromkeys(range(PARTITIONS), 1_000)
"""Every metadata partition's end: past every position these tests write."""


def bound_store(directory: Path) -> SnapshotStore:
    """A store whose directory is bound to :data:`BINDING`, as a manager's first start leaves
    it (before it writes any snapshot)."""
    store = SnapshotStore(directory, PARTITIONS)
    assert load(store, RemoteLogMetadataCache()) == Restored(applied_through={}, resume_after={})
    return store


def load(
    store: SnapshotStore,
    cache: RemoteLogMetadataCache,
    binding: StateBinding = BINDING,
    ends: dict[int, int] = ENDS,
) -> Restored:
    return store.load(cache, binding=binding, ends=ends)


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
    store = bound_store(tmp_path)
    positions = positions_for(TP, OTHER)
    store.write(store.plan(cache, positions, cache.partitions()))

    restored_cache = RemoteLogMetadataCache()
    restored = load(store, restored_cache)
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
    restored = load(SnapshotStore(tmp_path / "absent", PARTITIONS), RemoteLogMetadataCache())
    assert restored.applied_through == {}
    assert restored.resume_after == {}


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_snapshot_is_dropped_and_its_metadata_partition_replayed(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = populated()
    store = bound_store(tmp_path)
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
        restored = load(store, restored_cache)
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
    store = bound_store(tmp_path)
    store.write(store.plan(cache, positions_for(TP, OTHER), cache.partitions()))
    (tmp_path / COMMITTED_OFFSETS_FILE).write_text("0 12\nnonsense\n")
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = load(store, RemoteLogMetadataCache())
    assert "replaying the metadata topic" in caplog.text
    assert restored.resume_after == {}
    assert len(restored.applied_through) == 2  # the snapshots still skip what they hold


def test_finished_partition_deletion_removes_its_snapshot(tmp_path: Path) -> None:
    cache = populated()
    store = bound_store(tmp_path)
    store.write(store.plan(cache, positions_for(TP, OTHER), cache.partitions()))
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        cache.update_partition_delete(OTHER, state, epoch=3, event_timestamp=10)
    store.write(store.plan(cache, positions_for(TP, OTHER), [OTHER]))
    assert not (tmp_path / str(OTHER)).exists()
    restored_cache = RemoteLogMetadataCache()
    load(store, restored_cache)
    assert restored_cache.partitions() == [TP]


def test_a_snapshot_the_cache_refuses_is_dropped_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A well-formed file whose entries the cache refuses (here one segment twice) must
    not leave half a partition behind."""
    entry = stored_entry(1, 0)
    store = bound_store(tmp_path)
    write_snapshot_file(tmp_path, 7, (entry, entry))
    cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = load(store, cache)
    assert "is repeated" in caplog.text
    assert cache.partitions() == []
    assert len(cache) == 0
    assert restored.applied_through == {}


def write_snapshot_file(
    directory: Path, offset: int, entries: tuple[RemoteLogSegmentMetadataRecordStored, ...]
) -> None:
    """:data:`TP`'s snapshot file in ``directory``, with ``entries`` as of metadata topic
    offset ``offset``, as the writer frames it (a checksum after the flat file)."""
    body = encode_flat_file(
        FlatFileSnapshot(topic_id=TP.topic_id, metadata_topic_offset=offset, entries=entries)
    )
    folder = directory / str(TP)
    folder.mkdir()
    (folder / f"{SNAPSHOT_FILE_PREFIX}{TP.topic_id.hex}").write_bytes(
        body + struct.pack(">I", crc32c.crc32c(body))
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            dataclasses.replace(stored_entry(9, 30), segment_leader_epochs=((0, 31),)),
            "do not cover",
        ),
        (dataclasses.replace(stored_entry(9, 30), segment_leader_epochs=()), "do not cover"),
        (dataclasses.replace(stored_entry(9, 30), end_offset=29), "has offsets 30..29"),
        (dataclasses.replace(stored_entry(9, 30), start_offset=-1), "has offsets -1..39"),
        (dataclasses.replace(stored_entry(9, 30), segment_size_in_bytes=-1), "has size -1"),
        (
            dataclasses.replace(stored_entry(9, 30), segment_leader_epochs=((-1, 30),)),
            "out of range",
        ),
        (
            dataclasses.replace(stored_entry(9, 30), segment_leader_epochs=((1, 30), (0, 35))),
            "not ascending",
        ),
        (dataclasses.replace(stored_entry(9, 30), state=S.DELETE_SEGMENT_FINISHED), "is deleted"),
        (stored_entry(2, 30), "is repeated"),
    ],
)
def test_a_segment_the_cache_refuses_drops_the_snapshot_and_replays_its_partition(
    tmp_path: Path,
    bad: RemoteLogSegmentMetadataRecordStored,
    message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What restoring segment by segment refuses, a bulk restore refuses too, with the
    same error naming the segment: the partition is dropped whole and its metadata
    partition replayed, the other partitions are restored."""
    store = bound_store(tmp_path)
    positions = positions_for(TP, OTHER)
    store.write(store.plan(populated(), positions, [OTHER]))
    entries = (stored_entry(1, 0), stored_entry(2, 10), stored_entry(3, 20), bad)
    write_snapshot_file(tmp_path, 40, entries)
    cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = load(store, cache)
    assert f"segment {bad.segment_id} of {TP}" in caplog.text
    assert message in caplog.text
    assert f"rebuilding {TP} from the metadata topic" in caplog.text
    assert cache.partitions() == [OTHER]
    assert len(cache) == 1
    assert list(restored.applied_through) == [(OTHER.topic_id, OTHER.partition)]
    assert metadata_partition_for(str(TP), PARTITIONS) not in restored.resume_after


def write_populated(directory: Path) -> tuple[SnapshotStore, dict[int, int]]:
    """Snapshots of :func:`populated` and committed offsets, in a directory bound to
    :data:`BINDING`."""
    cache = populated()
    store = bound_store(directory)
    positions = positions_for(TP, OTHER)
    store.write(store.plan(cache, positions, cache.partitions()))
    return store, positions


@pytest.mark.parametrize(
    "other",
    [
        StateBinding(
            cluster_id="cluster-b",
            metadata_topic=BINDING.metadata_topic,
            metadata_topic_id=BINDING.metadata_topic_id,
            remote_storage=BINDING.remote_storage,
        ),
        StateBinding(
            cluster_id=BINDING.cluster_id,
            metadata_topic=BINDING.metadata_topic,
            metadata_topic_id=uuid.UUID(int=0xB),  # the topic was deleted and created again
            remote_storage=BINDING.remote_storage,
        ),
        StateBinding(
            cluster_id=BINDING.cluster_id,
            metadata_topic=BINDING.metadata_topic,
            metadata_topic_id=BINDING.metadata_topic_id,
            remote_storage="s3://bucket/ at AWS",
        ),
    ],
    ids=["cluster", "topic-id", "remote-tier"],
)
def test_state_of_another_binding_is_removed_not_loaded(
    tmp_path: Path, other: StateBinding, caplog: pytest.LogCaptureFixture
) -> None:
    write_populated(tmp_path)
    cache = RemoteLogMetadataCache()
    store = SnapshotStore(tmp_path, PARTITIONS)
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        assert load(store, cache, binding=other) == Restored(applied_through={}, resume_after={})
    assert cache.partitions() == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "are not used: they belong to" in line, line
    assert "replaying the metadata topic" in line
    assert not list(tmp_path.rglob(f"{SNAPSHOT_FILE_PREFIX}*"))
    assert not (tmp_path / COMMITTED_OFFSETS_FILE).exists()
    assert StateBinding.decode((tmp_path / BINDING_FILE).read_bytes()) == other
    # The directory now belongs to the new binding: its own snapshots load again.
    cache = populated()
    store.write(store.plan(cache, positions_for(TP, OTHER), cache.partitions()))
    again = RemoteLogMetadataCache()
    assert load(store, again, binding=other).resume_after == positions_for(TP, OTHER)
    assert describe(again) == describe(cache)


def test_state_without_a_binding_is_removed_and_a_fresh_directory_is_bound_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_populated(tmp_path)
    (tmp_path / BINDING_FILE).unlink()  # as a version before bindings left it
    fresh = tmp_path / "fresh"
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        load(SnapshotStore(fresh, PARTITIONS), RemoteLogMetadataCache())
        assert caplog.records == []
        restored = load(SnapshotStore(tmp_path, PARTITIONS), RemoteLogMetadataCache())
    assert restored.applied_through == {}
    assert "belong to no known cluster" in caplog.text
    assert StateBinding.decode((fresh / BINDING_FILE).read_bytes()) == BINDING


def test_an_unreadable_binding_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_populated(tmp_path)
    (tmp_path / BINDING_FILE).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = load(SnapshotStore(tmp_path, PARTITIONS), RemoteLogMetadataCache())
    assert restored.resume_after == {}
    assert "is unreadable" in caplog.text
    assert StateBinding.decode((tmp_path / BINDING_FILE).read_bytes()) == BINDING


def test_committed_offsets_past_the_topics_end_are_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker without topic ids cannot tell a re-created topic apart; its offsets can."""
    store, positions = write_populated(tmp_path)
    short = dict(ENDS)
    past = max(positions, key=lambda m: positions[m])
    short[past] = positions[past] - 1
    cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        assert load(store, cache, ends=short).resume_after == {}
    assert f"past the end of partitions [{past}]" in caplog.text
    assert cache.partitions() == []
    assert not (tmp_path / COMMITTED_OFFSETS_FILE).exists()


def test_a_snapshot_past_the_topics_end_drops_every_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = write_populated(tmp_path)
    (tmp_path / COMMITTED_OFFSETS_FILE).write_text("")  # only the snapshots reach past
    short = dict(ENDS)
    short[metadata_partition_for(str(TP), PARTITIONS)] = 0
    cache = RemoteLogMetadataCache()
    with caplog.at_level(logging.WARNING, logger="storage.rlmm.snapshot"):
        restored = load(store, cache, ends=short)
    assert restored == Restored(applied_through={}, resume_after={})
    assert cache.partitions() == []
    assert "past its end" in caplog.text


def test_a_position_at_the_listed_end_is_kept(tmp_path: Path) -> None:
    """Brokers that answer ListOffsets LATEST with the last batch's base offset list the
    offset of the last record, which is the position a caught-up manager writes."""
    store, positions = write_populated(tmp_path)
    restored = load(store, RemoteLogMetadataCache(), ends=positions)
    assert restored.resume_after == positions


def test_binding_round_trip_and_differences() -> None:
    assert StateBinding.decode(BINDING.encode()) == BINDING
    other = StateBinding(
        cluster_id="",
        metadata_topic=BINDING.metadata_topic,
        metadata_topic_id=BINDING.metadata_topic_id,
        remote_storage=BINDING.remote_storage,
    )
    assert BINDING.differences(other) == "cluster id (none), not cluster-a"
    with pytest.raises(ValueError, match="not a binding"):
        StateBinding.decode(b"{}")
