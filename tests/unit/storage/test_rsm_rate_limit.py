"""storage.rsm.rate_limit, the upload rate limit, on a fake clock; and each pipeline task's
share of the cycle's upload cap (storage.tiering.tier_stage.task_upload_limit)."""

from __future__ import annotations

import pytest

from storage.rsm.config import RemoteStorageConfig
from storage.rsm.rate_limit import RateLimiter
from storage.tiering.tier_stage import task_upload_limit
from tests.fakes.clocks import SleepingClock


async def test_bursts_up_to_a_second_then_waits_at_the_rate() -> None:
    time = SleepingClock()
    limiter = RateLimiter(1000, clock=time.monotonic, sleep=time.sleep)
    await limiter.acquire(1000)  # one second's worth, at once
    assert time.sleeps == []
    await limiter.acquire(500)
    assert time.sleeps == [0.5]
    await limiter.acquire(4000)  # larger than a burst: waits for all of it, never split
    assert time.sleeps == [0.5, 4.0]
    time.now += 10  # idle: the bucket fills to one second's worth, no more
    await limiter.acquire(1500)
    assert time.sleeps == [0.5, 4.0, 0.5]
    assert limiter.waited_seconds == pytest.approx(5.0)


async def test_average_rate_over_many_uploads() -> None:
    time = SleepingClock()
    limiter = RateLimiter(1_000_000, clock=time.monotonic, sleep=time.sleep)
    for _ in range(100):
        await limiter.acquire(100_000)
    # 10 MB at 1 MB/s with a 1 MB burst: 9 s.
    assert time.now == pytest.approx(9.0)


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1 byte/s"):
        RateLimiter(0)


@pytest.mark.parametrize(
    ("own", "total", "tasks", "limit"),
    [
        (0, 2**63 - 1, 2, 0),  # neither set: no limit
        (5_000, 2**63 - 1, 2, 5_000),  # the task's own
        (0, 8_000, 2, 4_000),  # a share of the total
        (3_000, 8_000, 2, 3_000),  # the lower of the two
        (9_000, 8_000, 4, 2_000),
    ],
)
def test_each_task_gets_the_lower_of_its_limit_and_its_share(
    own: int, total: int, tasks: int, limit: int
) -> None:
    storage = RemoteStorageConfig(upload_rate_bytes_per_second=own)
    assert task_upload_limit(storage, total=total, tasks=tasks).upload_rate_bytes_per_second == (
        limit
    )
