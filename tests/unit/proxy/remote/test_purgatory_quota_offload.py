"""The purgatory's deadline, the KIP-956 fetch quota and the offload policy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.remote.offload import OffloadPolicy
from proxy.remote.purgatory import RemoteFetchPurgatory
from proxy.remote.quota import FetchQuota
from tests.fakes.clocks import ManualClock

# -- purgatory -----------------------------------------------------------------------------


async def test_waits_until_every_read_is_done() -> None:
    purgatory = RemoteFetchPurgatory(max_wait_ms=60_000)
    loop = asyncio.get_running_loop()
    reads: list[asyncio.Future[Any]] = [loop.create_future() for _ in range(3)]
    for n, read in enumerate(reads):
        loop.call_later(0.01 * (n + 1), read.set_result, n)
    assert await purgatory.wait(reads)
    assert all(read.done() for read in reads)
    assert purgatory.expirations == 0
    assert purgatory.size == 0


async def test_returns_at_the_remote_max_wait_and_reads_go_on() -> None:
    purgatory = RemoteFetchPurgatory(max_wait_ms=50)
    loop = asyncio.get_running_loop()
    slow: asyncio.Future[Any] = loop.create_future()
    fast: asyncio.Future[Any] = loop.create_future()
    fast.set_result("ready")
    # The event loop runs timers in deadline order: one due before the max wait has run by
    # the time the purgatory gives up, whatever the load, if it waited at all.
    due_first = asyncio.Event()
    loop.call_later(0.01, due_first.set)
    assert not await purgatory.wait([fast, slow])
    assert due_first.is_set()
    assert purgatory.expirations == 1
    assert not slow.done()
    slow.set_exception(OSError("late"))  # retrieved by the purgatory: no "never retrieved"
    await asyncio.sleep(0)


async def test_nothing_to_wait_for_returns_at_once() -> None:
    purgatory = RemoteFetchPurgatory(max_wait_ms=1000)
    assert await purgatory.wait([])


# -- quota ---------------------------------------------------------------------------------


def test_the_quota_measures_over_at_least_window_num_minus_one_windows() -> None:
    clock = ManualClock(100.0)
    quota = FetchQuota(bytes_per_second=100, window_num=11, window_seconds=1, clock=clock)
    quota.record(900)
    assert quota.rate() == pytest.approx(90)  # 900 bytes over 10 windows, not over 0 s
    assert not quota.exceeded()
    quota.record(200)
    assert quota.exceeded()
    assert quota.throttled == 1


def test_old_windows_leave_the_measurement() -> None:
    clock = ManualClock(100.0)
    quota = FetchQuota(bytes_per_second=100, window_num=3, window_seconds=1, clock=clock)
    quota.record(1000)
    assert quota.exceeded()
    clock.now += 5
    assert quota.rate() == 0
    assert not quota.exceeded()


@given(st.lists(st.tuples(st.floats(0, 3), st.integers(0, 10_000)), max_size=50))
def test_rate_is_never_above_the_bytes_recorded_in_the_span(steps: list[tuple[float, int]]) -> None:
    clock = ManualClock(100.0)
    quota = FetchQuota(bytes_per_second=1, window_num=5, window_seconds=1, clock=clock)
    for advance, nbytes in steps:
        clock.now += advance
        quota.record(nbytes)
        assert 0 <= quota.rate() <= sum(n for _a, n in steps) / 4 + 1e-9


def test_invalid_quota_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        FetchQuota(bytes_per_second=0, window_num=1, window_seconds=1)


# -- offload -------------------------------------------------------------------------------


def decide(policy: OffloadPolicy, offset: int, hw: int | None = 1000) -> bool:
    return policy.offload(
        fetch_offset=offset, remote_start=10, remote_end=99, high_watermark=hw, bytes_per_record=100
    )


def test_offload_is_off_by_default() -> None:
    assert not decide(OffloadPolicy(), 50)


def test_offload_covers_only_the_tiered_range() -> None:
    policy = OffloadPolicy(enabled=True)
    assert [decide(policy, o) for o in (9, 10, 99, 100)] == [False, True, True, False]
    assert decide(policy, 50, hw=None)


def test_offload_thresholds_need_a_known_lag() -> None:
    by_records = OffloadPolicy(enabled=True, min_lag_records=951)
    assert decide(by_records, 49)
    assert not decide(by_records, 50)
    assert not decide(by_records, 20, hw=None)
    by_bytes = OffloadPolicy(enabled=True, min_lag_bytes=95_000)
    assert decide(by_bytes, 50)
    assert not decide(by_bytes, 51)
