"""storage.rsm.s3_ranged_get against a scripted HTTP server on 127.0.0.1: answers read in
place whatever their chunking, keep-alive, and every other answer or failure handed back
to botocore."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from storage.rsm.s3_ranged_get import RangedGets, SignedGet, SpareBodies

OBJECT = bytes(range(256)) * 64  # 16 KiB
TICKS = itertools.count()
"""A clock's readings, one second apart."""

Answer = Callable[[bytes], list[bytes]]
"""From a request's head, the pieces to write back (each written and drained on its own)."""


def partial(start: int, end: int, *, extra_headers: str = "") -> list[bytes]:
    body = OBJECT[start:end]
    head = (
        f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(body)}\r\n"
        f"Content-Range: bytes {start}-{start + len(body) - 1}/{len(OBJECT)}\r\n"
        f"{extra_headers}\r\n"
    ).encode()
    whole = head + body
    cuts = [0, 7, len(head) - 1, len(head) + 3, len(head) + 1000, len(whole)]
    return [whole[a:b] for a, b in itertools.pairwise(cuts) if a < b]


def requested_range(head: bytes) -> tuple[int, int]:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"range: bytes="):
            first, last = line.split(b"=", 1)[1].split(b"-")
            return int(first), int(last) + 1
    raise AssertionError("no Range header")


class Server:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.connections = 0
        self.heads: list[bytes] = []
        self.handlers: set[asyncio.Task[Any]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                for piece in self.answers.pop(0)(head):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            await close(writer)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def read(gets: RangedGets, start: int, end: int) -> bytes:
    data = await gets.get("b", "k.log", start, end)
    assert data is not None
    return bytes(data)


@pytest.fixture
def clock() -> Callable[[], float]:
    return time.monotonic


@pytest.fixture
async def server(clock: Callable[[], float]) -> AsyncIterator[tuple[Server, RangedGets, list[str]]]:
    script = Server([])
    listener = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    signed: list[str] = []

    async def presign(bucket: str, key: str) -> SignedGet:
        signed.append(key)
        return SignedGet(
            url=f"http://127.0.0.1:{port}/{bucket}/{key}?X-Amz-Signature=abc",
            headers=(("x-test-auth", "token"),),
        )

    gets = RangedGets(presign, max_connections=2, connect_timeout=5, read_timeout=5, clock=clock)
    yield script, gets, signed
    gets.close()
    listener.close()
    await listener.wait_closed()
    await asyncio.wait_for(asyncio.gather(*script.handlers, return_exceptions=True), 5)


async def test_answers_are_read_in_place_over_one_kept_alive_connection(
    server: tuple[Server, RangedGets, list[str]],
) -> None:
    script, gets, signed = server
    script.answers = [lambda head: partial(*requested_range(head))] * 3
    assert await read(gets, 0, 5000) == OBJECT[:5000]
    assert await read(gets, 100, 101) == OBJECT[100:101]
    assert await read(gets, 16000, 20000) == OBJECT[16000:]  # the object's end
    assert script.connections == 1
    assert signed == ["k.log"]  # one presigned URL serves the object
    assert script.heads[0].startswith(b"GET /b/k.log?X-Amz-Signature=abc HTTP/1.1\r\n")
    assert b"\r\nRange: bytes=0-4999\r\n" in script.heads[0]
    assert b"\r\nx-test-auth: token\r\n" in script.heads[0]  # a bearer token goes along


@pytest.mark.parametrize("clock", [lambda: float(next(TICKS))])
async def test_each_get_is_timed_to_its_first_byte_and_its_last(
    server: tuple[Server, RangedGets, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    """On a clock that ticks once per reading: asked at one tick, the first byte read at the
    next (by the connection's reader), the last at the one after."""
    script, gets, _signed = server
    script.answers = [lambda head: partial(*requested_range(head))] * 2
    with caplog.at_level(logging.DEBUG, logger="storage.rsm.s3_ranged_get"):
        assert await read(gets, 0, 5000) == OBJECT[:5000]
        assert await read(gets, 5000, 6000) == OBJECT[5000:6000]
    timings = [r.getMessage() for r in caplog.records if "first byte" in r.getMessage()]
    assert timings == [
        f"ranged GET of s3://b/k.log from byte {start}: first byte after 1000.0 ms, last "
        "after 2000.0 ms, 1 GETs in flight"
        for start in (0, 5000)
    ]


async def test_gets_are_not_timed_without_debug_logging(
    server: tuple[Server, RangedGets, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    script, gets, _signed = server
    script.answers = [lambda head: partial(*requested_range(head))]
    with caplog.at_level(logging.INFO, logger="storage.rsm.s3_ranged_get"):
        assert await read(gets, 0, 100) == OBJECT[:100]
    assert not caplog.records


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nnope!",
        b"HTTP/1.1 200 OK\r\nContent-Length: 16384\r\n\r\n" + OBJECT,
        b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n"
        b"Content-Range: bytes 7-16/16384\r\n\r\n" + OBJECT[7:17],
        b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Range: bytes 0-9/16384\r\n\r\na\r\n" + OBJECT[:10] + b"\r\n0\r\n\r\n",
    ],
    ids=["error", "range ignored", "another range", "chunked"],
)
async def test_any_other_answer_is_none_and_its_connection_dropped(
    server: tuple[Server, RangedGets, list[str]], answer: bytes
) -> None:
    script, gets, _signed = server
    script.answers = [lambda _head: [answer], lambda head: partial(*requested_range(head))]
    assert await gets.get("b", "k.log", 0, 10) is None
    assert await read(gets, 0, 10) == OBJECT[:10]
    assert script.connections == 2


async def test_a_connection_closed_mid_answer_pauses_these_gets(
    server: tuple[Server, RangedGets, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    script, gets, _signed = server
    script.answers = [lambda head: partial(*requested_range(head))[:-1]]
    assert await gets.get("b", "k.log", 0, 5000) is None
    assert "go through the regular client for 60 s" in caplog.text
    script.answers = [lambda head: partial(*requested_range(head))]
    assert await gets.get("b", "k.log", 0, 5000) is None  # paused: botocore answers
    assert script.connections == 1


async def test_connection_close_is_not_reused(
    server: tuple[Server, RangedGets, list[str]],
) -> None:
    script, gets, _signed = server
    script.answers = [
        lambda head: partial(*requested_range(head), extra_headers="Connection: close\r\n"),
        lambda head: partial(*requested_range(head)),
    ]
    assert await read(gets, 0, 10) == OBJECT[:10]
    assert await read(gets, 10, 20) == OBJECT[10:20]
    assert script.connections == 2


async def test_a_server_that_does_not_answer_in_the_read_timeout_gives_none() -> None:
    handlers: list[asyncio.Task[Any]] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        await reader.read()
        await close(writer)

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]

    async def presign(bucket: str, key: str) -> SignedGet:
        return SignedGet(url=f"http://127.0.0.1:{port}/{bucket}/{key}")

    gets = RangedGets(presign, max_connections=1, connect_timeout=5, read_timeout=0.05)
    try:
        assert await gets.get("b", "k.log", 0, 10) is None
    finally:
        gets.close()
        listener.close()
        await listener.wait_closed()
        await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), 5)


def test_a_spare_is_reused_only_when_no_one_refers_to_it() -> None:
    spares = SpareBodies(limit_bytes=20)
    body = bytearray(b"x" * 10)
    spares.give(body)
    body_id = id(body)  # the spare keeps the object alive: its id stays its own
    view = memoryview(body)  # a response still writing it out
    del body
    assert id(spares.take(10)) != body_id
    view.release()
    del view
    assert id(spares.take(9)) != body_id  # another length
    taken = spares.take(10)  # held: a freed body's id could be the next new buffer's
    assert id(taken) == body_id
    assert spares.take(10) is not taken  # taken: no longer a spare


def test_spares_beyond_the_byte_limit_go_oldest_first() -> None:
    """A reader that starts again sends its whole read-ahead at once: as many spares as fit
    the limit are kept for it, whatever their number."""
    spares = SpareBodies(limit_bytes=30)
    bodies = [bytearray(10) for _ in range(4)]
    kept = {id(body) for body in bodies[1:]}  # alive as spares: their ids stay theirs
    for body in bodies:
        spares.give(body)
    del bodies, body
    taken = [spares.take(10) for _ in range(4)]
    assert [id(body) in kept for body in taken] == [True, True, True, False]


async def test_an_answer_is_read_into_a_recycled_body_of_its_length(
    server: tuple[Server, RangedGets, list[str]],
) -> None:
    script, gets, _signed = server
    script.answers = [lambda head: partial(*requested_range(head))] * 3
    first = await gets.get("b", "k.log", 0, 5000)
    assert first is not None
    held = memoryview(first)
    gets.recycle(first)
    second = await gets.get("b", "k.log", 5000, 10000)
    assert second is not None
    assert second is not first  # a view of it is still held
    assert held == OBJECT[:5000]
    held.release()
    gets.recycle(second)
    spares = {id(first), id(second)}  # the spares keep them alive: their ids stay theirs
    del first, second, held
    third = await gets.get("b", "k.log", 10000, 15000)
    assert third is not None
    assert id(third) in spares  # read into a recycled body
    assert third == OBJECT[10000:15000]
