"""The event-loop lag probe and its histogram."""

from __future__ import annotations

import asyncio
import contextlib
import time

from proxy.loop_lag import watch_loop_lag
from proxy.metrics import ProxyMetrics

BLOCK_S = 0.05
INTERVAL_S = 0.001


def hold_the_loop() -> None:
    """A callback that keeps the loop for BLOCK_S, as a long copy on it would."""
    time.sleep(BLOCK_S)


async def test_a_callback_holding_the_loop_shows_as_lag() -> None:
    observed: list[float] = []
    woke = asyncio.Event()

    def observe(lag: float) -> None:
        observed.append(lag)
        woke.set()

    probe = asyncio.create_task(watch_loop_lag(observe, INTERVAL_S))
    await asyncio.sleep(0)  # the probe is now asleep, due in INTERVAL_S
    asyncio.get_running_loop().call_soon(hold_the_loop)
    await woke.wait()
    probe.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await probe
    # It woke at least BLOCK_S after it fell asleep, so at least BLOCK_S - INTERVAL_S late.
    assert observed[0] >= BLOCK_S - INTERVAL_S
    assert all(lag >= 0 for lag in observed)


def test_lag_is_a_histogram_in_the_proxy_registry() -> None:
    metrics = ProxyMetrics()
    metrics.loop_lag(0.003)
    metrics.loop_lag(0.0001)
    sample = metrics.registry.get_sample_value
    assert sample("tierproxy_event_loop_lag_seconds_count") == 2
    assert sample("tierproxy_event_loop_lag_seconds_bucket", {"le": "0.0005"}) == 1
    assert sample("tierproxy_event_loop_lag_seconds_bucket", {"le": "0.005"}) == 2
