"""Catch-up readers in a process of their own: the load under which :mod:`bench.tail` measures
a tail consumer's Fetch latency.

Why a process of their own: run in the measuring process, the readers' receive and decode work
shares the tail consumer's event loop, and the tail's round trips then include the benchmark
client's own loop lag, whichever server is being measured.

Run by :func:`bench.tail.catchup_load`, not by hand::

    python -m bench.catchup_load HOST PORT TOPIC TOPIC_ID END_OFFSET --consumers 4

It prints ``reading`` once the readers are started, reads offsets [0, END_OFFSET) of
partition 0 over and over (raw Fetch v12, ``--fetch-mib`` per partition, one request in flight
per reader) until SIGTERM or SIGINT, then prints the record bytes read and the seconds as one JSON
line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
import uuid
from dataclasses import dataclass

from bench.common import MIB
from bench.passthrough import Endpoint, FetchTally, raw_fetch_all

__all__ = ["LoadSpec", "argv"]

READY = "reading"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """What the readers read, and where from."""

    endpoint: Endpoint
    topic: str
    topic_id: uuid.UUID
    end_offset: int
    consumers: int
    fetch_mib: int


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
    ]


def parse(args: list[str] | None = None) -> LoadSpec:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("topic")
    parser.add_argument("topic_id", type=uuid.UUID)
    parser.add_argument("end_offset", type=int)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--fetch-mib", type=int, default=1)
    parsed = parser.parse_args(args)
    return LoadSpec(
        endpoint=Endpoint(name="load", host=parsed.host, port=parsed.port),
        topic=parsed.topic,
        topic_id=parsed.topic_id,
        end_offset=parsed.end_offset,
        consumers=parsed.consumers,
        fetch_mib=parsed.fetch_mib,
    )


async def read_until_stopped(spec: LoadSpec) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tally = FetchTally()

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
