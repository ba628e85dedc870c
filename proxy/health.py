"""Whether the proxy is alive and whether it should get traffic: ``/livez`` and ``/readyz``.

Rules of this file:

- **Liveness** is one question: does the event loop run what it is given? The endpoint's
  thread hands the loop a callback and waits for it (:meth:`Liveness.answer`); the answer
  says how long that took and how late the loop's 10 ms timer last woke
  (:mod:`proxy.loop_lag`). A loop held by a callback, or not running at all, is not alive.
- **Readiness** is the conjunction of named checks (:class:`Readiness`). A check is a plain
  function run on the event loop; it must not block or await, and says ``ok`` and a short
  reason. Anything that needs I/O (ask the broker, list the bucket) is a *probe*: a
  coroutine that :meth:`Readiness.add_probe` runs in the background every interval, whose
  latest outcome is the check's verdict. A probe that has not succeeded for
  :data:`STALE_INTERVALS` intervals fails, whatever it last said: a hung probe is not a
  healthy one.
- Any part may add a check (``readiness.add("name", check)``): the server adds its
  listeners and the broker, the remote tier its metadata view and its storage. Names are
  unique; reasons carry no secret and no topic, user or client name, since ``/readyz``
  needs no credentials.
- A check named *required* when the :class:`Readiness` is made fails ("not started yet")
  until a part adds it: the endpoint answers from the process's first moments, before the
  parts that add their checks exist, and an empty conjunction must not read as ready.
- :meth:`Readiness.stop_serving` turns readiness false for good (SIGTERM): load balancers
  and Kubernetes stop sending new clients before the listeners close.
- Each process answers for itself; several processes (workers, instances) each have their
  own :class:`Readiness`, and whatever aggregates them asks each one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

__all__ = [
    "STALE_INTERVALS",
    "Check",
    "HealthReport",
    "Liveness",
    "Readiness",
    "Verdict",
]

STALE_INTERVALS: Final = 3
"""A probe that has not succeeded for this many intervals fails: one slow or lost answer is
tolerated, a broker or bucket gone for half a minute (at the default 10 s) is not."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One check's answer."""

    ok: bool
    reason: str


Check = Callable[[], Verdict]
"""A readiness check: runs on the event loop, must not block."""

Probe = Callable[[], Awaitable[object]]
"""Background I/O behind a check: returns when the thing answered, raises when it did not
(the exception's text is the reason)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HealthReport:
    """What ``/livez`` or ``/readyz`` answers: a status and its reasons, as JSON."""

    ok: bool
    body: dict[str, Any]

    def json(self) -> bytes:
        return json.dumps({"status": "ok" if self.ok else "fail", **self.body}).encode() + b"\n"


class Readiness:
    """Named checks; ready when every one passes."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, required: Iterable[str] = ()
    ) -> None:
        """:param required: names of checks that fail until they are added."""
        self._clock = clock
        self._required = tuple(required)
        self._checks: dict[str, Check] = {}
        self._probes: list[_Probe] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopping = ""

    def add(self, name: str, check: Check) -> None:
        """Add a check under ``name``.

        :raises ValueError: when ``name`` is taken.
        """
        if name in self._checks:
            raise ValueError(f"readiness check {name!r} exists already")
        self._checks[name] = check

    def add_probe(self, name: str, probe: Probe, *, interval: float, late: str = "") -> None:
        """Add a check whose verdict is the latest outcome of ``probe``, run every
        ``interval`` seconds (each run bounded by ``interval``; ``late`` is the reason when
        it takes longer) once :meth:`start` is called, or at once if it already was.

        :raises ValueError: when ``name`` is taken.
        """
        background = _Probe(
            probe,
            interval=interval,
            late=late or f"no answer within {interval:g} s",
            clock=self._clock,
        )
        self.add(name, background.verdict)
        self._probes.append(background)
        if self._started:
            self._tasks.append(asyncio.get_running_loop().create_task(background.run()))

    def start(self) -> None:
        """Start the probes (needs the running loop)."""
        loop = asyncio.get_running_loop()
        self._started = True
        self._tasks = [loop.create_task(probe.run()) for probe in self._probes]

    async def close(self) -> None:
        """Stop the probes."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._started = False

    def stop_serving(self, reason: str = "shutting down") -> None:
        """Report not ready from now on, whatever the checks say."""
        self._stopping = reason

    def report(self) -> HealthReport:
        """Run every check (on the event loop) and aggregate."""
        verdicts = {
            name: Verdict(ok=False, reason="not started yet")
            for name in self._required
            if name not in self._checks
        }
        for name, check in self._checks.items():
            try:
                verdicts[name] = check()
            except Exception as err:  # a broken check fails itself, not the endpoint
                verdicts[name] = Verdict(ok=False, reason=f"check failed: {err!r}")
        ok = not self._stopping and all(v.ok for v in verdicts.values())
        body: dict[str, Any] = {
            "checks": {name: dataclasses.asdict(v) for name, v in verdicts.items()}
        }
        if self._stopping:
            body["reason"] = self._stopping
        elif not ok:
            body["reason"] = "; ".join(
                f"{name}: {v.reason}" for name, v in verdicts.items() if not v.ok
            )
        return HealthReport(ok=ok, body=body)


class _Probe:
    """A probe run in the background, and the verdict of its latest outcome."""

    def __init__(
        self, probe: Probe, *, interval: float, late: str, clock: Callable[[], float]
    ) -> None:
        self._probe = probe
        self._interval = interval
        self._late = late
        self._clock = clock
        self._created = clock()
        self._last_success: float | None = None
        self._last = Verdict(ok=False, reason="not checked yet")

    def verdict(self) -> Verdict:
        since = self._last_success if self._last_success is not None else self._created
        silent = self._clock() - since
        if self._last.ok or silent <= STALE_INTERVALS * self._interval:
            return self._last
        return Verdict(ok=False, reason=f"{self._last.reason} (no success for {silent:.0f} s)")

    async def run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self._interval):
                    await self._probe()
            except TimeoutError:
                self._last = Verdict(ok=False, reason=self._late)
            except Exception as err:  # the reason is the failure's own words
                self._last = Verdict(ok=False, reason=str(err) or type(err).__name__)
            else:
                self._last_success = self._clock()
                self._last = Verdict(ok=True, reason="answered")
            await asyncio.sleep(self._interval)


class Liveness:
    """Answers ``/livez`` from another thread by running a callback on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lag = 0.0

    def observe_lag(self, seconds: float) -> None:
        """The loop woke its lag probe ``seconds`` late (called on the loop)."""
        self._lag = seconds

    def answer(self, wait: float) -> HealthReport:
        """Alive when the loop runs a callback within ``wait`` seconds (call from any
        thread but the loop's)."""
        answered: concurrent.futures.Future[float] = concurrent.futures.Future()
        asked = time.monotonic()
        try:
            self._loop.call_soon_threadsafe(lambda: answered.set_result(time.monotonic()))
            ran = answered.result(timeout=wait)
        except RuntimeError:  # the loop is closed
            return HealthReport(ok=False, body={"reason": "the event loop is closed"})
        except concurrent.futures.TimeoutError:
            return HealthReport(
                ok=False,
                body={"reason": f"the event loop did not run a callback within {wait:g} s"},
            )
        return HealthReport(
            ok=True,
            body={"loop_answer_s": round(ran - asked, 6), "loop_lag_s": round(self._lag, 6)},
        )
