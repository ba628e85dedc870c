"""Ranged GETs of S3 objects read straight into their buffer: the remote read path's lean GET.

Receiving a GET's body through botocore and aiohttp costs the proxy CPU per byte: aiohttp's
parser hands the body over in pieces, its ``StreamReader`` queues them, and ``read()`` joins
them into one ``bytes`` (what that costs, from ``bench.s3_ranged_read``:
``docs/decisions/0009-remote-read-path.md``). Here the socket's bytes go straight into the
buffer the chunk cache keeps (an :class:`asyncio.BufferedProtocol`: the kernel copies into it,
nothing else does).

Signing stays botocore's: :class:`RangedGets` asks the S3 client for a presigned URL
(``generate_presigned_url``: endpoint, addressing style, region, credentials and their
refresh, all as for any other request), kept per object for :data:`URL_REUSE_SECONDS`. The
``Range`` header is not part of the signature, as S3 allows.

Only the plain answer is handled here: ``206 Partial Content`` with a ``Content-Length``
and the ``Content-Range`` asked for. Any other answer (an error, a missing object, 416, a
server that ignores ``Range``, a chunked body) gives ``None``, and the caller asks again
through botocore, which sorts errors as it always has (:mod:`storage.rsm.s3_errors`). So
does a transport failure (connection refused or closed mid-answer, no byte within the read
timeout), and it also pauses these GETs for :data:`PAUSE_SECONDS` with one warning: what
botocore reaches and this does not (an HTTP proxy from the environment, a CA bundle other
than ``AWS_CA_BUNDLE`` or the system's) keeps working, through botocore.
Connections are kept alive in a pool of at most ``max_connections``.

Each GET is timed to its first byte and its last, and logged with the GETs in flight at
DEBUG (``log.level``; logger ``storage.rsm.s3_ranged_get``): whether read-ahead keeps enough
GETs in flight, and whether a slow GET waited for the store (the first byte) or for its
bytes. The read-ahead is not sized from the first byte: on a store that queues GETs, the
first byte comes later the more GETs are in flight, so it measures the store's queue as
much as its latency, as the whole GET that the chunk cache times does.

Bodies are reused: the chunk cache gives back the chunks it evicts (:meth:`RangedGets.recycle`)
and the next answer of the same length is read into one of them (:class:`SpareBodies` says
why and when it is safe).
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

from storage.log_event import event
from storage.read_ahead import MAX_READ_AHEAD_BYTES
from storage.unfilled import unfilled_bytearray

__all__ = [
    "MAX_HEAD_BYTES",
    "PAUSE_SECONDS",
    "URL_EXPIRY_SECONDS",
    "URL_REUSE_SECONDS",
    "Presign",
    "RangedGets",
    "ResponseReader",
    "SignedGet",
    "SpareBodies",
]

_log = logging.getLogger(__name__)

URL_REUSE_SECONDS: Final = 300.0
"""How long one presigned URL serves an object. URLs are signed for three times as long,
so a URL in use never expires, while credentials that botocore refreshes reach new URLs
within minutes."""
URL_EXPIRY_SECONDS: Final = int(3 * URL_REUSE_SECONDS)
MAX_HEAD_BYTES: Final = 64 * 1024
"""Status line and headers of one answer: S3's are under 2 KiB; more is not S3."""
_HEAD_READ_BYTES: Final = 4096
"""Bytes read at a time until the head is whole: a head and little of the body, which is
copied once more (from here into its buffer), unlike the rest of it."""
PAUSE_SECONDS: Final = 60.0
"""How long a transport failure sends GETs through botocore instead."""
_CONTENT_RANGE: Final = re.compile(rb"bytes (\d+)-(\d+)/(\d+|\*)")
_SPARE_BYTES: Final = MAX_READ_AHEAD_BYTES
"""Bytes of bodies kept for reuse at most: one reader's deepest read-ahead. A catch-up
reader frees about one body per GET in steady state (the chunk its read admits to the cache
evicts one), but a reader that starts (or starts again) sends its whole read-ahead at once,
up to 16 GETs of 4 MiB, before the cache evicts anything."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedGet:
    """How to GET an object: its URL (presigned, or plain) and the headers that authorise
    the request (a bearer token), reusable for :data:`URL_REUSE_SECONDS`."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()


Presign = Callable[[str, str], Awaitable[SignedGet]]
"""``(bucket, key)`` to a signed GET of the object (S3: a presigned URL; Google Cloud
Storage and Azure Blob Storage: a URL with a SAS or a bearer token)."""


class _UnexpectedAnswerError(Exception):
    """The server answered something other than the plain 206 asked for."""


class SpareBodies:
    """Buffers of earlier answers, filled again instead of allocating new ones.

    Each 4 KiB page of a new 4 MiB ``bytearray`` faults in before the socket writes into
    it (new ones are not zero-filled, :mod:`storage.unfilled`, but their pages still fault
    in where the allocator maps fresh memory); the pages of a buffer already in use are
    mapped. A spare is reused only when nothing else refers to it (CPython's reference
    count): a view of it that a Fetch response is still writing to a client's socket, a
    disk-tier write or a reader that has not resumed yet all hold a reference.
    """

    def __init__(self, limit_bytes: int = _SPARE_BYTES) -> None:
        self._spare: deque[bytearray] = deque()
        self._limit = limit_bytes
        self._bytes = 0

    def give(self, body: bytearray) -> None:
        """Keep ``body`` for a later answer of its length (the oldest spares go if that
        exceeds the limit)."""
        self._spare.append(body)
        self._bytes += len(body)
        while self._bytes > self._limit:
            self._bytes -= len(self._spare.popleft())

    def take(self, length: int) -> bytearray:
        """A buffer of ``length`` bytes to read an answer into: a spare no one refers to
        any more, or a new one, not zero-filled (the answer overwrites it whole)."""
        for index in range(len(self._spare)):
            if len(self._spare[index]) == length and self._references(index) == _UNREFERENCED:
                body = self._spare[index]
                del self._spare[index]
                self._bytes -= length
                return body
        return unfilled_bytearray(length)

    def _references(self, index: int) -> int:
        """References to the spare at ``index``, counted the same way for every spare (and
        for the probe that sets :data:`_UNREFERENCED`)."""
        return sys.getrefcount(self._spare[index])


def _unreferenced() -> int:
    """What :meth:`SpareBodies._references` counts for a spare no one else refers to,
    measured on this interpreter rather than assumed."""
    probe = SpareBodies()
    probe.give(bytearray())
    return probe._references(0)


_UNREFERENCED: Final = _unreferenced()


class ResponseReader(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection: reads an answer's head, then its body in place.

    The head is read into a scratch buffer; once it is whole, a buffer of the body's
    ``Content-Length`` is taken (``allocate``) and the socket reads into it.
    """

    def __init__(
        self,
        allocate: Callable[[int], bytearray] = unfilled_bytearray,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._allocate = allocate
        self._clock = clock
        self.transport: asyncio.Transport | None = None
        self.reusable = True
        self.received = 0
        """Bytes received so far: the read timeout is a time without progress."""
        self.first_byte_at: float | None = None
        """When the first byte of the answer expected (:meth:`begin`) arrived."""
        self._scratch = bytearray(_HEAD_READ_BYTES)
        self._head = bytearray()
        self._body: bytearray | None = None
        self._view: memoryview | None = None
        self._filled = 0
        self._expected: tuple[int, int] = (0, 0)
        self._answer: asyncio.Future[bytearray | None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def begin(self, start: int, end: int) -> asyncio.Future[bytearray | None]:
        """Expect the answer to a GET of bytes ``[start, end)``."""
        self._head.clear()
        self._body, self._view, self._filled = None, None, 0
        self._expected = (start, end)
        self.first_byte_at = None
        self._answer = asyncio.get_running_loop().create_future()
        return self._answer

    def get_buffer(self, sizehint: int) -> memoryview | bytearray:
        if self._view is not None and self._filled < len(self._view):
            return self._view[self._filled :]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self.first_byte_at is None:
            self.first_byte_at = self._clock()
        self.received += nbytes
        if self._answer is None or self._answer.done():
            self._fail(ConnectionResetError("bytes from the server while no GET was asked"))
        elif self._body is None:
            self._head += memoryview(self._scratch)[:nbytes]
            self._read_head()
        else:
            self._filled += nbytes
            self._finish_if_complete()

    def eof_received(self) -> bool:
        self._fail(ConnectionResetError("the server closed the connection mid-answer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(exc or ConnectionResetError("the connection closed mid-answer"))

    def _fail(self, err: Exception) -> None:
        self.reusable = False
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(err)
        if self.transport is not None:
            self.transport.abort()

    def _read_head(self) -> None:
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > MAX_HEAD_BYTES:
                self._fail(ConnectionResetError("an answer head over 64 KiB: not S3"))
            return
        try:
            length = self._check_head(bytes(self._head[:end]))
        except _UnexpectedAnswerError:
            self.reusable = False
            assert self._answer is not None
            self._answer.set_result(None)
            return
        rest = memoryview(self._head)[end + 4 :]
        if len(rest) > length:
            self._fail(ConnectionResetError("more bytes than the answer's Content-Length"))
            return
        self._body = self._allocate(length)
        self._view = memoryview(self._body)
        self._view[: len(rest)] = rest
        self._filled = len(rest)
        self._finish_if_complete()

    def _check_head(self, head: bytes) -> int:
        """The body's length, if the head is that of the plain 206 asked for."""
        status_line, *lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or parts[1] != b"206":
            raise _UnexpectedAnswerError
        headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"connection", b"").lower() == b"close":
            self.reusable = False
        found = _CONTENT_RANGE.fullmatch(headers.get(b"content-range", b""))
        length = headers.get(b"content-length", b"")
        if found is None or not length.isdigit() or int(found[1]) != self._expected[0]:
            raise _UnexpectedAnswerError
        size = int(length)
        if (
            size != int(found[2]) - int(found[1]) + 1
            or size > self._expected[1] - self._expected[0]
        ):
            raise _UnexpectedAnswerError
        return size

    def _finish_if_complete(self) -> None:
        assert self._view is not None and self._body is not None and self._answer is not None
        if self._filled == len(self._view):
            self._view.release()
            # Hold nothing of a finished answer: its body may be recycled (SpareBodies).
            body, answer = self._body, self._answer
            self._view, self._body, self._answer = None, None, None
            if not answer.done():
                answer.set_result(body)


class RangedGets:
    """Ranged GETs over a pool of keep-alive connections (see the module docstring)."""

    def __init__(
        self,
        presign: Presign,
        *,
        max_connections: int,
        connect_timeout: float,
        read_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        ca_file: str | None = None,
        store: str = "s3",
    ) -> None:
        """:param ca_file: CA bundle for HTTPS endpoints (the system's by default).
        :param store: the URL scheme of the store's objects in log lines (``s3``, ``gs``...).
        """
        self._presign = presign
        self._ca_file = ca_file
        self._store = store
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: deque[tuple[str, ResponseReader]] = deque()
        self._urls: dict[tuple[str, str], tuple[float, SignedGet]] = {}
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._clock = clock
        self._paused_until = float("-inf")
        self._spares = SpareBodies()
        self._in_flight = 0

    async def get(self, bucket: str, key: str, start: int, end: int) -> bytearray | None:
        """Bytes ``[start, end)`` of the object (fewer at its end), or ``None``: ask botocore
        (any answer but a plain 206, a transport failure, or paused after one)."""
        if self._clock() < self._paused_until:
            return None
        try:
            return await self._get(bucket, key, start, end)
        except (OSError, TimeoutError) as err:
            self._paused_until = self._clock() + PAUSE_SECONDS
            event(
                _log,
                logging.WARNING,
                "remote.ranged_get.paused",
                msg=f"ranged GET of {self._store}://{bucket}/{key} failed ({err!r}); GETs go "
                f"through the regular client for {PAUSE_SECONDS:.0f} s",
                bucket=bucket,
                key=key,
            )
            return None

    async def _get(self, bucket: str, key: str, start: int, end: int) -> bytearray | None:
        signed = await self._url(bucket, key)
        url = urlsplit(signed.url)
        target = f"{url.path}?{url.query}" if url.query else url.path
        headers = "".join(f"{name}: {value}\r\n" for name, value in signed.headers)
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Range: bytes={start}-{end - 1}\r\nUser-Agent: tierproxy\r\n{headers}\r\n"
        ).encode()
        origin = f"{url.scheme}://{url.netloc}"
        async with self._slots:
            reader = await self._connection(origin, url.scheme, url.hostname or "", url.port)
            answer = reader.begin(start, end)
            assert reader.transport is not None
            asked = self._clock()
            reader.transport.write(request)
            self._in_flight += 1
            try:
                body = await self._answer(reader, answer)
                self._log_timing(bucket, key, start, asked, reader)
                return body
            finally:
                self._in_flight -= 1
                if reader.reusable and answer.done() and not answer.cancelled():
                    self._idle.append((origin, reader))
                elif reader.transport is not None:
                    reader.transport.abort()

    async def _answer(
        self, reader: ResponseReader, answer: asyncio.Future[bytearray | None]
    ) -> bytearray | None:
        """The answer, unless no byte arrives for the read timeout (as botocore's)."""
        while True:
            received = reader.received
            done, _pending = await asyncio.wait({answer}, timeout=self._read_timeout)
            if done:
                return answer.result()
            if reader.received == received:
                raise TimeoutError(f"no byte of the answer for {self._read_timeout} s")

    def _log_timing(
        self, bucket: str, key: str, start: int, asked: float, reader: ResponseReader
    ) -> None:
        """Log (DEBUG) when the answer to a GET asked at ``asked`` began and ended."""
        if not _log.isEnabledFor(logging.DEBUG) or reader.first_byte_at is None:
            return
        first_ms = (reader.first_byte_at - asked) * 1000
        last_ms = (self._clock() - asked) * 1000
        event(
            _log,
            logging.DEBUG,
            "remote.ranged_get.timing",
            msg=f"ranged GET of {self._store}://{bucket}/{key} from byte {start}: first byte "
            f"after {first_ms:.1f} ms, last after {last_ms:.1f} ms, {self._in_flight} GETs in "
            "flight",
            bucket=bucket,
            key=key,
        )

    def recycle(self, body: bytearray) -> None:
        """``body`` (an answer of :meth:`get`) is no longer kept: a later answer of its
        length may be read into it once no one refers to it."""
        self._spares.give(body)

    def close(self) -> None:
        """Close the idle connections."""
        while self._idle:
            _origin, reader = self._idle.popleft()
            if reader.transport is not None:
                reader.transport.abort()

    async def _url(self, bucket: str, key: str) -> SignedGet:
        now = self._clock()
        cached = self._urls.get((bucket, key))
        if cached is not None and now - cached[0] < URL_REUSE_SECONDS:
            return cached[1]
        url = await self._presign(bucket, key)
        if len(self._urls) > 10_000:
            self._urls.clear()  # old objects' URLs; the next GET of each signs again
        self._urls[(bucket, key)] = (now, url)
        return url

    async def _connection(
        self, origin: str, scheme: str, host: str, port: int | None
    ) -> ResponseReader:
        while self._idle:
            idle_origin, reader = self._idle.popleft()
            if idle_origin == origin and reader.reusable:
                return reader
            if reader.transport is not None:
                reader.transport.abort()
        context = None
        if scheme == "https":
            context = ssl.create_default_context(cafile=self._ca_file)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _transport, reader = await loop.create_connection(
                lambda: ResponseReader(self._spares.take, self._clock),
                host,
                port or (443 if context is not None else 80),
                ssl=context,
            )
        return reader
