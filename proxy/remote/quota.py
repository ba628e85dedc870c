"""The remote fetch quota (KIP-956): a cap on the bytes per second read from the remote tier.

Kafka's ``RLMQuotaManager`` measures remote fetch bytes as a rate over
``remote.log.manager.fetch.quota.window.num`` windows of
``remote.log.manager.fetch.quota.window.size.seconds`` each. Before a Fetch reads a remote
partition it asks whether the quota is exceeded; if so, that partition gets no records and
no error (the consumer simply asks again later), and no read is made. Bytes are recorded
once a read returns them. As in Kafka's ``Rate`` metric, the rate divides by at least
``window.num - 1`` whole windows, so a burst at start-up is not measured over a few
milliseconds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["FetchQuota"]


class FetchQuota:
    """A sliding-window byte rate with a bound."""

    def __init__(
        self,
        *,
        bytes_per_second: int,
        window_num: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """:raises ValueError: for a bound, window count or window length below one."""
        if bytes_per_second < 1 or window_num < 1 or window_seconds <= 0:
            raise ValueError("quota bound, window count and window length must be positive")
        self.bytes_per_second = bytes_per_second
        self._window_num = window_num
        self._window = window_seconds
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        """(window start, bytes) of the windows still inside the measured span."""
        self.throttled = 0
        """Partitions answered empty because the quota was exceeded."""

    def record(self, nbytes: int) -> None:
        """Count ``nbytes`` read from the remote tier now."""
        now = self._clock()
        self._expire(now)
        if self._samples and now < self._samples[-1][0] + self._window:
            start, total = self._samples[-1]
            self._samples[-1] = (start, total + nbytes)
        else:
            self._samples.append((now, nbytes))

    def rate(self) -> float:
        """Bytes per second over the measured windows."""
        now = self._clock()
        self._expire(now)
        if not self._samples:
            return 0.0
        return sum(total for _start, total in self._samples) / self.window_seconds()

    def window_seconds(self) -> float:
        """The span the rate is measured over now (Kafka's ``Rate.windowSize``)."""
        now = self._clock()
        self._expire(now)
        elapsed = now - self._samples[0][0] if self._samples else 0.0
        return max(elapsed, (self._window_num - 1) * self._window, self._window)

    def exceeded(self) -> bool:
        """Whether a new remote read should be skipped; counts it as throttled if so."""
        if self.rate() > self.bytes_per_second:
            self.throttled += 1
            return True
        return False

    def _expire(self, now: float) -> None:
        horizon = now - self._window_num * self._window
        while self._samples and self._samples[0][0] + self._window <= horizon:
            self._samples.popleft()
