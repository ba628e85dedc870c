"""The remote log reader pool: bounded concurrency and a bounded, fair queue of remote reads.

KIP-405's "remote storage fetcher thread pool" (``remote.log.reader.threads`` threads and a
task queue of ``remote.log.reader.max.pending.tasks``), as asyncio tasks: a remote read is
I/O-bound, so a few workers on the event loop keep enough GETs in flight, and there is no
thread hand-off per read. The rules:

- At most ``workers`` reads run at once; a read waits in its client's queue otherwise.
- At most ``max_pending`` reads wait (plus one per idle worker, which starts at once); a
  submit beyond that raises :class:`ReaderPoolFullError` and the caller answers that
  partition with a retriable error, as Kafka does when its executor rejects a task.
- Fair across clients: each client (a connection) has its own queue, and workers take from
  the queues in turn, so a catch-up consumer with many partitions waiting cannot delay a
  tail consumer's single read by more than one turn of the round.
- A submitted read wakes one idle worker, not all of them (an ``asyncio.Event`` would wake
  every idle worker for each read, to find the queue empty but for one).
- A submitted read runs to the end even if its caller stopped waiting (the purgatory
  expired): its result warms the caches for the next Fetch. A read whose future was
  cancelled before it started is skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ReaderPool", "ReaderPoolFullError"]

T = TypeVar("T")


class ReaderPoolFullError(Exception):
    """The pool's queue is full; the read was not accepted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Job:
    run: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]


class ReaderPool:
    """Runs remote reads with bounded concurrency, round-robin across clients."""

    def __init__(
        self, *, workers: int, max_pending: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Create a stopped pool; :meth:`start` launches the workers.

        :raises ValueError: for fewer than one worker or a negative queue bound.
        """
        if workers < 1 or max_pending < 0:
            raise ValueError("workers must be at least 1 and max_pending not negative")
        self._workers = workers
        self._max_pending = max_pending
        self._clock = clock
        self._queues: OrderedDict[Hashable, deque[_Job]] = OrderedDict()
        self._pending = 0
        self._idle = workers
        self._sleepers: deque[asyncio.Future[None]] = deque()
        """One future per idle worker waiting for a job, earliest first."""
        self._tasks: list[asyncio.Task[None]] = []
        self._busy_since: dict[int, float] = {}
        self._busy_total = 0.0
        self._measured_at = clock()
        self._measured_busy = 0.0
        self.rejected = 0
        """Reads refused because the queue was full."""

    @property
    def queue_size(self) -> int:
        """Reads waiting for a worker (Kafka's ``RemoteLogReaderTaskQueueSize``)."""
        return self._pending

    @property
    def workers(self) -> int:
        return self._workers

    def start(self) -> None:
        """Launch the workers (idempotent)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._work(n), name=f"remote-reader-{n}")
                for n in range(self._workers)
            ]

    async def close(self) -> None:
        """Stop the workers; reads still queued are cancelled."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for queue in self._queues.values():
            for job in queue:
                job.future.cancel()
        self._queues.clear()
        self._pending = 0

    def submit(self, client: Hashable, run: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """Queue ``run()`` for ``client``; the future holds its result or exception.

        :raises ReaderPoolFullError: when ``max_pending`` reads already wait.
        """
        if self._pending >= self._max_pending + self._idle:
            self.rejected += 1
            raise ReaderPoolFullError(
                f"{self._pending} remote reads are waiting (remote.log.reader.max.pending.tasks)"
            )
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(client)
        if queue is None:
            queue = self._queues[client] = deque()
        queue.append(_Job(run=run, future=future))
        self._pending += 1
        self._wake_one()
        return future

    def _wake_one(self) -> None:
        """Wake the idle worker that has slept longest, if any."""
        while self._sleepers:
            sleeper = self._sleepers.popleft()
            if not sleeper.done():
                sleeper.set_result(None)
                return

    def idle_ratio(self) -> float:
        """Share of worker time spent idle since the previous call (1.0 = all idle).

        Kafka's ``RemoteLogReaderAvgIdlePercent``; reads in progress count as busy up to now.
        """
        now = self._clock()
        busy = self._busy_total + sum(now - since for since in self._busy_since.values())
        elapsed = (now - self._measured_at) * self._workers
        ratio = 1.0 if elapsed <= 0 else 1.0 - (busy - self._measured_busy) / elapsed
        self._measured_at, self._measured_busy = now, busy
        return min(1.0, max(0.0, ratio))

    def _next_job(self) -> _Job | None:
        """The head of the next client's queue, in turn; that client moves to the back."""
        while self._queues:
            client, queue = next(iter(self._queues.items()))
            job = queue.popleft()
            self._pending -= 1
            if queue:
                self._queues.move_to_end(client)
            else:
                del self._queues[client]
            if not job.future.cancelled():
                return job
        return None

    async def _work(self, worker: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job = self._next_job()
            if job is None:
                sleeper: asyncio.Future[None] = loop.create_future()
                self._sleepers.append(sleeper)
                await sleeper
                continue
            self._idle -= 1
            self._busy_since[worker] = self._clock()
            try:
                result = await job.run()
            except asyncio.CancelledError:
                job.future.cancel()
                raise
            except Exception as err:  # handed to the caller through the future
                if not job.future.done():
                    job.future.set_exception(err)
            else:
                if not job.future.done():
                    job.future.set_result(result)
            finally:
                self._idle += 1
                self._busy_total += self._clock() - self._busy_since.pop(worker)
