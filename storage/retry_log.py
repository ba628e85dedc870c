"""Which failures of a retry loop to log, and the line that says it recovered.

A loop that retries every second while a broker is down must not write a line a second for
as long as the outage lasts, nor fall silent: :class:`RetryLog` has the loop log the first
failure, then attempts 2, 4, 8, 16, ... (the powers of two), and at least one line every
:data:`QUIET_INTERVAL_S` in between, so a long outage is a line a minute. When an attempt
succeeds after failures, :meth:`RetryLog.record_success` gives how long it took and how many
attempts, for one line ``... reconnected after 12.3 s (15 attempts)``.

Time comes from a clock function (``time.monotonic``), so tests drive it by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from storage.log_event import event

__all__ = ["QUIET_INTERVAL_S", "Failure", "Outage", "RetryLog", "log_failure", "log_recovery"]

QUIET_INTERVAL_S: Final = 60.0
"""At most this long between two lines of one outage, whatever the attempt numbers: an
operator watching the log sees the loop is still trying."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """One failed attempt of a retry loop."""

    attempt: int
    """Its number in the outage (1: the first since the last success)."""
    logged: bool
    """Whether the loop logs it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """A run of failed attempts that ended with a success."""

    seconds: float
    """From the first failure to the success."""
    attempts: int
    """Every attempt of the run: the failed ones and the one that worked."""

    def describe(self) -> str:
        """``after 12.3 s (15 attempts)``."""
        return f"after {self.seconds:.1f} s ({self.attempts} attempts)"


class RetryLog:
    """The failures of one retry loop: which to log, and when the loop recovered."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        quiet_interval_s: float = QUIET_INTERVAL_S,
    ) -> None:
        self._clock = clock
        self._quiet_interval_s = quiet_interval_s
        self._failures = 0
        self._first_failed_at = 0.0
        self._last_logged_at = 0.0

    @property
    def failures(self) -> int:
        """Failed attempts since the last success."""
        return self._failures

    def record_failure(self) -> Failure:
        """Count a failed attempt; it is logged if it is the first, a power of two, or the
        first after :data:`QUIET_INTERVAL_S` without a line."""
        now = self._clock()
        self._failures += 1
        if self._failures == 1:
            self._first_failed_at = now
        attempt = self._failures
        due = attempt & (attempt - 1) == 0 or now - self._last_logged_at >= self._quiet_interval_s
        if due:
            self._last_logged_at = now
        return Failure(attempt=attempt, logged=due)

    def record_success(self) -> Outage | None:
        """Count a successful attempt: the outage it ended (``None``: nothing had failed)."""
        if self._failures == 0:
            return None
        outage = Outage(seconds=self._clock() - self._first_failed_at, attempts=self._failures + 1)
        self._failures = 0
        return outage


def log_failure(
    retries: RetryLog,
    logger: logging.Logger,
    name: str,
    error: Exception,
    message: Callable[[Exception, int], str],
    *,
    level: int = logging.WARNING,
    **fields: Any,
) -> Failure:
    """Count a failed attempt of ``retries``' loop, which failed with ``error``; when it is
    due, log event ``name`` with ``message(error, attempt)`` as the sentence, ``fields``, and
    the attempt number as ``attempt``.

    :returns: the failure counted.
    """
    failure = retries.record_failure()
    if failure.logged:
        event(
            logger,
            level,
            name,
            msg=message(error, failure.attempt),
            **fields,
            attempt=failure.attempt,  # last, as the loops' lines always had it
        )
    return failure


def log_recovery(
    retries: RetryLog,
    logger: logging.Logger,
    name: str,
    what: str,
    *,
    level: int = logging.INFO,
    **fields: Any,
) -> Outage | None:
    """Count a success of ``retries``' loop; after failures, log event ``name``:
    ``<what>: reconnected after 12.3 s (15 attempts)``, with ``fields``.

    :returns: the outage that ended (``None``: nothing had failed, nothing is logged).
    """
    outage = retries.record_success()
    if outage is not None:
        event(
            logger,
            level,
            name,
            msg=f"{what}: reconnected {outage.describe()}",
            seconds=round(outage.seconds, 1),
            attempts=outage.attempts,
            **fields,
        )
    return outage
