"""How late the event loop runs what is due: the delay every request on the loop shares.

The proxy serves every connection on one asyncio loop. A callback that holds the loop (a
large copy, a CPU-heavy remote read) delays every other connection's next step, even those
that need nothing but a pass-through; the per-API latency histograms show the sum of all
causes, this shows that one. A probe sleeps ``interval`` seconds and records how much later
than asked it woke: near zero on an idle loop, the length of the longest callback in the way
on a busy one (as Node.js's ``monitorEventLoopDelay`` does). A probe every 10 ms is a hundred
timer wake-ups a second: a few milliseconds of CPU per second, under 1 % of a core.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["PROBE_INTERVAL_S", "watch_loop_lag"]

PROBE_INTERVAL_S = 0.01


async def watch_loop_lag(
    observe: Callable[[float], None], interval: float = PROBE_INTERVAL_S
) -> None:
    """Observe the loop's lag (seconds late) every ``interval`` seconds, until cancelled."""
    while True:
        due = time.monotonic() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, time.monotonic() - due))
