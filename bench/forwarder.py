"""A plain TCP forwarder: the floor any Kafka proxy is measured against, and a latency injector.

It copies bytes both ways between each client and ``--target`` and understands nothing, so
a client that bootstraps through it learns the broker's own address from Metadata and
leaves it: only single-connection workloads (the raw Fetch loops) measure through it.
Kroxylicious, the reference Kafka proxy, is not on this machine's Maven Central mirror
(``io.kroxylicious:kroxylicious-app`` is missing; only its libraries are there), so the
pass-through benchmark compares tierproxy with this forwarder instead.

With ``--first-byte-delay-ms`` it holds each answer's first byte after a request for that
long (a GET's time to first byte on object storage): the cold catch-up question.

``--splice`` forwards with ``os.splice`` in two threads per connection instead of asyncio:
the bytes go socket to pipe to socket inside the kernel. The asyncio forwarder costs about
1.1 CPU-s per GiB (more than the proxy reading through it); on a shared two-core machine
that CPU, not the delay, slowed the delayed catch-up. Object storage's latency costs the
proxy's machine no CPU, so the object-storage-latency benchmark uses this mode. The
pass-through anchor stays the asyncio forwarder (what a proxy written the same way costs).

Run::

    .venv/bin/python -m bench.forwarder --listen 127.0.0.1:19092 --target 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvloop

from proxy.embedded import ManagedProcess, free_port

BUFFER = 1 << 20
PIPE_BYTES = 1 << 20
"""The kernel pipe between the two sockets of a spliced direction (Linux's default maximum,
``/proc/sys/fs/pipe-max-size``): bytes moved per pair of ``splice`` calls."""


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    answered: asyncio.Event,
    *,
    delay: float | None,
) -> None:
    """Copy ``reader`` to ``writer``. Requests (``delay`` None) clear ``answered``; answers
    with a ``delay`` wait that long before their first bytes after each request."""
    try:
        while data := await reader.read(BUFFER):
            if delay is None:
                answered.clear()
            elif delay and not answered.is_set():
                await asyncio.sleep(delay)
                answered.set()
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int], delay_ms: float) -> None:
    delay = delay_ms / 1000

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection(*target, limit=BUFFER)
        answered = asyncio.Event()
        answered.set()
        await asyncio.gather(
            _pipe(client_r, upstream_w, answered, delay=None),
            _pipe(upstream_r, client_w, answered, delay=delay),
        )

    server = await asyncio.start_server(handle, *listen, limit=BUFFER)
    async with server:
        await server.serve_forever()


def serve_spliced(listen: tuple[str, int], target: tuple[str, int], delay_ms: float) -> None:
    """Forward every connection to ``target`` with ``os.splice`` (see the module docstring)."""
    server = socket.create_server(listen)
    while True:
        client, _address = server.accept()
        threading.Thread(
            target=_spliced_connection, args=(client, target, delay_ms / 1000), daemon=True
        ).start()


def _spliced_connection(client: socket.socket, target: tuple[str, int], delay: float) -> None:
    """Both directions of one connection: answers in a second thread, requests in this one."""
    with client, socket.create_connection(target) as upstream:
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        requested = threading.Event()
        answers = threading.Thread(
            target=_splice, args=(upstream, client, requested, delay), daemon=True
        )
        answers.start()
        _splice(client, upstream, requested, None)
        answers.join()


def _splice(
    source: socket.socket, sink: socket.socket, requested: threading.Event, delay: float | None
) -> None:
    """:func:`_pipe` in the kernel: requests (``delay`` None) set ``requested`` before they
    are forwarded; an answer's first bytes after one wait ``delay``."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    try:
        while True:
            select.select([source], [], [])
            if delay is None:
                requested.set()
            elif requested.is_set():
                time.sleep(delay)
                requested.clear()
            moved = os.splice(source.fileno(), write_end, PIPE_BYTES)
            if moved == 0:
                break
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
    except OSError:
        pass
    finally:
        os.close(read_end)
        os.close(write_end)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def running(
    target: str, log_dir: Path, *, delay_ms: float = 0.0, splice: bool = False
) -> Iterator[tuple[int, int]]:
    """A forwarder process to ``target`` (``host:port``), ready once its port accepts;
    yields its port and PID."""
    port = free_port()
    process = ManagedProcess(
        "forwarder",
        [
            sys.executable, "-m", "bench.forwarder", "--listen", f"127.0.0.1:{port}",
            "--target", target, "--first-byte-delay-ms", str(delay_ms),
            *(["--splice"] if splice else []),
        ],
        log_path=log_dir / f"forwarder-{port}.log",
    )  # fmt: skip
    process.start()
    try:
        process.wait_ready(lambda: _accepts(port), timeout_s=30)
        assert process.pid is not None
        yield port, process.pid
    finally:
        process.stop()


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=_address, required=True)
    parser.add_argument("--target", type=_address, required=True)
    parser.add_argument("--first-byte-delay-ms", type=float, default=0.0)
    parser.add_argument("--splice", action="store_true", help="forward in the kernel")
    args = parser.parse_args()
    if args.splice:
        serve_spliced(args.listen, args.target, args.first_byte_delay_ms)
    else:
        uvloop.run(serve(args.listen, args.target, args.first_byte_delay_ms))


if __name__ == "__main__":
    main()
