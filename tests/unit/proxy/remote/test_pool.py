"""ReaderPool: bounded concurrency, bounded queue, round-robin fairness, idle ratio."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from proxy.remote.pool import ReaderPool, ReaderPoolFullError
from tests.conditions import wait_for
from tests.fakes.clocks import ManualClock


async def test_at_most_workers_run_at_once() -> None:
    pool = ReaderPool(workers=2, max_pending=10)
    pool.start()
    running = 0
    peak = 0
    gate = asyncio.Event()

    async def read() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1
        return 1

    futures = [pool.submit("c", read) for _ in range(5)]
    await wait_for(lambda: running == 2, what="two reads running")
    assert peak == 2
    assert pool.queue_size == 3
    gate.set()
    assert await asyncio.gather(*futures) == [1] * 5
    await pool.close()


async def test_a_full_queue_refuses_reads() -> None:
    pool = ReaderPool(workers=1, max_pending=2)
    pool.start()
    gate = asyncio.Event()

    async def read() -> None:
        await gate.wait()

    first = pool.submit("c", read)
    await wait_for(lambda: pool.queue_size == 0, what="the worker took the first read")
    queued = [pool.submit("c", read), pool.submit("c", read)]
    with pytest.raises(ReaderPoolFullError):
        pool.submit("c", read)
    assert pool.rejected == 1
    gate.set()
    await asyncio.gather(first, *queued)
    await pool.close()


async def test_idle_workers_accept_reads_even_with_no_queue() -> None:
    pool = ReaderPool(workers=2, max_pending=0)
    pool.start()

    async def read() -> int:
        return 7

    assert await pool.submit("c", read) == 7
    await pool.close()


async def test_clients_take_turns() -> None:
    """A catch-up client with many queued reads delays another client by at most one read."""
    pool = ReaderPool(workers=1, max_pending=100)
    order: list[str] = []
    gate = asyncio.Event()

    def job(name: str) -> Callable[[], Awaitable[None]]:
        async def read() -> None:
            await gate.wait()
            order.append(name)

        return read

    futures = [pool.submit("catch-up", job(f"catch-up-{i}")) for i in range(10)]
    futures.append(pool.submit("tail", job("tail")))
    pool.start()
    gate.set()
    await asyncio.gather(*futures)
    assert order.index("tail") == 1
    await pool.close()


async def test_errors_reach_the_caller_and_the_worker_goes_on() -> None:
    pool = ReaderPool(workers=1, max_pending=10)
    pool.start()

    async def fail() -> None:
        raise OSError("boom")

    async def succeed() -> str:
        return "ok"

    failed = pool.submit("c", fail)
    ok = pool.submit("c", succeed)
    with pytest.raises(OSError, match="boom"):
        await failed
    assert await ok == "ok"
    await pool.close()


async def test_reads_cancelled_before_they_start_are_skipped() -> None:
    pool = ReaderPool(workers=1, max_pending=10)
    ran: list[int] = []

    def job(n: int) -> Callable[[], Awaitable[None]]:
        async def read() -> None:
            ran.append(n)

        return read

    first, second = pool.submit("c", job(1)), pool.submit("c", job(2))
    first.cancel()
    pool.start()
    await second
    assert ran == [2]
    await pool.close()


async def test_close_cancels_queued_reads() -> None:
    pool = ReaderPool(workers=1, max_pending=10)

    async def read() -> None:
        return None

    queued = pool.submit("c", read)
    await pool.close()
    assert queued.cancelled()


async def test_idle_ratio_measures_busy_time_between_calls() -> None:
    clock = ManualClock(0.0)
    pool = ReaderPool(workers=2, max_pending=10, clock=clock)
    pool.start()
    gate = asyncio.Event()

    async def read() -> None:
        await gate.wait()

    future = pool.submit("c", read)
    await wait_for(lambda: pool.queue_size == 0, what="a worker took the read")
    assert pool.idle_ratio() == 1.0
    clock.now = 10.0
    assert pool.idle_ratio() == pytest.approx(0.5)  # one of two workers busy throughout
    gate.set()
    await future
    clock.now = 20.0
    assert pool.idle_ratio() == pytest.approx(1.0)
    await pool.close()


def test_invalid_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="workers"):
        ReaderPool(workers=0, max_pending=1)


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("bursts", [[1, 1, 1], [5, 0, 2], [2, 7, 1, 4]])
async def test_every_read_of_bursts_runs_once(workers: int, bursts: list[int]) -> None:
    """Each submit wakes one idle worker: reads submitted in bursts (between which the
    workers go idle again, or not) all run once, never more than ``workers`` at a time."""
    pool = ReaderPool(workers=workers, max_pending=100)
    pool.start()
    running = peak = 0
    ran: list[int] = []

    def read(n: int) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0)
            running -= 1
            ran.append(n)
            return n

        return run

    futures: list[asyncio.Future[int]] = []
    for size in bursts:
        futures += [
            pool.submit(f"c{len(futures) % 2}", read(len(futures) + i)) for i in range(size)
        ]
        await asyncio.sleep(0)
    assert await asyncio.gather(*futures) == list(range(len(futures)))
    assert sorted(ran) == list(range(len(futures)))
    assert peak <= workers
    await pool.close()
