"""storage.retry: Kafka's back-off formula and the retry loop, on a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.retry import SYSTEM_CLOCK, RetryPolicy, call_with_retry
from tests.fakes.clocks import SleepingClock


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


def is_transient(err: Exception) -> bool:
    return isinstance(err, Transient)


def no_jitter(low: float, high: float) -> float:
    return (low + high) / 2


class Flaky:
    """Fails with the given errors in turn, then returns "ok"; optionally takes time."""

    def __init__(
        self, *errors: BaseException, clock: SleepingClock | None = None, cost: float = 0.0
    ):
        self.errors = list(errors)
        self.calls = 0
        self.clock = clock
        self.cost = cost

    async def __call__(self) -> str:
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_backoff_doubles_from_initial_up_to_max_without_jitter() -> None:
    policy = RetryPolicy(backoff_ms=500, backoff_max_ms=30_000, jitter=0.0)
    waits = [policy.backoff_seconds(n, no_jitter) for n in range(9)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_backoff_is_constant_when_max_is_below_initial() -> None:
    # Kafka's ExponentialBackoff: initial = min(initial, max), then no growth.
    policy = RetryPolicy(backoff_ms=5_000, backoff_max_ms=1_000, jitter=0.2)
    assert [policy.backoff_seconds(n, no_jitter) for n in range(3)] == [1.0, 1.0, 1.0]


@given(
    retry=st.integers(min_value=0, max_value=100),
    jitter=st.floats(min_value=0.0, max_value=0.5),
    backoff_ms=st.integers(min_value=1, max_value=10_000),
    backoff_max_ms=st.integers(min_value=1, max_value=100_000),
    position=st.floats(min_value=0.0, max_value=1.0),
)
def test_backoff_stays_within_jitter_band_and_never_exceeds_max(
    retry: int, jitter: float, backoff_ms: int, backoff_max_ms: int, position: float
) -> None:
    policy = RetryPolicy(backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms, jitter=jitter)
    wait = policy.backoff_seconds(retry, lambda low, high: low + (high - low) * position)
    plain = RetryPolicy(backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms, jitter=0.0)
    term = plain.backoff_seconds(retry, no_jitter)
    assert wait <= backoff_max_ms / 1000 + 1e-9
    assert wait >= min(term * (1 - jitter), backoff_max_ms / 1000) - 1e-9
    assert wait <= term * (1 + jitter) + 1e-9


def test_jitter_draws_from_kafkas_band() -> None:
    seen: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        seen.append((low, high))
        return high

    policy = RetryPolicy(backoff_ms=1_000, backoff_max_ms=30_000, jitter=0.25)
    assert policy.backoff_seconds(0, uniform) == pytest.approx(1.25)
    assert seen == [(0.75, 1.25)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"jitter": 0.6},
        {"jitter": -0.1},
        {"max_attempts": 0},
        {"backoff_ms": -1},
        {"backoff_max_ms": -1},
        {"deadline_ms": 0},
    ],
)
def test_policy_rejects_out_of_range_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


async def test_retries_transient_errors_until_success() -> None:
    clock = SleepingClock()
    operation = Flaky(Transient(), Transient())
    retries: list[tuple[int, str, float]] = []
    result = await call_with_retry(
        operation,
        policy=RetryPolicy(jitter=0.0, deadline_ms=None),
        is_retriable=is_transient,
        clock=clock,
        on_retry=lambda n, err, wait: retries.append((n, type(err).__name__, wait)),
    )
    assert result == "ok"
    assert operation.calls == 3
    assert clock.sleeps == [0.5, 1.0]
    assert retries == [(1, "Transient", 0.5), (2, "Transient", 1.0)]


async def test_permanent_error_is_raised_at_once() -> None:
    clock = SleepingClock()
    operation = Flaky(Permanent("denied"))
    with pytest.raises(Permanent, match="denied"):
        await call_with_retry(
            operation, policy=RetryPolicy(), is_retriable=is_transient, clock=clock
        )
    assert operation.calls == 1
    assert clock.sleeps == []


async def test_gives_up_after_max_attempts_with_the_last_error() -> None:
    clock = SleepingClock()
    operation = Flaky(*(Transient(str(n)) for n in range(10)))
    with pytest.raises(Transient, match=r"^3$"):
        await call_with_retry(
            operation,
            policy=RetryPolicy(max_attempts=4, jitter=0.0, deadline_ms=None),
            is_retriable=is_transient,
            clock=clock,
        )
    assert operation.calls == 4
    assert clock.sleeps == [0.5, 1.0, 2.0]


async def test_no_back_off_is_started_that_would_end_past_the_deadline() -> None:
    clock = SleepingClock()
    operation = Flaky(*(Transient() for _ in range(10)))
    with pytest.raises(Transient):
        await call_with_retry(
            operation,
            policy=RetryPolicy(max_attempts=100, jitter=0.0, deadline_ms=2_000),
            is_retriable=is_transient,
            clock=clock,
        )
    # Attempts at t=0, 0.5 and 1.5; the next wait (2 s) would end at 3.5 > 2.
    assert operation.calls == 3
    assert clock.sleeps == [0.5, 1.0]
    assert clock.now < 2.0


async def test_deadline_counts_the_time_attempts_take() -> None:
    clock = SleepingClock()
    operation = Flaky(*(Transient() for _ in range(10)), clock=clock, cost=0.9)
    with pytest.raises(Transient):
        await call_with_retry(
            operation,
            policy=RetryPolicy(max_attempts=100, jitter=0.0, deadline_ms=2_000),
            is_retriable=is_transient,
            clock=clock,
        )
    # t=0.9 fail, sleep 0.5 -> 1.4; t=2.3 fail: past the deadline, give up.
    assert operation.calls == 2
    assert clock.sleeps == [0.5]


async def test_a_hanging_attempt_is_cut_off_at_the_deadline() -> None:
    async def hang() -> None:
        await asyncio.Event().wait()

    # Timers run in deadline order: one due before the deadline has run by the time the
    # attempt is cut off (a hang would never return, so the upper bound needs no clock).
    due_first = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, due_first.set)
    with pytest.raises(TimeoutError):
        await call_with_retry(
            hang,
            policy=RetryPolicy(deadline_ms=200),
            is_retriable=lambda err: True,
            clock=SYSTEM_CLOCK,
        )
    assert due_first.is_set()


async def test_cancellation_is_not_retried() -> None:
    clock = SleepingClock()
    operation = Flaky(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await call_with_retry(
            operation, policy=RetryPolicy(), is_retriable=lambda err: True, clock=clock
        )
    assert operation.calls == 1
