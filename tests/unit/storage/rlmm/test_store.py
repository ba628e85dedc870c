"""The columnar segment store: id lookups through growth, tombstones and slot reuse, index
order, compaction, and the memory it takes per segment."""

from __future__ import annotations

import random
import tracemalloc
import uuid

from storage.rlmm.store import DEAD, PartitionSegments, clipped_ranges
from tests.unit.storage.rlmm.reference import TP, seg


def test_ids_stay_findable_through_growth_removal_and_reuse() -> None:
    store = PartitionSegments()
    rng = random.Random(7)
    live: dict[uuid.UUID, int] = {}
    for round_ in range(6):
        for _ in range(700):
            start = rng.randrange(10_000)
            metadata = seg(start, start + rng.randrange(50), ((round_, 0),))
            live[metadata.segment_id.id] = store.insert(metadata)
        for segment_id in rng.sample(sorted(live), 500):
            store.remove(live.pop(segment_id))
        assert len(store) == len(live)
        for segment_id, slot in live.items():
            assert store.find(segment_id) == slot
        assert store.find(uuid.uuid4()) is None
        starts = [store.start[slot] for slot in store.live()]
        assert starts == sorted(starts)
        assert sorted(store.live()) == sorted(live.values())


def test_sequential_and_low_entropy_ids() -> None:
    store = PartitionSegments()
    slots = {n: store.insert(seg(n, n, ((0, 0),), number=n)) for n in range(1, 3000)}
    assert all(store.find(uuid.UUID(int=n)) == slot for n, slot in slots.items())
    high = seg(0, 0, ((0, 0),), number=1 << 100)
    assert store.find(high.segment_id.id) is None
    assert store.find(uuid.UUID(int=(1 << 64) | 1)) is None


def test_equal_starts_keep_arrival_order_and_removal_compacts() -> None:
    store = PartitionSegments()
    first = store.insert(seg(5, 9, ((0, 5),)))
    store.insert(seg(0, 4, ((0, 0),)))
    second = store.insert(seg(5, 7, ((1, 5),)))
    assert [store.start[s] for s in store.live()] == [0, 5, 5]
    assert list(store.live())[1:] == [first, second]
    slots = [store.insert(seg(10 + i, 10 + i, ((1, 10 + i),))) for i in range(200)]
    for slot in slots[:150]:
        store.remove(slot)
    assert store.front + store.dead < 150  # compacted on the way
    assert all(store.state[s] != DEAD for s in store.live())
    reused = store.insert(seg(500, 510, ((2, 500),)))
    assert reused in slots[:150]
    assert store.metadata(reused, TP).end_offset == 510


def test_materialised_metadata_round_trips() -> None:
    store = PartitionSegments()
    for metadata in (
        seg(100, 199, ((3, 100),), max_timestamp=-1),
        seg(100, 199, ((0, 0), (2, 120), (5, 150))),
    ):
        slot = store.insert(metadata)
        assert store.metadata(slot, TP) == metadata
        assert store.find(metadata.segment_id.id) == slot


def test_clipped_ranges() -> None:
    assert clipped_ranges(((0, 0), (2, 5)), 4, 5) == [(0, 4, 4), (2, 5, 5)]
    assert clipped_ranges(((0, 0), (1, 3), (2, 5)), 4, 5) == [(1, 4, 4), (2, 5, 5)]
    assert clipped_ranges(((0, 4), (1, 4)), 4, 6) == [(1, 4, 6)]
    assert clipped_ranges(((0, 4), (1, 9)), 4, 6) == [(0, 4, 6)]


def test_memory_per_segment_is_within_kip_405_budget() -> None:
    """KIP-405 estimates ~100 bytes per segment entry; the store must stay below."""
    count = 20_000
    metadata = [
        seg(i * 100, i * 100 + 99, ((i // 1000, i * 100),), max_timestamp=i) for i in range(count)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = PartitionSegments()
    for m in metadata:
        store.insert(m)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used / count <= 100, used / count
