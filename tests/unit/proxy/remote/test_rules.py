"""Pure rules of the read path: fetch sessions (KIP-227), ListOffsets sentinels and
OffsetForLeaderEpoch answers on KIP-405's leader-epoch scenarios 3-5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.fetch_bodies import FetchPosition
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from proxy.remote.epochs import EpochEndOffset, end_offset
from proxy.remote.offsets import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    BrokerAnswer,
    OffsetQuery,
    RemoteRange,
    answer,
    plan,
)
from proxy.remote.sessions import FetchSessions
from storage.rlmm.cache import RemoteLogMetadataCache
from tests.unit.storage.rlmm.reference import TP, copy, lineage, seg

# -- fetch sessions ------------------------------------------------------------------------


def pos(offset: int, max_bytes: int = 100) -> FetchPosition:
    return FetchPosition(fetch_offset=offset, partition_max_bytes=max_bytes)


A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_sessionless_fetches_cover_the_listed_partitions_only() -> None:
    sessions = FetchSessions(slots=10)
    view = sessions.open(connection_id=1, session_id=0, epoch=-1, listed=[(A, pos(5))])
    assert view is not None
    assert view.client == {A: pos(5)}
    assert not view.incremental
    assert sessions.forwarded(view, {A: pos(5)}) == [(A, pos(5))]
    sessions.answered(view, session_id=0, error=False)
    assert len(sessions) == 0


def test_incremental_fetches_cover_the_whole_session() -> None:
    sessions = FetchSessions(slots=10)
    full = sessions.open(connection_id=1, session_id=0, epoch=0, listed=[(A, pos(5)), (B, pos(7))])
    assert full is not None
    sessions.forwarded(full, full.client)
    sessions.answered(full, session_id=42, error=False)

    step = sessions.open(connection_id=1, session_id=42, epoch=1, listed=[(A, pos(9))])
    assert step is not None and step.incremental
    assert step.client == {A: pos(9), B: pos(7)}
    assert step.listed == (A,)
    assert sessions.forwarded(step, step.client) == [(A, pos(9))]

    step = sessions.open(
        connection_id=1, session_id=42, epoch=2, listed=[(C, pos(1))], forgotten=[B]
    )
    assert step is not None
    assert step.client == {A: pos(9), C: pos(1)}


def test_the_broker_position_is_kept_apart_and_restored() -> None:
    sessions = FetchSessions(slots=10)
    full = sessions.open(connection_id=1, session_id=0, epoch=0, listed=[(A, pos(5)), (B, pos(7))])
    assert full is not None
    probe = pos(100, 1)
    assert sessions.forwarded(full, {A: probe, B: pos(7)}) == [(A, probe), (B, pos(7))]
    sessions.answered(full, session_id=42, error=False)

    # Nothing listed: the broker already holds the probe for A, nothing to send.
    step = sessions.open(connection_id=1, session_id=42, epoch=1, listed=[])
    assert step is not None
    assert step.client == {A: pos(5), B: pos(7)}
    assert sessions.forwarded(step, {A: probe, B: pos(7)}) == []
    # A is served by the broker again: the client's position goes back, unlisted.
    step = sessions.open(connection_id=1, session_id=42, epoch=2, listed=[])
    assert step is not None
    assert sessions.forwarded(step, {A: pos(5), B: pos(7)}) == [(A, pos(5))]
    step = sessions.open(connection_id=1, session_id=42, epoch=3, listed=[])
    assert step is not None
    assert sessions.forwarded(step, step.client) == []


def test_unknown_sessions_and_errors() -> None:
    sessions = FetchSessions(slots=1)
    assert sessions.open(connection_id=1, session_id=9, epoch=3, listed=[]) is None
    first = sessions.open(connection_id=1, session_id=0, epoch=0, listed=[(A, pos(1))])
    assert first is not None
    sessions.forwarded(first, first.client)
    sessions.answered(first, session_id=5, error=False)
    # Sessions belong to a connection.
    assert sessions.open(connection_id=2, session_id=5, epoch=1, listed=[]) is None
    step = sessions.open(connection_id=1, session_id=5, epoch=1, listed=[])
    assert step is not None
    sessions.answered(step, session_id=0, error=True)
    assert sessions.open(connection_id=1, session_id=5, epoch=2, listed=[]) is None
    # Eviction beyond the slots.
    for session in (6, 7):
        view = sessions.open(connection_id=1, session_id=0, epoch=0, listed=[(A, pos(1))])
        assert view is not None
        sessions.forwarded(view, view.client)
        sessions.answered(view, session_id=session, error=False)
    assert sessions.open(connection_id=1, session_id=6, epoch=1, listed=[]) is None
    # Closing (epoch -1) forgets the session.
    close = sessions.open(connection_id=1, session_id=7, epoch=-1, listed=[(A, pos(2))])
    assert close is not None and close.client == {A: pos(2)}
    assert sessions.open(connection_id=1, session_id=7, epoch=1, listed=[]) is None


# -- ListOffsets ---------------------------------------------------------------------------

REMOTE = RemoteRange(
    start=0,
    end=99,
    lineage=(EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=3, start_offset=50)),
)


@pytest.mark.parametrize(
    ("timestamp", "version", "kip", "expected"),
    [
        (LATEST, 1, False, (OffsetQuery.BROKER, LATEST)),
        (EARLIEST, 1, False, (OffsetQuery.EARLIEST, EARLIEST)),
        (MAX_TIMESTAMP, 6, False, (OffsetQuery.EARLIEST_LOCAL, EARLIEST)),
        (MAX_TIMESTAMP, 7, False, (OffsetQuery.BROKER, MAX_TIMESTAMP)),
        (MAX_TIMESTAMP, 7, True, (OffsetQuery.EARLIEST_LOCAL, EARLIEST)),
        (EARLIEST_LOCAL, 7, False, (OffsetQuery.BROKER, EARLIEST_LOCAL)),
        (EARLIEST_LOCAL, 8, False, (OffsetQuery.EARLIEST_LOCAL, EARLIEST)),
        (LATEST_TIERED, 8, False, (OffsetQuery.BROKER, LATEST_TIERED)),
        (LATEST_TIERED, 9, False, (OffsetQuery.LATEST_TIERED, LATEST)),
        (EARLIEST_PENDING_UPLOAD, 10, False, (OffsetQuery.BROKER, EARLIEST_PENDING_UPLOAD)),
        (EARLIEST_PENDING_UPLOAD, 11, False, (OffsetQuery.EARLIEST_PENDING_UPLOAD, LATEST)),
        (0, 1, False, (OffsetQuery.TIMESTAMP, 0)),
        (1_700_000_000_000, 10, False, (OffsetQuery.TIMESTAMP, 1_700_000_000_000)),
    ],
)
def test_sentinels_by_version(
    timestamp: int, version: int, kip: bool, expected: tuple[OffsetQuery, int]
) -> None:
    assert plan(timestamp, version, kip405_minus_3=kip) == expected


def test_earliest_is_the_whole_logs_start() -> None:
    broker = BrokerAnswer(timestamp=-1, offset=60, leader_epoch=3)
    assert answer(OffsetQuery.EARLIEST, broker, REMOTE) == BrokerAnswer(
        timestamp=-1, offset=0, leader_epoch=0
    )
    assert answer(OffsetQuery.EARLIEST, broker, None) == broker
    earlier = BrokerAnswer(timestamp=-1, offset=0, leader_epoch=0)
    later_remote = RemoteRange(start=10, end=99, lineage=REMOTE.lineage)
    assert answer(OffsetQuery.EARLIEST, earlier, later_remote) == earlier


def test_latest_tiered_is_the_remote_end_or_minus_one() -> None:
    broker = BrokerAnswer(timestamp=-1, offset=150, leader_epoch=3)
    assert answer(OffsetQuery.LATEST_TIERED, broker, REMOTE) == BrokerAnswer(
        timestamp=-1, offset=99, leader_epoch=3
    )
    assert answer(OffsetQuery.LATEST_TIERED, broker, None) == BrokerAnswer(
        timestamp=-1, offset=-1, leader_epoch=-1
    )


def test_earliest_pending_upload_follows_kafkas_unified_log() -> None:
    """The broker was asked LATEST: its answer is the last fetchable offset."""
    pending = OffsetQuery.EARLIEST_PENDING_UPLOAD
    latest = BrokerAnswer(timestamp=-1, offset=150, leader_epoch=4)
    # The offset after the tiered range, with the lineage's epoch.
    assert answer(pending, latest, REMOTE) == BrokerAnswer(timestamp=-1, offset=100, leader_epoch=3)
    # Nothing readable tiered, or a gap: everything from the broker's log start is pending.
    assert answer(pending, latest, None, log_start=120) == BrokerAnswer(
        timestamp=-1, offset=120, leader_epoch=-1
    )
    unknown = BrokerAnswer(timestamp=-1, offset=-1, leader_epoch=-1)
    assert answer(pending, latest, None) == unknown  # the broker's log start not learnt
    # Everything below the last fetchable offset is tiered: Kafka answers -1.
    everything = BrokerAnswer(timestamp=-1, offset=100, leader_epoch=3)
    assert answer(pending, everything, REMOTE) == unknown
    # Never tiered: Kafka's answer for a partition without remote storage.
    assert answer(pending, latest, None, tiered=False, log_start=120) == unknown


@given(
    start=st.integers(0, 1_000),
    length=st.integers(0, 1_000),
    latest=st.integers(0, 3_000),
    log_start=st.none() | st.integers(0, 3_000),
    reaches=st.booleans(),
)
def test_earliest_pending_upload_is_below_the_last_fetchable_offset_or_minus_one(
    start: int, length: int, latest: int, log_start: int | None, reaches: bool
) -> None:
    """Kafka's ``ReplicaManager`` answers -1 for an offset not below the last fetchable one;
    an offset the proxy answers is never inside the tiered range."""
    remote = RemoteRange(
        start=start, end=start + length, lineage=(EpochEntry(epoch=0, start_offset=start),)
    )
    broker = BrokerAnswer(timestamp=-1, offset=latest, leader_epoch=0)
    got = answer(
        OffsetQuery.EARLIEST_PENDING_UPLOAD,
        broker,
        remote if reaches else None,
        log_start=log_start,
    )
    assert got.timestamp == -1
    assert got.offset == -1 or got.offset < latest
    if got.offset != -1 and reaches:
        assert got.offset == remote.end + 1
    if got.offset == -1:
        assert got.leader_epoch == -1


def test_timestamps_take_the_earlier_of_remote_and_broker() -> None:
    broker = BrokerAnswer(timestamp=500, offset=120, leader_epoch=3)
    found = BrokerAnswer(timestamp=400, offset=40, leader_epoch=0)
    assert answer(OffsetQuery.TIMESTAMP, broker, REMOTE, found) == found
    assert answer(OffsetQuery.TIMESTAMP, broker, REMOTE, None) == broker
    none = BrokerAnswer(timestamp=-1, offset=-1, leader_epoch=-1)
    assert answer(OffsetQuery.TIMESTAMP, none, REMOTE, found) == found
    late = BrokerAnswer(timestamp=900, offset=130, leader_epoch=0)
    early_broker = BrokerAnswer(timestamp=800, offset=110, leader_epoch=3)
    assert answer(OffsetQuery.TIMESTAMP, early_broker, REMOTE, late) == early_broker
    assert answer(OffsetQuery.EARLIEST_LOCAL, broker, REMOTE) == broker


# -- OffsetForLeaderEpoch on KIP-405's scenarios -----------------------------------------


def ask(epoch: int, broker: tuple[int, int], remote: tuple[EpochEntry, ...]) -> tuple[int, int]:
    result = end_offset(epoch, EpochEndOffset(leader_epoch=broker[0], end_offset=broker[1]), remote)
    return result.leader_epoch, result.end_offset


def test_scenario_3_consumer_at_offset_2_in_epoch_0_is_truncated_to_1() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 1, ((0, 0),), number=1))
    copy(cache, seg(1, 1, ((0, 0), (1, 1)), number=2))
    remote = cache.lineage(TP)
    # Broker B after deleting its local segments up to offset 2 knows only LE-2 from 2.
    assert ask(0, (0, 2), remote) == (0, 1)
    # Epoch 1 is the remote tier's last: it may go on locally, the broker decides.
    assert ask(1, (1, 2), remote) == (1, 2)
    assert ask(2, (2, 3), remote) == (2, 3)


def test_scenario_4_unclean_election() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 2, ((0, 0),), number=1))
    copy(cache, seg(0, 1, ((0, 0), (1, 1)), number=2))
    remote = cache.lineage(TP)
    assert remote == lineage((0, 0), (1, 1))
    # A consumer that read A's offsets 1-2 in LE-0 (position 3) learns LE-0 ended at 1.
    assert ask(0, (0, 2), remote) == (0, 1)


def test_scenario_5_divergence_in_remote_storage() -> None:
    cache = RemoteLogMetadataCache()
    copy(cache, seg(0, 3, ((0, 0),), number=1))
    copy(cache, seg(0, 3, ((0, 0), (1, 2)), number=2))
    copy(cache, seg(4, 5, ((0, 0), (2, 5)), number=3))
    remote = cache.lineage(TP)
    assert remote == lineage((0, 0), (2, 5))
    # Broker A, local log from 6: LE-1 is unknown everywhere but sits between 0 and 2.
    assert ask(1, (1, 6), remote) == (0, 5)
    assert ask(0, (0, 6), remote) == (0, 5)
    assert ask(2, (2, 7), remote) == (2, 7)


def test_the_broker_answer_stands_when_lower_or_without_remote_epochs() -> None:
    remote = lineage((0, 0), (1, 10))
    assert ask(0, (0, 5), remote) == (0, 5)
    assert ask(0, (0, 50), ()) == (0, 50)
    assert ask(-1, (-1, -1), remote) == (-1, -1)
