"""bench.forwarder, both ways of forwarding: bytes pass unchanged both ways, and an answer
after a request waits at least the first-byte delay (a lower bound: a loaded machine only
adds to it)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import forwarder

DELAY_MS = 150.0


@pytest.fixture
def answering_server() -> Iterator[int]:
    """A server that answers every request with its bytes reversed, 64 KiB times over."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed at teardown
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    def answer(conn: socket.socket) -> None:
        with conn:
            while request := conn.recv(65536):
                conn.sendall(request[::-1] * 65536)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("splice", [False, True])
def test_answers_pass_unchanged_after_the_first_byte_delay(
    answering_server: int, tmp_path: Path, splice: bool
) -> None:
    target = f"127.0.0.1:{answering_server}"
    with (
        forwarder.running(target, tmp_path, delay_ms=DELAY_MS, splice=splice) as (port, _pid),
        socket.create_connection(("127.0.0.1", port)) as client,
    ):
        for request in (b"first", b"second"):
            started = time.monotonic()
            client.sendall(request)
            expected = request[::-1] * 65536
            answer = bytearray()
            while len(answer) < len(expected):
                answer += client.recv(1 << 20)
            assert time.monotonic() - started >= DELAY_MS / 1000
            assert answer == expected
