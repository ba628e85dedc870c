"""The metadata cache on KIP-405's fixed histories: follower fetch scenarios 1-5 and the
follower-to-leader transition, plus the cache's bookkeeping (states, deletion, names).

Segment ids are ``UUID(int=n)`` for the KIP's ``uuid-n``; each scenario asserts the exact
copy that the leader-epoch lineage says holds each offset.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from protocol.metadata_records import (
    DeletePartitionStateRecord,
    FlatFileSnapshot,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    decode_flat_file_columns,
    encode_flat_file,
)
from storage.model import RemotePartitionDeleteState, TopicIdPartition
from storage.rlmm.cache import (
    InvalidSegmentMetadataError,
    PartitionDeleteStatus,
    RemoteLogMetadataCache,
)
from storage.rlmm.lineage import agreeing_end
from storage.rlmm.state import InvalidStateTransitionError
from tests.unit.storage.rlmm.reference import TP, S, copy, lineage, seg, stored_entry

P = RemotePartitionDeleteState


def ids_for(
    cache: RemoteLogMetadataCache, offsets: range, history: tuple[object, ...]
) -> list[int | None]:
    found = []
    for offset in offsets:
        metadata = cache.segment_for(TP, offset, history)  # type: ignore[arg-type]
        found.append(None if metadata is None else metadata.segment_id.id.int)
    return found


def test_scenario_1_and_2_follower_rebuilds_epochs_from_remote_segments() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 2, ((0, 0),), number=1))
    copy(cache, seg(3, 5, ((1, 3), (2, 5)), number=2))
    copy(cache, seg(6, 8, ((2, 6), (3, 7)), number=3))
    leader = lineage((0, 0), (1, 3), (2, 5), (3, 7))

    assert ids_for(cache, range(12), leader) == [1, 1, 1, 2, 2, 2, 3, 3, 3, None, None, None]
    assert cache.lineage(TP) == leader
    assert cache.remote_log_start_offset(TP) == 0
    assert cache.remote_log_end_offset(TP) == 8
    # The follower of scenario 1 finds the copy holding ELO-1 under the leader's epochs.
    assert cache.segment_for(TP, 5, leader).segment_id.id.int == 2  # type: ignore[union-attr]


def test_scenario_3_multiple_hard_failures() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 1, ((0, 0),), number=1))  # shipped by A before both crashed
    copy(cache, seg(1, 1, ((0, 0), (1, 1)), number=2))  # B's new leader epoch 1 at offset 1
    broker_b = lineage((0, 0), (1, 1), (2, 2))

    # Offset 0 LE-0 comes from seg-0-1; offset 1 belongs to LE-1, so message 3 from
    # seg-1-1, not the lost message 1 that seg-0-1 also holds at offset 1.
    assert ids_for(cache, range(3), broker_b) == [1, 2, None]
    assert cache.lineage(TP) == lineage((0, 0), (1, 1))
    assert cache.remote_log_end_offset(TP) == 1
    # Reading on from offset 0 in seg-0-1 must stop before the lost message at offset 1.
    first = cache.segment_for(TP, 0, broker_b)
    assert first is not None
    assert agreeing_end(first, 0, broker_b) == 0
    assert [m.segment_id.id.int for m in cache.unreferenced_segments(TP)] == []


def test_scenario_4_unclean_election_with_truncation() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 2, ((0, 0),), number=1))  # A's messages 0-2
    copy(cache, seg(0, 1, ((0, 0), (1, 1)), number=2))  # B after the unclean election
    broker_b = lineage((0, 0), (1, 1))

    # Offset 0 may come from either copy; seg-0-1 agrees with B to its end, seg-0-2 does
    # not (its offsets 1-2 are A's lost messages), so seg-0-1 serves it. Offset 1 is
    # message 4 (LE-1) from seg-0-1, never message 1; offset 2 is not in remote storage.
    assert ids_for(cache, range(3), broker_b) == [2, 2, None]
    assert cache.lineage(TP) == broker_b
    assert cache.remote_log_end_offset(TP) == 1  # seg-0-2 ends later but was truncated
    # Under A's own history (LE-0 throughout), its copy still answers offset 2.
    broker_a = lineage((0, 0))
    assert cache.segment_for(TP, 2, broker_a).segment_id.id.int == 1  # type: ignore[union-attr]
    assert [m.segment_id.id.int for m in cache.unreferenced_segments(TP)] == [1]


def test_scenario_5_log_divergence_in_remote_storage() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0),), number=1))  # A, LE-0
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2))  # B, LE-1 from offset 2
    # A again, LE-2; the KIP writes this copy's epochs unclipped (LE-0 from offset 0).
    copy(cache, seg(4, 5, ((0, 0), (2, 5)), number=3))
    broker_a = lineage((0, 0), (2, 5))

    # Offset 2 is msg 2 (LE-0) from uuid-1, never msg 4 (LE-1) from uuid-2; offsets 0-1
    # are in both, and uuid-1 agrees with the lineage to its end.
    assert ids_for(cache, range(7), broker_a) == [1, 1, 1, 1, 3, 3, None]
    assert cache.lineage(TP) == broker_a
    assert (cache.remote_log_start_offset(TP), cache.remote_log_end_offset(TP)) == (0, 5)
    # Under B's history (LE-1 from offset 2), uuid-2 answers offset 3.
    broker_b = lineage((0, 0), (1, 2))
    assert cache.segment_for(TP, 3, broker_b).segment_id.id.int == 2  # type: ignore[union-attr]
    assert cache.segment_for(TP, 3, broker_a).segment_id.id.int == 1  # type: ignore[union-attr]
    assert [m.segment_id.id.int for m in cache.unreferenced_segments(TP)] == [2]


def test_scenario_5_when_the_divergent_copy_is_the_only_one_holding_an_offset() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2))  # only B's divergent copy
    broker_a = lineage((0, 0), (2, 5))
    found = cache.segment_for(TP, 1, broker_a)
    assert found is not None
    assert found.segment_id.id.int == 2
    assert agreeing_end(found, 1, broker_a) == 1  # stop before B's LE-1 records
    assert cache.segment_for(TP, 2, broker_a) is None


def test_follower_to_leader_transition_finds_where_to_resume_copying() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 2, ((0, 0),), number=1))
    copy(cache, seg(3, 4, ((0, 0), (1, 3)), number=2))
    # B (new leader, epochs 0@0 1@3 2@6 3@7) resumes copying after the remote log end,
    # which the remote epochs agree with (the pipeline checks the boundary's epoch).
    assert cache.remote_log_end_offset(TP) == 4  # so it copies from offset 5
    assert cache.lineage(TP) == lineage((0, 0), (1, 3))
    copy(cache, seg(4, 6, ((1, 3), (2, 6)), number=3))
    leader_b = lineage((0, 0), (1, 3), (2, 6), (3, 7))
    assert ids_for(cache, range(8), leader_b) == [1, 1, 1, 2, 3, 3, 3, None]
    assert cache.lineage(TP) == lineage((0, 0), (1, 3), (2, 6))
    assert cache.remote_log_end_offset(TP) == 6


def test_equal_copies_finishing_out_of_arrival_order() -> None:
    """Two copies alike in last epoch, end and start: the one that arrived later is the
    tip, whichever finished first."""
    cache = RemoteLogMetadataCache()
    first = seg(20, 21, ((1, 16),), number=1)
    second = seg(20, 21, ((0, 16), (1, 21)), number=2)
    cache.add_segment(first)
    cache.add_segment(second)
    for metadata in (second, first):
        cache.update_segment(
            metadata.segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=1, event_timestamp=0
        )
    assert cache.lineage(TP) == lineage((0, 20), (1, 21))
    cache.update_segment(
        second.segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=1, event_timestamp=0
    )
    assert cache.lineage(TP) == lineage((1, 20))


def test_unfinished_and_deleting_copies_are_not_read() -> None:
    cache = RemoteLogMetadataCache()
    started = seg(0, 9, ((0, 0),), number=1)
    cache.add_segment(started)
    history = lineage((0, 0))
    assert cache.segment_for(TP, 5, history) is None
    assert cache.lineage(TP) == ()
    assert cache.remote_log_start_offset(TP) is None
    cache.update_segment(
        started.segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=0, event_timestamp=1
    )
    assert cache.segment_for(TP, 5, history) is not None
    cache.update_segment(
        started.segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=0, event_timestamp=2
    )
    assert cache.segment_for(TP, 5, history) is None
    assert [m.state for m in cache.segments(TP)] == [S.DELETE_SEGMENT_STARTED]
    assert len(cache) == 1
    cache.update_segment(
        started.segment_id, S.DELETE_SEGMENT_FINISHED, leader_epoch=0, event_timestamp=3
    )
    assert cache.segments(TP) == []
    assert cache.segment(started.segment_id) is None
    assert len(cache) == 0


def test_segment_for_timestamp_skips_truncated_copies() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0),), number=1, max_timestamp=100))
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2, max_timestamp=500))
    copy(cache, seg(4, 5, ((0, 4), (2, 5)), number=3, max_timestamp=300))
    broker_a = lineage((0, 0), (2, 5))
    found = cache.segment_for_timestamp(TP, 200, broker_a)
    assert found is not None
    assert found.segment_id.id.int == 3  # uuid-2 has later records, but LE-1's
    assert cache.segment_for_timestamp(TP, 50, broker_a).segment_id.id.int == 1  # type: ignore[union-attr]
    assert cache.segment_for_timestamp(TP, 301, broker_a) is None


def test_retention_from_the_head_moves_the_remote_log_start() -> None:
    cache = RemoteLogMetadataCache()
    copies = [seg(10 * i, 10 * i + 9, ((i // 3, 10 * i),), number=i + 1) for i in range(9)]
    for metadata in copies:
        copy(cache, metadata)
    assert cache.lineage(TP) == lineage((0, 0), (1, 30), (2, 60))
    for i, metadata in enumerate(copies[:5]):
        cache.update_segment(
            metadata.segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=2, event_timestamp=0
        )
        assert cache.remote_log_start_offset(TP) == 10 * (i + 1)
        cache.update_segment(
            metadata.segment_id, S.DELETE_SEGMENT_FINISHED, leader_epoch=2, event_timestamp=0
        )
    assert cache.lineage(TP) == lineage((1, 50), (2, 60))
    assert cache.segment_for(TP, 49, lineage((0, 0), (1, 30))) is None
    assert cache.segment_for(TP, 59, cache.lineage(TP)).segment_id.id.int == 6  # type: ignore[union-attr]
    assert cache.remote_log_end_offset(TP) == 89


def test_invalid_transitions_are_refused_counted_and_change_nothing() -> None:
    cache = RemoteLogMetadataCache()
    metadata = seg(0, 9, ((0, 0),), number=7)
    with pytest.raises(
        InvalidStateTransitionError, match="first state must be COPY_SEGMENT_STARTED"
    ):
        cache.add_segment(replace(metadata, state=S.COPY_SEGMENT_FINISHED))
    cache.add_segment(metadata)
    with pytest.raises(InvalidStateTransitionError, match="may only move to") as caught:
        cache.update_segment(
            metadata.segment_id, S.DELETE_SEGMENT_FINISHED, leader_epoch=0, event_timestamp=0
        )
    assert caught.value.current == S.COPY_SEGMENT_STARTED
    assert caught.value.target == S.DELETE_SEGMENT_FINISHED
    unknown = seg(0, 9, ((0, 0),), number=8).segment_id
    with pytest.raises(InvalidStateTransitionError, match="only a RemoteLogSegmentMetadataRecord"):
        cache.update_segment(unknown, S.COPY_SEGMENT_STARTED, leader_epoch=0, event_timestamp=0)
    assert cache.invalid_transitions == 3
    assert [m.state for m in cache.segments(TP)] == [S.COPY_SEGMENT_STARTED]
    # A retried publish of the same state is accepted.
    cache.add_segment(metadata)
    assert cache.invalid_transitions == 3
    assert len(cache) == 1


def test_impossible_segment_metadata_is_refused() -> None:
    cache = RemoteLogMetadataCache()
    for bad, reason in (
        (seg(5, 4, ((0, 4),)), "has offsets 5..4"),
        (seg(5, 9, ((0, 6),)), "do not cover its start offset 5"),
        (seg(5, 9, ((1, 0), (0, 6))), "not ascending"),
        (replace(seg(5, 9, ((0, 5),)), segment_leader_epochs=()), "do not cover"),
        (replace(seg(5, 9, ((0, 5),)), segment_size_in_bytes=1 << 31), "has size 2147483648"),
    ):
        with pytest.raises(InvalidSegmentMetadataError) as refused:
            cache.add_segment(bad)
        named = f"segment {bad.segment_id.id} of {TP} ({TP.topic_id}) "
        assert str(refused.value).startswith(named)
        assert reason in str(refused.value)
    assert len(cache) == 0
    assert cache.partitions() == []


def test_records_drive_the_cache_and_check_predicts_apply() -> None:
    cache = RemoteLogMetadataCache()
    segment_id = uuid.uuid4()
    start = RemoteLogSegmentMetadataRecord(
        topic=TP.topic,
        topic_id=TP.topic_id,
        partition=TP.partition,
        segment_id=segment_id,
        start_offset=0,
        end_offset=99,
        leader_epoch=4,
        max_timestamp=10,
        event_timestamp=11,
        segment_leader_epochs=((4, 0),),
        segment_size_in_bytes=4096,
        state=S.COPY_SEGMENT_STARTED,
    )
    finish = RemoteLogSegmentMetadataUpdateRecord(
        topic=TP.topic,
        topic_id=TP.topic_id,
        partition=TP.partition,
        segment_id=segment_id,
        leader_epoch=4,
        event_timestamp=12,
        state=S.COPY_SEGMENT_FINISHED,
    )
    with pytest.raises(InvalidStateTransitionError):
        cache.check(finish)
    cache.check(start)
    cache.apply(start)
    cache.check(finish)
    cache.apply(finish)
    found = cache.segment_for(TP, 50, lineage((4, 0)))
    assert found is not None
    assert found.event_timestamp == 12
    assert found.segment_size_in_bytes == 4096
    assert cache.invalid_transitions == 1


def test_partition_deletion_states() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 9, ((0, 0),)))

    def mark(state: RemotePartitionDeleteState) -> DeletePartitionStateRecord:
        return DeletePartitionStateRecord(
            topic=TP.topic,
            topic_id=TP.topic_id,
            partition=TP.partition,
            epoch=3,
            event_timestamp=5,
            state=state,
        )

    with pytest.raises(InvalidStateTransitionError):
        cache.apply(mark(P.DELETE_PARTITION_STARTED))
    cache.apply(mark(P.DELETE_PARTITION_MARKED))
    cache.apply(mark(P.DELETE_PARTITION_MARKED))  # marked twice: idempotent
    assert cache.delete_status(TP) == PartitionDeleteStatus(
        state=P.DELETE_PARTITION_MARKED, epoch=3, event_timestamp=5
    )
    with pytest.raises(InvalidStateTransitionError):
        cache.apply(mark(P.DELETE_PARTITION_FINISHED))
    cache.apply(mark(P.DELETE_PARTITION_STARTED))
    cache.apply(mark(P.DELETE_PARTITION_FINISHED))
    assert cache.partitions() == []
    assert cache.delete_status(TP) is None
    assert len(cache) == 0
    assert cache.invalid_transitions == 2


def test_lookup_by_name_follows_the_newest_topic_id() -> None:
    cache = RemoteLogMetadataCache()
    old = TopicIdPartition(topic_id=uuid.uuid4(), topic="orders", partition=0)
    new = TopicIdPartition(topic_id=uuid.uuid4(), topic="orders", partition=0)
    copy(cache, seg(0, 9, ((0, 0),), tp=old))
    assert cache.topic_id_partition("orders", 0) == old
    copy(cache, seg(0, 4, ((0, 0),), tp=new))
    assert cache.topic_id_partition("orders", 0) == new
    assert cache.topic_id_partition("orders", 1) is None
    assert cache.topic_id_partition_by_id(old.topic_id, 0) == old
    assert cache.remote_log_end_offset(old) == 9
    assert cache.remote_log_end_offset(new) == 4
    for state in (
        P.DELETE_PARTITION_MARKED,
        P.DELETE_PARTITION_STARTED,
        P.DELETE_PARTITION_FINISHED,
    ):
        cache.update_partition_delete(new, state, epoch=0, event_timestamp=0)
    assert cache.topic_id_partition("orders", 0) == old
    assert set(cache.partitions()) == {old}


def test_segments_lists_every_live_copy_optionally_by_state() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0),), number=1))
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2))
    cache.add_segment(seg(4, 5, ((1, 4),), number=3))
    assert [m.segment_id.id.int for m in cache.segments(TP)] == [1, 2, 3]
    assert [m.segment_id.id.int for m in cache.segments(TP, states=[S.COPY_SEGMENT_STARTED])] == [3]


def test_a_partition_already_held_is_not_restored_in_bulk() -> None:
    """Two snapshot files may name one partition (directories of two topic names with one
    topic id): the second is not filled over the first; the bulk restore declines, changing
    nothing, and the loader restores it segment by segment."""
    entry = stored_entry(7, 0)
    columns = decode_flat_file_columns(
        encode_flat_file(
            FlatFileSnapshot(topic_id=TP.topic_id, metadata_topic_offset=0, entries=(entry,))
        )
    )
    cache = RemoteLogMetadataCache()
    assert cache.restore_columns(TP, columns, None)
    held = cache.segments(TP)
    assert not cache.restore_columns(TP, columns, None, log_start=5)
    assert cache.segments(TP) == held
    assert cache.log_start_offset(TP) == 0
    assert len(cache) == 1
