"""The memory the Fetch interceptor keeps for Fetches in flight is bounded in bytes."""

from __future__ import annotations

import asyncio

from protocol.fetch_bodies import FetchPosition, FetchRequestView
from proxy.interceptors.fetch import _Plan, _plan_size, _PlanCache
from proxy.remote.sessions import FetchSessions
from storage.remote_reader import RemoteRecords


def plan(partitions: int, early: asyncio.Future[RemoteRecords]) -> _Plan:
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
    return _Plan(view=view, request=request, tiered={}, started=0.0, early={("t", 0): early})


async def test_plans_are_bounded_in_bytes_and_evicted_plans_cancel_their_reads() -> None:
    loop = asyncio.get_running_loop()
    big = plan(1000, loop.create_future())
    assert _plan_size(big) > 100 * _plan_size(plan(1, loop.create_future()))
    cache = _PlanCache(max_bytes=_plan_size(big) + 1)
    cache[(1, 1)] = big
    newer = plan(1000, loop.create_future())
    cache[(1, 2)] = newer  # does not fit beside the first: the oldest goes
    assert list(cache) == [(1, 2)]
    first_read = big.early[("t", 0)]
    assert isinstance(first_read, asyncio.Future) and first_read.cancelled()
