"""The memory the Fetch interceptor keeps for Fetches in flight is bounded in bytes."""

from __future__ import annotations

import asyncio

from protocol.fetch_bodies import FetchPosition, FetchRequestView
from proxy.remote.inflight import FetchesInFlight, FetchInFlight, estimated_size
from proxy.remote.sessions import FetchSessions
from storage.remote_reader import RemoteRecords


def plan(partitions: int, early: asyncio.Future[RemoteRecords]) -> FetchInFlight:
    positions = [
        (("t", p), FetchPosition(fetch_offset=0, partition_max_bytes=1 << 20))
        for p in range(partitions)
    ]
    view = FetchSessions(slots=1).open(connection_id=1, session_id=0, epoch=-1, listed=positions)
    assert view is not None
    request = FetchRequestView(
        version=12,
        replica_id=-1,
        session_id=0,
        session_epoch=-1,
        read_committed=False,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        partitions=tuple(positions),
        forgotten=(),
    )
    return FetchInFlight(
        view=view, request=request, tiered={}, started=0.0, early={("t", 0): early}
    )


async def test_plans_are_bounded_in_bytes_and_evicted_plans_cancel_their_reads() -> None:
    loop = asyncio.get_running_loop()
    big = plan(1000, loop.create_future())
    assert estimated_size(big) > 100 * estimated_size(plan(1, loop.create_future()))
    in_flight = FetchesInFlight(max_bytes=estimated_size(big) + 1)
    in_flight.add(1, 1, big)
    newer = plan(1000, loop.create_future())
    in_flight.add(1, 2, newer)  # does not fit beside the first: the oldest goes
    assert in_flight.get(1, 1) is None
    assert in_flight.get(1, 2) is newer
    first_read = big.early[("t", 0)]
    assert isinstance(first_read, asyncio.Future) and first_read.cancelled()


async def test_looking_a_plan_up_does_not_keep_it_from_eviction() -> None:
    loop = asyncio.get_running_loop()
    plans = [plan(10, loop.create_future()) for _ in range(3)]
    in_flight = FetchesInFlight(max_bytes=2 * estimated_size(plans[0]))
    in_flight.add(1, 1, plans[0])
    in_flight.add(1, 2, plans[1])
    assert in_flight.get(1, 1) is plans[0]  # what wants_response asks: no side effect
    in_flight.add(1, 3, plans[2])
    assert in_flight.get(1, 1) is None
    assert in_flight.get(1, 2) is plans[1]
