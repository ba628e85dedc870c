"""SegmentBuilder on synthetic partitions: every file checked against brute force.

The partitions mix plain batches, idempotent producers and interleaved transactional
producers that commit and abort, with gzip batches, leader-epoch bumps and timestamps that
go backwards. The expected files are derived here independently of the builder: offset and
time index entries from LogSegment.recover's rule and from what a lookup must guarantee,
aborted transactions by scanning the event list, producer state by replaying it.

The synthetic partitions come from :mod:`tests.fakes.synthetic_partition`; the brute-force
helpers (``brute_*``, ``check_*``) are also used by the reader tests and the broker
integration test.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.indexes.leader_epoch_checkpoint import (
    EpochEntry,
    entries_in_range,
    parse_leader_epoch_checkpoint,
)
from protocol.indexes.offset_index import OffsetIndex
from protocol.indexes.producer_snapshot import parse_producer_snapshot
from protocol.indexes.time_index import TimeIndex
from protocol.indexes.transaction_index import AbortedTxn, parse_transaction_index
from protocol.records import (
    ControlType,
    Record,
    build_control_batch,
    build_record_batch,
)
from storage.segment.builder import BuiltSegment, SegmentBuilder, SegmentBuildError
from tests.fakes.synthetic_partition import Batch, parsed_batches, partitions, synthetic_partition

# ---------------------------------------------------------------------------------------
# Brute force


def brute_offset_entries(batches: list[Batch], interval: int) -> list[tuple[int, int]]:
    """LogSegment.recover: an entry before a batch starting > interval past the last one."""
    entries, last = [], 0
    for b in batches:
        if b.position - last > interval:
            entries.append((b.header.last_offset, b.position))
            last = b.position
    return entries


def check_offset_index(index: OffsetIndex, batches: list[Batch], interval: int) -> None:
    """Entries follow the rule, and every lookup leads a forward scan to its batch."""
    assert [(e.offset, e.position) for e in index.entries()] == brute_offset_entries(
        batches, interval
    )
    first, last = batches[0].header.base_offset, batches[-1].header.last_offset
    for target in range(first - 1, last + 2):
        found = index.lookup(target)
        holder = next((b for b in batches if b.header.last_offset >= target), None)
        starts = [b.position for b in batches]
        assert found.position in starts
        if holder is not None:
            assert found.position <= holder.position
        assert found.offset <= max(target, index.base_offset)


def check_time_index(index: TimeIndex, batches: list[Batch]) -> None:
    """Every entry is (max timestamp so far, its batch's last offset), and a time lookup
    never skips a batch holding a timestamp at or above the target."""
    running, maxima = -1, {}
    for b in batches:
        running = max(running, b.header.max_timestamp)
        maxima[b.header.last_offset] = running
    entries = index.entries()
    assert [e.timestamp for e in entries] == sorted({e.timestamp for e in entries})
    for e in entries:
        assert maxima[e.offset] == e.timestamp
    if running >= 0:
        assert index.last_entry.timestamp == running
    timestamps = sorted({b.header.max_timestamp for b in batches})
    for target in [timestamps[0] - 1, *timestamps, timestamps[-1] + 1]:
        found = index.lookup(target)
        first_at_or_above = next((b for b in batches if b.header.max_timestamp >= target), None)
        if first_at_or_above is not None:
            assert found.offset <= first_at_or_above.header.last_offset
        assert found.timestamp <= target


def brute_aborted(batches: list[Batch]) -> list[AbortedTxn]:
    """Aborted transactions by scanning: each producer's txn starts at its first
    transactional batch after its previous marker; the LSO is the oldest other open txn."""

    def open_txn_start(pid: int, before: int) -> int | None:
        start = None
        for b in batches[:before]:
            if b.header.producer_id != pid:
                continue
            if b.control is not None:
                start = None
            elif b.header.is_transactional and start is None:
                start = b.header.base_offset
        return start

    aborted = []
    pids = {b.header.producer_id for b in batches if b.header.producer_id >= 0}
    for i, b in enumerate(batches):
        if b.control is not ControlType.ABORT:
            continue
        pid = b.header.producer_id
        first = open_txn_start(pid, i)
        if first is None:
            continue
        others = [s for q in pids - {pid} if (s := open_txn_start(q, i)) is not None]
        aborted.append(
            AbortedTxn(
                producer_id=pid,
                first_offset=first,
                last_offset=b.header.base_offset,
                last_stable_offset=min(others, default=b.header.base_offset + 1),
            )
        )
    return aborted


def brute_lineage(batches: list[Batch], prior: list[EpochEntry]) -> list[EpochEntry]:
    lineage = list(prior)
    for b in batches:
        epoch = b.header.partition_leader_epoch
        if epoch >= 0 and (not lineage or epoch > lineage[-1].epoch):
            lineage.append(EpochEntry(epoch=epoch, start_offset=b.header.base_offset))
    return lineage


def build_in_chunks(log: bytes, seed: int, *, index_interval_bytes: int = 4096) -> BuiltSegment:
    """Feed ``log`` in random pieces, refetching from ``next_offset`` after a partial batch."""
    batches = parsed_batches(log)
    base = batches[0].header.base_offset
    builder = SegmentBuilder(base_offset=base, index_interval_bytes=index_interval_bytes)
    rng = random.Random(seed)
    reach = 0
    while builder.size_in_bytes < len(log):
        start = builder.size_in_bytes
        reach = max(reach, rng.randint(1, 9000))
        builder.append(log[start : start + reach])
        # A fetch that returned no whole batch is retried with a larger limit, as the
        # pipeline would; otherwise the limit starts afresh.
        reach = reach * 2 if builder.size_in_bytes == start else 0
        assert builder.next_offset == next(
            (b.header.base_offset for b in batches if b.position >= builder.size_in_bytes),
            batches[-1].header.next_offset,
        )
    return builder.finish()


# ---------------------------------------------------------------------------------------
# Properties


@settings(deadline=None)
@given(partitions, st.integers(0, 2**32), st.sampled_from([0, 100, 1000, 4096]))
def test_segment_files_match_brute_force(log: bytes, seed: int, interval: int) -> None:
    built = build_in_chunks(log, seed, index_interval_bytes=interval)
    batches = parsed_batches(log)
    base = batches[0].header.base_offset
    assert built.data.log == log
    assert built.size_in_bytes == len(log)
    assert (built.start_offset, built.end_offset) == (base, batches[-1].header.last_offset)
    assert built.max_timestamp == max(b.header.max_timestamp for b in batches)
    check_offset_index(OffsetIndex(built.data.offset_index, base_offset=base), batches, interval)
    check_time_index(TimeIndex(built.data.time_index, base_offset=base), batches)
    assert list(parse_transaction_index(built.data.transaction_index)) == brute_aborted(batches)
    assert list(built.aborted_txns) == brute_aborted(batches)
    lineage = brute_lineage(batches, [])
    assert list(parse_leader_epoch_checkpoint(built.data.leader_epoch_checkpoint)) == lineage
    assert built.segment_leader_epochs == tuple(
        (e.epoch, e.start_offset)
        for e in entries_in_range(lineage, base, batches[-1].header.next_offset)
    )
    assert parse_producer_snapshot(built.data.producer_snapshot) == built.producers


@settings(deadline=None)
@given(partitions, st.data())
def test_split_segments_carry_transactions_and_epochs(log: bytes, data: st.DataObject) -> None:
    """Two consecutive segments built with the first's state equal one segment."""
    batches = parsed_batches(log)
    cut = data.draw(st.integers(1, len(batches))) if len(batches) > 1 else 1
    whole = build_in_chunks(log, 0, index_interval_bytes=4096)
    head = SegmentBuilder(base_offset=batches[0].header.base_offset)
    head.append(b"".join(b.data for b in batches[:cut]))
    first = head.finish()
    if cut == len(batches):
        assert first.data == whole.data
        return
    tail = SegmentBuilder(
        base_offset=batches[cut].header.base_offset,
        prior_epochs=first.lineage,
        prior_producers=first.producers,
    )
    tail.append(b"".join(b.data for b in batches[cut:]))
    second = tail.finish()
    assert first.aborted_txns + second.aborted_txns == whole.aborted_txns
    assert second.lineage == whole.lineage
    assert second.producers == whole.producers
    assert second.data.producer_snapshot == whole.data.producer_snapshot


# ---------------------------------------------------------------------------------------
# Fixed cases


def data_batch(
    offset: int, *, pid: int = -1, txn: bool = False, epoch: int = 0, n: int = 1
) -> bytes:
    return build_record_batch(
        base_offset=offset,
        records=[Record(value=b"v", timestamp=1000 + offset) for _ in range(n)],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=txn,
        partition_leader_epoch=epoch,
    )


def marker(offset: int, pid: int, kind: ControlType, *, epoch: int = 0) -> bytes:
    return build_control_batch(
        base_offset=offset,
        control_type=kind,
        producer_id=pid,
        producer_epoch=0,
        timestamp=1000 + offset,
        coordinator_epoch=7,
        partition_leader_epoch=epoch,
    )


def test_interleaved_transactions() -> None:
    """Producers 1 and 2 interleave; 1 aborts while 2 is open, then 2 commits, 3 aborts."""
    log = b"".join(
        [
            data_batch(0, pid=1, txn=True),
            data_batch(1, pid=2, txn=True),
            data_batch(2),
            data_batch(3, pid=1, txn=True, n=2),
            marker(5, 1, ControlType.ABORT),
            data_batch(6, pid=3, txn=True),
            marker(7, 2, ControlType.COMMIT),
            marker(8, 3, ControlType.ABORT),
            marker(9, 3, ControlType.ABORT),
        ]
    )
    builder = SegmentBuilder(base_offset=0)
    builder.append(log)
    built = builder.finish()
    assert built.aborted_txns == (
        AbortedTxn(producer_id=1, first_offset=0, last_offset=5, last_stable_offset=1),
        AbortedTxn(producer_id=3, first_offset=6, last_offset=8, last_stable_offset=9),
    )
    snapshot = {e.producer_id: e for e in built.producers}
    assert snapshot.keys() == {1, 2, 3}
    assert snapshot[1].last_offset == 4
    assert snapshot[1].offset_delta == 1
    assert snapshot[1].last_sequence == 1
    assert snapshot[1].coordinator_epoch == 7
    assert snapshot[1].timestamp == 1005
    assert all(e.current_txn_first_offset == -1 for e in built.producers)


def test_transaction_started_in_an_earlier_segment() -> None:
    first = SegmentBuilder(base_offset=0)
    first.append(data_batch(0, pid=5, txn=True) + data_batch(1, pid=6, txn=True))
    head = first.finish()
    assert {e.producer_id: e.current_txn_first_offset for e in head.producers} == {5: 0, 6: 1}
    second = SegmentBuilder(base_offset=2, prior_producers=head.producers)
    second.append(marker(2, 5, ControlType.ABORT))
    assert second.finish().aborted_txns == (
        AbortedTxn(producer_id=5, first_offset=0, last_offset=2, last_stable_offset=1),
    )
    without_state = SegmentBuilder(base_offset=2)
    without_state.append(marker(2, 5, ControlType.ABORT))
    assert without_state.finish().aborted_txns == ()


def test_leader_epochs_and_lineage() -> None:
    prior = [EpochEntry(epoch=1, start_offset=0), EpochEntry(epoch=3, start_offset=50)]
    builder = SegmentBuilder(base_offset=100, prior_epochs=prior)
    builder.append(data_batch(100, epoch=3) + data_batch(101, epoch=5) + data_batch(102, epoch=4))
    built = builder.finish()
    assert built.segment_leader_epochs == ((3, 100), (5, 101))
    assert built.lineage == (*prior, EpochEntry(epoch=5, start_offset=101))
    assert built.data.leader_epoch_checkpoint == b"0\n3\n1 0\n3 50\n5 101\n"


def test_prior_lineage_beyond_the_segment_is_cut() -> None:
    prior = [EpochEntry(epoch=1, start_offset=0), EpochEntry(epoch=9, start_offset=500)]
    builder = SegmentBuilder(base_offset=10, prior_epochs=prior)
    builder.append(data_batch(10, epoch=1))
    assert builder.finish().lineage == (EpochEntry(epoch=1, start_offset=0),)


def test_first_batch_may_start_before_the_base_offset() -> None:
    builder = SegmentBuilder(base_offset=12, index_interval_bytes=0)
    builder.append(data_batch(10, n=5) + data_batch(15))
    built = builder.finish()
    assert (built.start_offset, built.end_offset) == (12, 15)
    index = OffsetIndex(built.data.offset_index, base_offset=12)
    assert [(e.offset, e.position) for e in index.entries()] == [(15, len(data_batch(10, n=5)))]


def test_idle_producers_expire_from_the_snapshot() -> None:
    old = build_record_batch(
        base_offset=0,
        records=[Record(value=b"", timestamp=0)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )
    open_txn = build_record_batch(
        base_offset=1,
        records=[Record(value=b"", timestamp=0)],
        producer_id=2,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    recent = build_record_batch(
        base_offset=2,
        records=[Record(value=b"", timestamp=10_000)],
        producer_id=3,
        producer_epoch=0,
        base_sequence=0,
    )
    builder = SegmentBuilder(base_offset=0, producer_id_expiration_ms=5_000)
    builder.append(old + open_txn + recent)
    assert [e.producer_id for e in builder.finish().producers] == [2, 3]


@pytest.mark.parametrize(
    ("log", "message"),
    [
        (data_batch(0) + data_batch(2), "gap"),
        (data_batch(0, n=3) + data_batch(2), "overlap"),
        (data_batch(1), "base offset 0"),
        (data_batch(0, pid=1, txn=True) + data_batch(1, pid=1), "non-transactional"),
    ],
    ids=["gap", "overlap", "first-batch", "txn-state"],
)
def test_refused_input(log: bytes, message: str) -> None:
    builder = SegmentBuilder(base_offset=0)
    with pytest.raises(SegmentBuildError, match=message) as caught:
        builder.append(log)
    assert caught.value.offset is not None
    with pytest.raises(SegmentBuildError, match="earlier append"):
        builder.append(data_batch(0))
    with pytest.raises(SegmentBuildError):
        builder.finish()


def test_crc_mismatch_names_offset_and_position() -> None:
    good = data_batch(0)
    bad = bytearray(data_batch(1))
    bad[-1] ^= 0xFF
    builder = SegmentBuilder(base_offset=0)
    with pytest.raises(SegmentBuildError, match="CRC") as caught:
        builder.append(good + bytes(bad))
    assert (caught.value.offset, caught.value.position) == (1, len(good))


def test_legacy_and_corrupt_batches_are_refused() -> None:
    legacy = bytearray(data_batch(0))
    legacy[16] = 1
    with pytest.raises(SegmentBuildError, match="legacy"):
        SegmentBuilder(base_offset=0).append(bytes(legacy))
    corrupt = bytearray(data_batch(0))
    corrupt[8:12] = (5).to_bytes(4, "big")
    with pytest.raises(SegmentBuildError, match="corrupt"):
        SegmentBuilder(base_offset=0).append(bytes(corrupt))


def test_offsets_beyond_relative_int32_are_refused() -> None:
    wide = build_record_batch(
        base_offset=0, records=[Record(value=b"", timestamp=0, offset_delta=2**31 - 2)]
    )
    builder = SegmentBuilder(base_offset=0)
    builder.append(wide)
    with pytest.raises(SegmentBuildError, match="32-bit"):
        builder.append(data_batch(2**31 - 1, n=2))


def test_nothing_to_build() -> None:
    builder = SegmentBuilder(base_offset=0)
    builder.append(data_batch(0)[:30])
    assert builder.next_offset == 0
    with pytest.raises(SegmentBuildError, match="no valid batches"):
        builder.finish()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="negative"):
        SegmentBuilder(base_offset=-1)


def test_random_chunking_gives_identical_files() -> None:
    log = synthetic_partition(7, 60)
    results = {build_in_chunks(log, seed).data for seed in range(5)}
    assert len(results) == 1
    whole = SegmentBuilder(base_offset=0)
    whole.append(log)
    assert results == {whole.finish().data}


def test_a_segment_of_one_chunk_is_that_chunk_without_a_copy() -> None:
    """Every copy of segment bytes costs CPU per GiB: the copy task hands the builder its
    mapped spill file, and a segment from one chunk must be uploaded from it as is."""
    log = synthetic_partition(7, 20)
    chunk = bytearray(log) + b"\x00\x00\x00"  # a partial batch header after the whole ones
    builder = SegmentBuilder(base_offset=parsed_batches(log)[0].header.base_offset)
    builder.append(chunk)
    built = builder.finish()
    assert isinstance(built.data.log, memoryview)
    assert built.data.log.obj is chunk
    assert built.data.log == log
