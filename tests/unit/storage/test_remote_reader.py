"""RemoteLogReader over a real remote tier (segment builder, local-directory RSM, metadata
cache, index and chunk caches): batches, segment choice, transactions, timestamps, errors.

The property tests compare every read with a brute-force reader over the same batches.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.records import (
    Compression,
    ControlType,
    batches_below,
    iter_batches,
    parse_batch_header,
)
from storage.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.remote_reader import (
    OffsetNotInRemoteError,
    RemoteLogReader,
    TimestampAndOffset,
    UnresolvedTransactionError,
)
from storage.rsm.base import RemoteResourceNotFoundError
from storage.rsm.layout import RemoteLayout
from storage.rsm.local import LocalRemoteStorage
from tests.fakes.faulty_storage import FaultyStorage
from tests.fakes.record_batches import BASE_TIMESTAMP, data_batch, marker, record_timestamps
from tests.fakes.tiered_log import TP, TieredLog

# -- brute force ---------------------------------------------------------------------------


def expected_read(
    segments: list[list[bytes]], offset: int, max_bytes: int, max_offset: int | None = None
) -> bytes:
    """Kafka's rule over plain lists: the segment holding ``offset``, whole batches from the
    one holding it, within ``max_bytes`` but at least one, none starting at ``max_offset``."""
    for batches in segments:
        headers = [parse_batch_header(b) for b in batches]
        if headers[-1].last_offset < offset:
            continue
        out = b""
        for batch, header in zip(batches, headers, strict=True):
            if header.last_offset < offset:
                continue
            if max_offset is not None and header.base_offset >= max_offset:
                break
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return out
    raise AssertionError("offset beyond the log")


# -- strategies ----------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[bytes]], list[tuple[int, int]]]:
    """Random segments of random batches (sizes, counts, codecs, timestamps out of order)."""
    specs = draw(
        st.lists(
            st.tuples(
                st.integers(1, 5),
                st.integers(1, 200),
                st.sampled_from([Compression.NONE, Compression.GZIP]),
                st.integers(-50, 50),
            ),
            min_size=1,
            max_size=25,
        )
    )
    batches = []
    offset = 0
    for count, value_size, compression, jitter in specs:
        batches.append(
            data_batch(
                offset,
                count,
                value_size=value_size,
                compression=compression,
                timestamp=BASE_TIMESTAMP + 10 * offset + jitter,
            )
        )
        offset += count
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(batches) - 1)), max_size=5))))
    segments = []
    previous = 0
    for cut in [*cuts, len(batches)]:
        if cut > previous:
            segments.append(batches[previous:cut])
            previous = cut
    return segments, record_timestamps(batches)


async def tier(
    root: Path,
    segments: list[list[bytes]],
    *,
    chunk_bytes: int = 64 * 1024,
    chunk_cache_bytes: int | None = None,
) -> TieredLog:
    log = TieredLog.create(root, chunk_bytes=chunk_bytes, chunk_cache_bytes=chunk_cache_bytes)
    for batches in segments:
        await log.copy(batches)
    return log


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    reads=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 3000)), min_size=1, max_size=8),
    chunk_bytes=st.sampled_from([97, 512, 64 * 1024]),
)
def test_reads_return_what_a_brute_force_reader_returns(
    history: tuple[list[list[bytes]], list[tuple[int, int]]],
    reads: list[tuple[float, int]],
    chunk_bytes: int,
) -> None:
    segments, records = history
    last = records[-1][0]

    async def run(root: Path) -> None:
        log = await tier(root, segments, chunk_bytes=chunk_bytes)
        try:
            for fraction, max_bytes in reads:
                offset = int(fraction * last)
                got = await log.reader.read(TP, offset, max_bytes)
                assert bytes(got.records) == expected_read(segments, offset, max_bytes)
                assert got.aborted == ()
                bound = offset + 3
                # The Fetch interceptor trims a read to the broker's high watermark.
                bounded = batches_below(got.records, bound)
                assert bytes(bounded) == expected_read(segments, offset, max_bytes, bound)
            with pytest.raises(OffsetNotInRemoteError):
                await log.reader.read(TP, last + 1, 100)
        finally:
            await log.close()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), targets=st.lists(st.integers(-100, 300), min_size=1, max_size=6))
def test_timestamp_lookups_find_the_first_record_at_or_after_the_target(
    history: tuple[list[list[bytes]], list[tuple[int, int]]], targets: list[int]
) -> None:
    segments, records = history

    async def run(root: Path) -> None:
        log = await tier(root, segments)
        try:
            for delta in targets:
                target = BASE_TIMESTAMP + delta * 10
                found = await log.reader.find_offset_by_timestamp(TP, target)
                brute = next(((o, t) for o, t in records if t >= target), None)
                if brute is None:
                    assert found is None
                else:
                    assert found == TimestampAndOffset(
                        timestamp=brute[1], offset=brute[0], leader_epoch=0
                    )
        finally:
            await log.close()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root)))


# -- examples ------------------------------------------------------------------------------


async def test_one_read_stays_within_one_segment_and_prefetches_the_next(tmp_path: Path) -> None:
    first = [data_batch(0, 2, value_size=100), data_batch(2, 2, value_size=100)]
    second = [data_batch(4, 2, value_size=100)]
    counters: list[FaultyStorage] = []

    def wrap(inner: LocalRemoteStorage) -> FaultyStorage:
        counters.append(FaultyStorage(inner))
        return counters[0]

    log = TieredLog.create(tmp_path, chunk_bytes=1024, wrap=wrap)
    for batches in (first, second):
        await log.copy(batches)
    try:
        got = await log.reader.read(TP, 1, 1 << 20)
        assert bytes(got.records) == b"".join(first)
        assert got.segment.start_offset == 0
        assert log.chunks.prefetches >= 1
        for _ in range(2):
            await asyncio.sleep(0)  # the prefetch task starts its GET
        assert len(counters[0].log_reads) == 2
        assert bytes((await log.reader.read(TP, 4, 1 << 20)).records) == second[0]
        # One GET per segment: the second read was served by the prefetch (cached or still
        # in flight), not by a GET of its own.
        assert len(counters[0].log_reads) == 2
    finally:
        await log.close()


async def test_a_read_looks_up_each_following_segment_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both of a read's read-aheads into the next segments (before and after it reads) walk
    them; each is looked up in the metadata cache once per read, the read's own lineage."""
    segments = [[data_batch(2 * i, 2, value_size=100)] for i in range(6)]
    log = TieredLog.create(tmp_path, chunk_bytes=1024, prefetch_chunks=4)
    for batches in segments:
        await log.copy(batches)
    lookups: list[int] = []
    segment_for = log.metadata.segment_for

    def counted(
        tp: TopicIdPartition, offset: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None:
        lookups.append(offset)
        return segment_for(tp, offset, lineage)

    monkeypatch.setattr(log.metadata, "segment_for", counted)
    try:
        for offset in range(0, 12, 2):
            lookups.clear()
            got = await log.reader.read(TP, offset, 1 << 20)
            assert bytes(got.records) == segments[offset // 2][0]
            assert lookups[0] == offset
            assert len(lookups) == len(set(lookups))  # each segment once
            assert sorted(lookups) == lookups
    finally:
        await log.close()


class GatedFirstSegment(FaultyStorage):
    """Holds GETs of the segment at offset 0 until ``gate`` is set; records GETs started
    (``two_started`` once there are two)."""

    def __init__(self, inner: LocalRemoteStorage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.two_started = asyncio.Event()
        self.started: list[int] = []

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        self.started.append(metadata.start_offset)
        if len(self.started) >= 2:
            self.two_started.set()
        if metadata.start_offset == 0:
            await self.gate.wait()
        return await super().fetch_log_segment(metadata, start, end)


async def test_the_next_segment_is_read_ahead_while_the_first_read_waits(tmp_path: Path) -> None:
    """A reader's first read and the read-ahead into the next segment GET together, not
    one GET time apart (with 50 ms to the first byte, that was 50 ms per catch-up)."""
    first, second = [data_batch(0, 2, value_size=100)], [data_batch(2, 2, value_size=100)]
    storages: list[GatedFirstSegment] = []

    def wrap(inner: LocalRemoteStorage) -> GatedFirstSegment:
        storages.append(GatedFirstSegment(inner))
        return storages[0]

    log = TieredLog.create(tmp_path, chunk_bytes=1024, prefetch_chunks=2, wrap=wrap)
    for batches in (first, second):
        await log.copy(batches)
    try:
        reading = asyncio.create_task(log.reader.read(TP, 0, 1 << 20))
        async with asyncio.timeout(10):  # a bound on a hang, not a timing assertion
            await storages[0].two_started.wait()
        assert storages[0].started == [0, 2]
        assert not reading.done()
        storages[0].gate.set()
        assert bytes((await reading).records) == first[0]
    finally:
        storages[0].gate.set()
        await log.close()


async def test_a_fetch_offset_below_the_remote_start_reads_from_the_start(tmp_path: Path) -> None:
    log = await tier(tmp_path, [[data_batch(10, 2), data_batch(12, 2)]])
    try:
        assert bytes((await log.reader.read(TP, 11, 0)).records) == data_batch(10, 2)
        with pytest.raises(OffsetNotInRemoteError):
            await log.reader.read(TP, 3, 100)
        other = TopicIdPartition(topic_id=uuid.uuid4(), topic="other", partition=0)
        with pytest.raises(OffsetNotInRemoteError):
            await log.reader.read(other, 10, 100)
    finally:
        await log.close()


async def test_the_copy_the_lineage_names_is_read_not_a_truncated_leaders(tmp_path: Path) -> None:
    """KIP-405 scenario 3: offset 1 was msg 1 in epoch 0 (lost) and is msg 3 in epoch 1."""
    log = TieredLog.create(tmp_path)
    try:
        stale = [data_batch(0, 1, epoch=0, value_size=1), data_batch(1, 1, epoch=0, value_size=2)]
        await log.copy(stale)
        log.lineage = (EpochEntry(epoch=0, start_offset=0),)
        current = [data_batch(1, 1, epoch=1, value_size=3)]
        await log.copy(current)
        lineage = (EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=1, start_offset=1))
        assert bytes((await log.reader.read(TP, 1, 100, lineage=lineage)).records) == current[0]
        assert bytes((await log.reader.read(TP, 0, 1 << 20, lineage=lineage)).records) == stale[0]
        assert bytes((await log.reader.read(TP, 1, 100)).records) == current[0]
    finally:
        await log.close()


async def test_a_segment_deleted_after_lookup_raises_not_found(tmp_path: Path) -> None:
    log = await tier(tmp_path, [[data_batch(0, 3)]], chunk_cache_bytes=0)
    try:
        await log.reader.read(TP, 0, 100)  # warms the offset index; chunks are not kept
        await log.rsm.delete_log_segment(log.segments[0])
        with pytest.raises(RemoteResourceNotFoundError):
            await log.reader.read(TP, 0, 100)
    finally:
        await log.close()


class MissingRecorder:
    """A :class:`~storage.remote_reader.MissingObjectReport` that keeps what it is told."""

    def __init__(self) -> None:
        self.found: list[tuple[RemoteLogSegmentMetadata, str]] = []

    def object_missing(self, segment: RemoteLogSegmentMetadata, key: str) -> None:
        self.found.append((segment, key))


async def test_a_missing_object_of_a_listed_segment_is_reported_and_raised(
    tmp_path: Path,
) -> None:
    log = await tier(tmp_path, [[data_batch(0, 3)], [data_batch(3, 3)]], chunk_cache_bytes=0)
    missing = MissingRecorder()
    reader = RemoteLogReader(
        metadata=log.metadata, indexes=log.indexes, chunks=log.chunks, missing=missing
    )
    try:
        await reader.read(TP, 3, 100)  # warms the second segment's offset index
        gone = log.segments[1]
        (tmp_path / RemoteLayout().log_key(gone)).rename(tmp_path / "moved-away")
        with pytest.raises(RemoteResourceNotFoundError):
            await reader.read(TP, 3, 100)
        assert missing.found == [(gone, str(tmp_path / RemoteLayout().log_key(gone)))]
        with pytest.raises(RemoteResourceNotFoundError):
            await reader.find_offset_by_timestamp(TP, BASE_TIMESTAMP + 4)
        assert len(missing.found) == 2
        assert [s.segment_id for s, _ in missing.found] == [gone.segment_id] * 2
        (tmp_path / "moved-away").rename(tmp_path / RemoteLayout().log_key(gone))
        assert bytes((await reader.read(TP, 3, 100)).records) == data_batch(3, 3)
    finally:
        await log.close()


async def test_a_segment_that_retention_deleted_meanwhile_is_not_reported_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deletes a segment's objects after DELETE_SEGMENT_STARTED: a read that
    looked it up just before finds it gone, which is no missing object."""
    log = await tier(tmp_path, [[data_batch(0, 3)]], chunk_cache_bytes=0)
    missing = MissingRecorder()
    reader = RemoteLogReader(
        metadata=log.metadata, indexes=log.indexes, chunks=log.chunks, missing=missing
    )
    try:
        await log.rsm.delete_log_segment(log.segments[0])
        # The deletion's record is applied between the read's lookup and its GET.
        monkeypatch.setattr(
            log.metadata, "segment_state", lambda _id: RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        )
        with pytest.raises(RemoteResourceNotFoundError):
            await reader.read(TP, 0, 100)
        assert missing.found == []
    finally:
        await log.close()


async def test_read_committed_collects_aborts_from_later_segments(tmp_path: Path) -> None:
    pid_aborted, pid_committed = 7, 8
    segments = [
        [
            data_batch(0, 2, producer_id=pid_aborted, transactional=True),
            data_batch(2, 2, producer_id=pid_committed, transactional=True),
        ],
        [
            marker(4, pid_committed, ControlType.COMMIT),
            data_batch(5, 1),
        ],
        [
            marker(6, pid_aborted, ControlType.ABORT),
            data_batch(7, 1),
        ],
    ]
    log = await tier(tmp_path, segments)
    try:
        got = await log.reader.read(TP, 0, 1 << 20, read_committed=True)
        assert bytes(got.records) == b"".join(segments[0])
        assert [(t.producer_id, t.first_offset) for t in got.aborted] == [(pid_aborted, 0)]
        uncommitted = await log.reader.read(TP, 0, 1 << 20)
        assert uncommitted.aborted == ()
        after = await log.reader.read(TP, 7, 1 << 20, read_committed=True)
        assert after.aborted == ()
    finally:
        await log.close()


async def test_read_committed_stops_before_a_transaction_open_at_the_remote_end(
    tmp_path: Path,
) -> None:
    pid = 9
    segments = [
        [data_batch(0, 2), data_batch(2, 2, producer_id=pid, transactional=True)],
        [data_batch(4, 1, producer_id=pid, transactional=True)],
    ]
    log = await tier(tmp_path, segments)
    try:
        got = await log.reader.read(TP, 0, 1 << 20, read_committed=True)
        assert bytes(got.records) == data_batch(0, 2)
        assert got.aborted == ()
        with pytest.raises(UnresolvedTransactionError):
            await log.reader.read(TP, 2, 1 << 20, read_committed=True)
        with pytest.raises(UnresolvedTransactionError):
            await log.reader.read(TP, 4, 1 << 20, read_committed=True)
        # READ_UNCOMMITTED readers need no outcome.
        assert bytes((await log.reader.read(TP, 2, 1 << 20)).records) == segments[0][1]
    finally:
        await log.close()


@pytest.mark.parametrize("compression", list(Compression))
async def test_timestamps_inside_compressed_batches(
    tmp_path: Path, compression: Compression
) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, delta in enumerate([5, 1, 9, 3]):
        builder.append(i, timestamp=BASE_TIMESTAMP + delta, key=None, value=b"v" * 50, headers=[])
    raw = bytearray(builder.build())
    raw[12:16] = (0).to_bytes(4, "big")  # partition leader epoch 0, as a broker would set
    raw[17:21] = crc32c.crc32c(bytes(raw[21:])).to_bytes(4, "big")
    batch = bytes(raw)
    assert parse_batch_header(batch).compression is compression
    log = await tier(tmp_path, [[batch]])
    try:
        found = await log.reader.find_offset_by_timestamp(TP, BASE_TIMESTAMP + 6)
        assert found == TimestampAndOffset(timestamp=BASE_TIMESTAMP + 9, offset=2, leader_epoch=0)
        found = await log.reader.find_offset_by_timestamp(TP, BASE_TIMESTAMP + 2)
        assert found == TimestampAndOffset(timestamp=BASE_TIMESTAMP + 5, offset=0, leader_epoch=0)
        assert await log.reader.find_offset_by_timestamp(TP, BASE_TIMESTAMP + 10) is None
    finally:
        await log.close()


@st.composite
def divergent_histories(draw: st.DrawFn) -> dict[str, Any]:
    """A log whose leader changed from epoch 0 to epoch 2 at offset ``d``, plus the copy of a
    truncated leader of epoch 1 that wrote its own records from ``d`` (KIP-405 scenarios
    4-5), uploaded before or after the real segments."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=4, max_size=14))
    split = draw(st.integers(1, len(sizes) - 1))
    true_batches, offset = [], 0
    for n, count in enumerate(sizes):
        epoch = 0 if n < split else 2
        true_batches.append(data_batch(offset, count, epoch=epoch, value_size=20 + 7 * n))
        offset += count
    divergence = parse_batch_header(true_batches[split]).base_offset
    stale_from = draw(st.integers(0, split - 1))
    stale = [
        *true_batches[stale_from:split],
        data_batch(divergence, 3, epoch=1, value_size=11),
        data_batch(divergence + 3, 2, epoch=1, value_size=13),
    ]
    # Sometimes the real segments before the divergence are gone and only the truncated
    # leader's copy holds those offsets (scenario 5): it must be read only up to ``d``.
    only_stale_before = draw(st.booleans())
    first = split if only_stale_before else 0
    cuts = sorted(set(draw(st.lists(st.integers(first + 1, len(true_batches)), max_size=4))))
    segments, previous = [], first
    for cut in [*cuts, len(true_batches)]:
        if cut > previous:
            segments.append(true_batches[previous:cut])
            previous = cut
    return {
        "first_offset": parse_batch_header(
            true_batches[stale_from if only_stale_before else 0]
        ).base_offset,
        "true": true_batches,
        "segments": segments,
        "stale": stale,
        "stale_first": draw(st.booleans()),
        "reads": draw(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 500)), max_size=8)),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=divergent_histories())
def test_reads_never_return_a_truncated_leaders_records(history: dict[str, Any]) -> None:
    true_log = b"".join(history["true"])
    starts, position = {}, 0
    for batch in history["true"]:
        header = parse_batch_header(batch)
        for o in range(header.base_offset, header.last_offset + 1):
            starts[o] = position
        position += len(batch)
    boundaries = {0, *starts.values(), len(true_log)}
    last = parse_batch_header(history["true"][-1]).last_offset

    async def copy_stale(log: TieredLog) -> None:
        saved = (log.lineage, log.producers)
        log.lineage, log.producers = (EpochEntry(epoch=0, start_offset=0),), ()
        await log.copy(history["stale"])
        log.lineage, log.producers = saved

    async def run(root: Path) -> None:
        log = TieredLog.create(root)
        try:
            if history["stale_first"]:
                await copy_stale(log)
            for batches in history["segments"]:
                await log.copy(batches)
            if not history["stale_first"]:
                await copy_stale(log)
            low = history["first_offset"]
            everywhere = [((o - low) / max(last - low, 1), 1 << 20) for o in range(low, last + 1)]
            for fraction, max_bytes in [*everywhere, *history["reads"]]:
                offset = low + round(fraction * (last - low))
                got = (await log.reader.read(TP, offset, max_bytes)).records
                start = starts[offset]
                # A run of the true log's batches from the one holding the offset.
                assert got, offset
                assert true_log[start : start + len(got)] == bytes(got), offset
                assert start + len(got) in boundaries
                assert len(got) <= max_bytes or len(list(iter_batches(got))) == 1
        finally:
            await log.close()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root)))
