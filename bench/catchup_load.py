"""Catch-up readers in a process of their own: the load under which :mod:`bench.tail` measures
a tail consumer's Fetch latency.

Why a process of their own: run in the measuring process, the readers' receive and decode work
shares the tail consumer's event loop, and the tail's round trips then include the benchmark
client's own loop lag, whichever server is being measured.

Run by :func:`bench.tail.catchup_load`, not by hand::

    python -m bench.catchup_load HOST PORT TOPIC TOPIC_ID END_OFFSET --consumers 4

It prints ``reading`` once the readers are started, reads offsets [0, END_OFFSET) of
partition 0 over and over (raw Fetch v12, ``--fetch-mib`` per partition, one request in flight
per reader; together at most ``--mib-per-s`` if given) until SIGTERM or SIGINT, then prints
the record bytes read and the seconds as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bench.clients import Endpoint, FetchTally, raw_fetch_all
from bench.common import MIB

__all__ = ["CONSUMERS", "FETCH_MIB", "READY", "LoadSpec", "Pacer", "argv"]

READY = "reading"
"""The line the process prints once its readers are started."""
CONSUMERS = 4
FETCH_MIB = 1
"""The readers and their fetch size unless told: 4 catch-up consumers, and a consumer's
default ``max.partition.fetch.bytes``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """What the readers read, and where from."""

    endpoint: Endpoint
    topic: str
    topic_id: uuid.UUID
    end_offset: int
    consumers: int = CONSUMERS
    fetch_mib: int = FETCH_MIB
    mib_per_s: float | None = None
    """The readers' aggregate rate cap; None: as fast as they are served."""


class Pacer:
    """Holds readers back so that together they read at most ``bytes_per_s`` on average
    since the first call: the same load on two servers that serve at different rates."""

    def __init__(self, bytes_per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = bytes_per_s
        self._clock = clock
        self._started: float | None = None
        self._bytes = 0

    def delay(self, nbytes: int) -> float:
        """Count ``nbytes`` read; seconds to wait before the next request."""
        now = self._clock()
        if self._started is None:
            self._started = now
        self._bytes += nbytes
        return max(0.0, self._started + self._bytes / self._rate - now)

    async def __call__(self, nbytes: int) -> None:
        delay = self.delay(nbytes)
        if delay > 0:
            await asyncio.sleep(delay)


def argv(spec: LoadSpec) -> list[str]:
    """The module's command-line arguments for ``spec`` (after ``python -m bench.catchup_load``)."""
    return [
        spec.endpoint.host,
        str(spec.endpoint.port),
        spec.topic,
        str(spec.topic_id),
        str(spec.end_offset),
        "--consumers",
        str(spec.consumers),
        "--fetch-mib",
        str(spec.fetch_mib),
        *([] if spec.mib_per_s is None else ["--mib-per-s", str(spec.mib_per_s)]),
    ]


def parse(args: list[str] | None = None) -> LoadSpec:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("topic")
    parser.add_argument("topic_id", type=uuid.UUID)
    parser.add_argument("end_offset", type=int)
    parser.add_argument("--consumers", type=int, default=CONSUMERS)
    parser.add_argument("--fetch-mib", type=int, default=FETCH_MIB)
    parser.add_argument("--mib-per-s", type=float, help="aggregate rate cap (default: none)")
    parsed = parser.parse_args(args)
    return LoadSpec(
        endpoint=Endpoint(name="load", host=parsed.host, port=parsed.port),
        topic=parsed.topic,
        topic_id=parsed.topic_id,
        end_offset=parsed.end_offset,
        consumers=parsed.consumers,
        fetch_mib=parsed.fetch_mib,
        mib_per_s=parsed.mib_per_s,
    )


async def read_until_stopped(spec: LoadSpec) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tally = FetchTally()
    pace = None if spec.mib_per_s is None else Pacer(spec.mib_per_s * MIB)

    async def reader() -> None:
        while True:
            await raw_fetch_all(
                spec.endpoint,
                version=12,
                topic=spec.topic,
                topic_id=spec.topic_id,
                end_offset=spec.end_offset,
                partition_max_bytes=spec.fetch_mib * MIB,
                tally=tally,
                pace=pace,
            )

    started = time.perf_counter()
    readers = [asyncio.create_task(reader()) for _ in range(spec.consumers)]
    print(READY, flush=True)
    await stop.wait()
    seconds = time.perf_counter() - started
    for task in readers:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*readers)
    print(json.dumps({"bytes": tally.bytes, "seconds": seconds}), flush=True)


def main() -> None:
    asyncio.run(read_until_stopped(parse()))


if __name__ == "__main__":
    main()
