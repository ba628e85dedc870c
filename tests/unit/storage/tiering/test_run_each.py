"""``run_each``: every item's work, at most ``at_once`` at a time, results in item order."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from storage.tiering.worker import run_each


@given(
    delays=st.lists(st.integers(min_value=0, max_value=3), max_size=12),
    at_once=st.integers(min_value=1, max_value=4),
)
def test_results_in_item_order_and_never_more_than_at_once(delays: list[int], at_once: int) -> None:
    running = 0
    most = 0

    async def work(item: tuple[int, int]) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(item[1]):
            await asyncio.sleep(0)
        running -= 1
        return item[0]

    items = list(enumerate(delays))
    assert asyncio.run(run_each(items, work, at_once=at_once)) == list(range(len(delays)))
    assert most <= at_once
    if all(delays):  # every item waits at least once: the gate fills up
        assert most == min(at_once, len(delays))
