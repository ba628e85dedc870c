"""Segment reader: random targets and budgets over random segments equal a brute-force read."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.buffers import Buffers
from protocol.indexes.offset_index import OffsetIndex
from protocol.records import CorruptRecordBatchError
from storage.segment.builder import SegmentBuilder
from storage.segment.reader import BatchRange, NeedBytes, locate_batches, read_batches
from tests.fakes.synthetic_partition import Batch, parsed_batches, partitions, synthetic_partition


def brute_read(batches: list[Batch], target: int, max_bytes: int) -> bytes:
    """From the first batch ending at or after ``target``, whole batches within the budget,
    at least one."""
    out: list[bytes] = []
    size = 0
    for b in batches:
        if b.header.last_offset < target:
            continue
        if out and size + len(b.data) > max_bytes:
            break
        out.append(b.data)
        size += len(b.data)
    return b"".join(out)


class Log:
    """A ranged-read fake over a segment's bytes that records each request."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    async def fetch(self, start: int, end: int) -> bytes:
        assert 0 <= start <= end <= len(self.data)
        self.reads.append((start, end))
        return self.data[start:end]


def segment(log: bytes, interval: int) -> tuple[OffsetIndex, int]:
    batches = parsed_batches(log)
    builder = SegmentBuilder(
        base_offset=batches[0].header.base_offset, index_interval_bytes=interval
    )
    builder.append(log)
    built = builder.finish()
    return OffsetIndex(built.data.offset_index, base_offset=built.start_offset), built.size_in_bytes


reads = (partitions, st.sampled_from([0, 500, 4096]), st.integers(-2, 250), st.integers(0, 40_000))
"""A segment's batches, its index interval, a target offset and a byte budget."""


@settings(deadline=None)
@given(*reads, st.sampled_from([0, 100, 8192]))
async def test_reads_match_brute_force(
    log: bytes, interval: int, target: int, max_bytes: int, read_ahead: int
) -> None:
    index, size = segment(log, interval)
    store = Log(log)
    got = await read_batches(
        fetch=store.fetch,
        offset_index=index,
        target_offset=target,
        max_bytes=max_bytes,
        segment_size=size,
        read_ahead_bytes=read_ahead,
    )
    batches = parsed_batches(log)
    assert bytes(got) == brute_read(batches, target, max_bytes)
    # The target's batch starts at most one index interval plus one batch after the
    # indexed position: with that much read-ahead, only a straddling batch costs a read.
    if read_ahead >= interval + max(len(b.data) for b in batches):
        assert len(store.reads) <= 2


class ChunkedLog:
    """:class:`Log` answering in pieces cut at multiples of ``chunk``, each a view of a
    buffer of its own, as the chunk cache answers a read across chunks."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data = data
        self.chunk = chunk
        self.reads: list[tuple[int, int]] = []

    async def fetch(self, start: int, end: int) -> memoryview | Buffers:
        self.reads.append((start, end))
        cuts = range((start // self.chunk + 1) * self.chunk, end, self.chunk)
        bounds = [start, *cuts, end]
        parts = tuple(memoryview(bytearray(self.data[a:b])) for a, b in pairwise(bounds))
        return Buffers.of(parts)


async def default_read(
    store: Log | ChunkedLog, index: OffsetIndex, target: int, max_bytes: int, size: int
) -> memoryview | Buffers:
    """:func:`read_batches` of ``store`` with the default read-ahead."""
    return await read_batches(
        fetch=store.fetch,
        offset_index=index,
        target_offset=target,
        max_bytes=max_bytes,
        segment_size=size,
    )


@settings(deadline=None)
@given(*reads, st.integers(1, 5000))
async def test_reads_in_pieces_equal_reads_of_the_joined_bytes(
    log: bytes, interval: int, target: int, max_bytes: int, chunk: int
) -> None:
    """Whatever the chunk boundaries (batch headers straddling them included), a read whose
    fetches answer in pieces returns the bytes and the round trips of a contiguous one."""
    index, size = segment(log, interval)
    joined, chunked = Log(log), ChunkedLog(log, chunk)
    expected = await default_read(joined, index, target, max_bytes, size)
    got = await default_read(chunked, index, target, max_bytes, size)
    assert bytes(got) == bytes(expected)
    assert chunked.reads == joined.reads


@settings(deadline=None)
@given(partitions, st.integers(0, 250), st.integers(0, 40_000))
async def test_a_default_read_needs_one_round_trip_when_it_fits(
    log: bytes, target: int, max_bytes: int
) -> None:
    """With Kafka's index interval and batches below it, the first window suffices."""
    batches = parsed_batches(log)
    index, size = segment(log, 4096)
    store = Log(log)
    await default_read(store, index, target, max_bytes, size)
    holder = next((b for b in batches if b.header.last_offset >= target), None)
    if all(len(b.data) <= 4096 for b in batches) and (
        holder is None or len(holder.data) <= max_bytes
    ):
        assert len(store.reads) == 1


async def test_reads_stop_at_the_segment_size() -> None:
    log = _log()
    batches = parsed_batches(log)
    cut = batches[3].position
    index, _ = segment(log, 0)
    store = Log(log)
    got = await read_batches(
        fetch=store.fetch,
        offset_index=index,
        target_offset=batches[1].header.base_offset,
        max_bytes=10**9,
        segment_size=cut,
    )
    assert bytes(got) == log[batches[1].position : cut]
    assert all(end <= cut for _start, end in store.reads)


async def test_a_short_object_ends_the_segment() -> None:
    log = _log()
    batches = parsed_batches(log)
    index, size = segment(log, 0)

    async def short_fetch(start: int, end: int) -> bytes:
        return log[start : min(end, batches[2].position + 10)]

    got = await read_batches(
        fetch=short_fetch,
        offset_index=index,
        target_offset=0,
        max_bytes=10**9,
        segment_size=size,
    )
    assert bytes(got) == log[: batches[2].position]


async def test_target_beyond_the_segment_reads_nothing() -> None:
    log = _log()
    index, size = segment(log, 0)
    last = parsed_batches(log)[-1].header.last_offset
    got = await read_batches(
        fetch=Log(log).fetch,
        offset_index=index,
        target_offset=last + 1,
        max_bytes=100,
        segment_size=size,
    )
    assert not got


async def test_negative_budget_is_refused() -> None:
    log = _log()
    index, size = segment(log, 0)
    with pytest.raises(ValueError, match="max_bytes"):
        await read_batches(
            fetch=Log(log).fetch,
            offset_index=index,
            target_offset=0,
            max_bytes=-1,
            segment_size=size,
        )


def test_locate_asks_for_the_rest_of_a_straddling_batch() -> None:
    log = _log()
    first = parsed_batches(log)[0]
    found = locate_batches(log[:100], 0, target_offset=0, max_bytes=0, segment_size=len(log))
    assert found == NeedBytes(start=100, end=first.header.size)
    assert locate_batches(
        log[: first.header.size], 0, target_offset=0, max_bytes=0, segment_size=len(log)
    ) == BatchRange(start=0, end=first.header.size)


def test_locate_skips_unneeded_bytes() -> None:
    log = _log()
    batches = parsed_batches(log)
    target = batches[2].header.base_offset
    found = locate_batches(
        log[:61], 0, target_offset=target, max_bytes=50, segment_size=len(log), read_ahead_bytes=9
    )
    assert found == NeedBytes(start=batches[1].position, end=batches[1].position + 61 + 50 + 9)


def test_locate_reports_corrupt_headers() -> None:
    log = bytearray(_log())
    log[8:12] = (5).to_bytes(4, "big")
    with pytest.raises(CorruptRecordBatchError):
        locate_batches(log, 0, target_offset=0, max_bytes=10, segment_size=len(log))


def _log() -> bytes:
    """A fixed partition whose first batch is larger than 100 bytes."""
    log = synthetic_partition(3, 8)
    assert parsed_batches(log)[0].header.size > 161
    return log
