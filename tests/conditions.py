"""Waiting for a condition instead of sleeping for a guessed time.

A test that sleeps "long enough" is slow when the guess is generous and flaky when it is
not (two shared cores, a JVM starting next door). These helpers poll a condition and fail
with a message that says what never happened.

Their bound is :data:`GENEROUS_S` unless a test says otherwise: a condition that holds ends
the wait at once, so the bound only decides how long a failing test takes to say so, and it
must outlast a machine whose cores are busy with other work (a test that asserts speed
belongs in ``bench/``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["GENEROUS_S", "wait_for", "wait_until"]

GENEROUS_S = 60.0
"""How long a condition may take to hold on a loaded two-core machine."""
_POLL_S = 0.005


async def wait_for(
    condition: Callable[[], bool], *, timeout_s: float = GENEROUS_S, what: str = ""
) -> None:
    """Yield to the event loop until ``condition()`` holds.

    :raises AssertionError: it did not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        await asyncio.sleep(_POLL_S)


def wait_until(
    condition: Callable[[], bool], *, timeout_s: float = GENEROUS_S, what: str = ""
) -> None:
    """Block until ``condition()`` holds (for tests without an event loop).

    :raises AssertionError: it did not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        time.sleep(_POLL_S)
