"""Zero-copy forwarding of response bytes the proxy need not look at (Linux ``splice``).

Most of what a pass-through proxy moves are record bytes it never reads: the body of a raw
response, and the record sets of a streamed Fetch v16+. Through a transport they are copied
from the broker's socket into a Python ``bytes`` and back into the client's socket;
``os.splice`` moves them broker socket → pipe → client socket inside the kernel instead, by
page reference (why, with the figures: ``docs/decisions/0008-pass-through-io.md``).

Rules of this file:

- It moves exactly the number of bytes it is given, no more: the caller has paused its
  transport's reading of the broker, so nothing else reads that socket meanwhile, and the
  next response stays in the socket for the transport.
- It writes to the client's socket behind its transport's back, so the caller starts a
  splice only while that transport's write buffer is empty and writes nothing to it until
  the splice ends; the bytes stay in order.
- Memory per connection is the pipe's capacity: the splice reads the broker only while the
  pipe has room, so a slow client stops it, and the broker's socket buffers (then TCP)
  push back, as the read gates do for transports.
- Bytes the caller already holds for the client (the frame's size prefix and the first
  bytes it read to learn it) go into the pipe first, as a *prelude*, and leave with the
  first spliced bytes in one send: written to the client's socket on their own, they were
  two tiny TCP segments per response, each waking the client for a few bytes.
- The last send of a splice that the caller follows with more of the response (a streamed
  Fetch's tail) is corked (``SPLICE_F_MORE``), so that its short last segment leaves with
  those bytes rather than alone. Sends within a splice are not: a corked segment leaves on
  the client's next ACK, alone, so corking every pause of the broker wakes the client more
  often, not less.
- Plain TCP only: TLS encrypts in user space, so a TLS side is never spliced.

It polls its own duplicates of the two sockets (the event loop refuses a reader on a file
descriptor that a transport owns), in an epoll of its own that the event loop watches for
the splicer's lifetime: a splice that waits arms one socket there (``EPOLLONESHOT``, one
system call) instead of adding and removing a loop reader, which costs uvloop five.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import mmap
import os
import select
import socket
from collections.abc import Callable, Sequence
from typing import Final, Literal

__all__ = ["SPLICE_AVAILABLE", "Prelude", "SpliceDone", "SpliceFailure", "Splicer"]

SPLICE_AVAILABLE: Final = hasattr(os, "splice") and hasattr(fcntl, "F_SETPIPE_SZ")
"""Whether this platform can splice (Linux, Python 3.10+)."""

_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_MORE: Final = getattr(os, "SPLICE_F_MORE", 0)
_WAKE_BYTES: Final = 128 * 1024
"""How many bytes must wait in the broker's socket before a waiting splice wakes
(SO_RCVLOWAT): enough that a wake moves a run worth its system calls, few enough that the
first bytes of an answer go on while the rest arrives. The A/Bs behind this value are in
``docs/decisions/0008-pass-through-io.md``."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SpliceFailure:
    """Why a splice stopped before its last byte: the side that failed, and how."""

    side: Literal["broker", "client"]
    error: str


SpliceDone = Callable[[SpliceFailure | None], None]
"""Called once per :meth:`Splicer.start`: ``None`` once every byte reached the client."""

Prelude = Sequence[bytes | bytearray | memoryview]
"""Bytes to send before the spliced ones (see the module's rules)."""


class Splicer:
    """Moves counted byte ranges from one socket to another through a pipe of its own."""

    __slots__ = (
        "_capacity",
        "_done",
        "_in_pipe",
        "_left",
        "_loop",
        "_lowat",
        "_more",
        "_pipe_r",
        "_pipe_w",
        "_poller",
        "_prelude",
        "_prelude_in_pipe",
        "_registered",
        "_sink",
        "_source",
        "_source_socket",
        "_waiting",
    )

    def __init__(self, source: int, sink: int, *, pipe_bytes: int) -> None:
        """Own duplicates of ``source`` (the broker's socket) and ``sink`` (the client's),
        and a pipe of up to ``pipe_bytes`` (the kernel's ``pipe-max-size`` caps it).

        :raises OSError: out of file descriptors.
        """
        self._loop = asyncio.get_running_loop()
        self._source_socket = socket.socket(fileno=os.dup(source))
        self._source = self._source_socket.fileno()
        try:
            self._sink = os.dup(sink)
            try:
                self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                os.close(self._sink)
                raise
            try:
                self._poller = select.epoll(2)
            except OSError:
                for fd in (self._sink, self._pipe_r, self._pipe_w):
                    os.close(fd)
                raise
        except OSError:
            self._source_socket.close()
            raise
        self._registered: set[int] = set()
        self._loop.add_reader(self._poller.fileno(), self._ready)
        self._lowat = 1
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._pipe_w, fcntl.F_SETPIPE_SZ, pipe_bytes)
        self._capacity: int = fcntl.fcntl(self._pipe_w, fcntl.F_GETPIPE_SZ)
        self._left = 0
        self._in_pipe = 0
        self._more = False
        self._prelude: list[memoryview] = []
        # How much of the pipe is prelude alone (no source bytes behind it yet).
        self._prelude_in_pipe = 0
        self._done: SpliceDone | None = None
        # The file descriptor the splice waits on, if any (reader for source, writer for sink).
        self._waiting: int | None = None

    @property
    def busy(self) -> bool:
        """Whether a splice is under way."""
        return self._done is not None

    def start(
        self, count: int, done: SpliceDone, prelude: Prelude = (), *, more: bool = False
    ) -> None:
        """Send ``prelude``, then move the next ``count`` bytes of the source to the sink;
        ``done`` is called once they are all written, or on the first failure (possibly
        before this returns). ``more``: the caller writes more of the response right after
        (its last segment may wait for those bytes)."""
        assert self._done is None, "one splice at a time"
        self._left = count
        self._more = more
        self._prelude = [memoryview(part).cast("B") for part in prelude if len(part)]
        self._done = done
        self._pump()

    def close(self) -> None:
        """Stop any splice (its ``done`` is not called) and release the descriptors."""
        self._waiting = None
        self._done = None
        self._loop.remove_reader(self._poller.fileno())
        self._poller.close()
        self._source_socket.close()
        for fd in (self._sink, self._pipe_r, self._pipe_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _pump(self) -> None:
        """Fill the pipe (prelude first, then the source) and empty it into the sink, until
        done or a socket would block."""
        side: Literal["broker", "client"] = "client"
        try:
            while True:
                side = "broker"
                if not self._fill():
                    return
                if not self._in_pipe:  # so the prelude and the count are through
                    self._finish(None)
                    return
                side = "client"
                flags = _FLAGS | _MORE if self._more and not self._left else _FLAGS
                written = os.splice(self._pipe_r, self._sink, self._in_pipe, flags=flags)
                if not written:  # never for a socket; a loop if it were
                    self._finish(SpliceFailure(side=side, error="the socket took nothing"))
                    return
                self._in_pipe -= written
                self._prelude_in_pipe = max(0, self._prelude_in_pipe - written)
        except BlockingIOError:
            if side == "broker":
                self._wake_at(min(self._left, _WAKE_BYTES))
            self._wait(self._sink if side == "client" else self._source)
        except OSError as err:
            self._finish(SpliceFailure(side=side, error=str(err) or type(err).__name__))

    def _fill(self) -> bool:
        """Put the prelude's next bytes, then the source's, into the pipe as far as it has
        room, so that they leave together; False once the splice failed.

        :raises BlockingIOError: the source has nothing and the pipe is empty (wait for it).
        """
        if self._prelude:
            written = self._write_prelude()
            self._in_pipe += written
            self._prelude_in_pipe += written
            if self._prelude:
                return True  # the pipe is full
        if not self._left or self._in_pipe >= self._capacity:
            return True
        try:
            moved = os.splice(
                self._source,
                self._pipe_w,
                min(self._left, self._capacity - self._in_pipe),
                flags=_FLAGS,
            )
        except BlockingIOError:
            # The broker's socket is empty, or the pipe has no free page: send what it
            # holds, then wait; but hold a prelude alone back (a tiny segment, waking the
            # client for it) while it leaves the pipe pages to spare (so the socket is empty).
            if self._in_pipe > self._prelude_in_pipe:
                return True
            if self._in_pipe and self._prelude_fills_pipe():
                return True
            raise
        if not moved:
            self._finish(SpliceFailure(side="broker", error="closed mid-response"))
            return False
        self._left -= moved
        self._in_pipe += moved
        self._prelude_in_pipe = 0
        return True

    def _prelude_fills_pipe(self) -> bool:
        """Whether the prelude in the pipe may leave it without a free page: a pipe has
        capacity / page-size pages, and a write of n bytes takes up to n / page-size + 1."""
        return self._prelude_in_pipe + mmap.PAGESIZE > self._capacity // 2

    def _write_prelude(self) -> int:
        """Write as much of the prelude as the pipe takes; how much."""
        try:
            written = os.writev(self._pipe_w, self._prelude)
        except BlockingIOError:
            return 0
        left = written
        while left and left >= len(self._prelude[0]):
            left -= len(self._prelude.pop(0))
        if left:
            self._prelude[0] = self._prelude[0][left:]
        return written

    def _wait(self, fd: int) -> None:
        """Have the next readiness of ``fd`` (readable for the source, writable for the
        sink) wake the splice, once."""
        events = (select.EPOLLIN if fd == self._source else select.EPOLLOUT) | select.EPOLLONESHOT
        if fd in self._registered:
            self._poller.modify(fd, events)
        else:
            self._poller.register(fd, events)
            self._registered.add(fd)
        self._waiting = fd

    def _ready(self) -> None:
        """The loop saw the splicer's epoll ready: take its event (which disarms it) and
        go on."""
        if not self._poller.poll(0, 1) or self._waiting is None:
            return
        self._waiting = None
        self._pump()

    def _wake_at(self, count: int) -> None:
        """Have the loop wake the splice only once ``count`` bytes wait in the broker's
        socket (SO_RCVLOWAT), not at every segment: fewer, larger splices."""
        if count != self._lowat:
            with contextlib.suppress(OSError):
                self._source_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, count)
            self._lowat = count

    def _finish(self, failure: SpliceFailure | None) -> None:
        self._wake_at(1)
        done, self._done = self._done, None
        if done is not None:
            done(failure)
