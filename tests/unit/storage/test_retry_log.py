"""storage.retry_log: which failures of a retry loop are logged, on a fake clock."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.retry_log import (
    QUIET_INTERVAL_S,
    Failure,
    Outage,
    RetryLog,
    log_failure,
    log_recovery,
)
from tests.fakes.clocks import ManualClock


def logged_attempts(gaps: list[float], quiet: float = QUIET_INTERVAL_S) -> list[int]:
    """The attempt numbers logged when attempts fail ``gaps`` seconds apart."""
    clock = ManualClock(1000.0)
    retries = RetryLog(clock=clock, quiet_interval_s=quiet)
    logged = []
    for attempt, gap in enumerate(gaps, start=1):
        clock.now += gap
        failure = retries.record_failure()
        assert failure.attempt == attempt
        if failure.logged:
            logged.append(attempt)
    return logged


def test_a_retry_a_second_logs_the_first_then_powers_of_two_then_a_line_a_minute() -> None:
    logged = logged_attempts([1.0] * 600)  # ten minutes of a broker that is down

    assert logged[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert logged[7:] == [124, 128, 188, 248, 256, 316, 376, 436, 496, 512, 572]
    assert len(logged) == 18  # not 600


def test_a_success_after_failures_is_one_outage_then_counting_starts_again() -> None:
    clock = ManualClock(1000.0)
    retries = RetryLog(clock=clock)
    assert retries.record_success() is None  # nothing had failed
    for _ in range(14):
        retries.record_failure()
        clock.now += 0.9

    outage = retries.record_success()

    assert isinstance(outage, Outage)
    assert outage.seconds == pytest.approx(12.6) and outage.attempts == 15
    assert outage.describe() == "after 12.6 s (15 attempts)"
    assert retries.failures == 0 and retries.record_success() is None
    assert retries.record_failure() == Failure(attempt=1, logged=True)  # a new outage


def test_log_recovery_is_one_line_only_after_failures(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1000.0)
    retries = RetryLog(clock=clock)
    logger = logging.getLogger("storage.kafka_client.consumer")
    with caplog.at_level(logging.INFO):
        assert log_recovery(retries, logger, "metadata.consumer.reconnected", "consuming t") is None
        retries.record_failure()
        clock.now += 3.0
        retries.record_failure()
        log_recovery(retries, logger, "metadata.consumer.reconnected", "consuming t", topic="t")

    (line,) = caplog.records
    assert line.getMessage() == "consuming t: reconnected after 3.0 s (3 attempts)"
    assert line.tierproxy_event == "metadata.consumer.reconnected"  # type: ignore[attr-defined]
    assert line.tierproxy_fields == {"seconds": 3.0, "attempts": 3, "topic": "t"}  # type: ignore[attr-defined]


def test_log_failure_logs_only_the_due_attempts_with_their_number(
    caplog: pytest.LogCaptureFixture,
) -> None:
    retries = RetryLog(clock=ManualClock(1000.0))
    logger = logging.getLogger("storage.kafka_client.producer")
    with caplog.at_level(logging.INFO):
        failures = [
            log_failure(
                retries,
                logger,
                "producer.retry",
                ConnectionError("down"),
                lambda error, attempt: f"producing to t: {error} (attempt {attempt})",
                level=logging.INFO,
                topic="t",
            )
            for _ in range(3)
        ]

    assert [f.logged for f in failures] == [True, True, False]
    assert caplog.messages == [
        "producing to t: down (attempt 1)",
        "producing to t: down (attempt 2)",
    ]
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]
    assert caplog.records[1].tierproxy_fields == {"topic": "t", "attempt": 2}  # type: ignore[attr-defined]


@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=1, max_size=400),
    quiet=st.floats(min_value=1.0, max_value=120.0),
)
def test_the_logged_attempts_are_the_first_the_powers_of_two_and_none_too_quiet(
    gaps: list[float], quiet: float
) -> None:
    logged = logged_attempts(gaps, quiet)
    times = []  # as the clock adds them up
    now = ManualClock(1000.0).now
    for gap in gaps:
        now += gap
        times.append(now)

    assert logged[0] == 1
    assert {2**k for k in range(10) if 2**k <= len(gaps)} <= set(logged)
    # Never silent for the quiet interval while failing: a failure that comes that long
    # after the last line is logged.
    last = times[0]
    for attempt, at in enumerate(times, start=1):
        if at - last >= quiet:
            assert attempt in logged
        if attempt in logged:
            last = at
    # Bounded: besides the powers of two, at most one line per quiet interval.
    spent = times[-1] - times[0]
    assert len(logged) <= 1 + math.floor(math.log2(len(gaps))) + math.floor(spent / quiet) + 1
