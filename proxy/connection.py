"""Connection pairs: a client connection and its own connection to the broker it addressed.

Rules of this file (the only module that writes to transports):

- Requests reach the broker in the order the client sent them, as the client's bytes unless
  an interceptor rewrote them. The router (:mod:`proxy.router`) decides per frame; this file
  only moves frames and keeps order.
- Responses go back in request order (Kafka clients match them by position). Two queues
  keep it: ``_ordered`` holds every request still owed a response, in client order;
  ``_awaiting`` holds the forwarded ones, in the order the broker will answer them. A Produce
  with ``acks=0`` gets no response and enters neither.
- A raw response whose request heads ``_ordered`` streams through as it arrives, chunk by
  chunk, never assembled in memory. So does an intercepted one whose exchange offers a
  :class:`~proxy.response_stream.ResponseStream` (a Fetch whose interceptors judge only its tail):
  all but its tail goes out as it arrives, and the tail, possibly rewritten to the same
  length, completes it. Any other response is kept until everything before it has been
  written; an intercepted one is assembled and handed to its exchange.
- Bytes of a streamed response that the proxy need not read (the rest of a raw one, the
  record sets a ResponseStream skips) are spliced broker socket → client socket by
  :mod:`proxy.splice` when both sides are plain TCP, at least 64 KiB remain and the
  client's write buffer is empty; the upstream transport does not read meanwhile.
- What one read of the broker produces for the client is written once, at the end of the
  read (``_unsent``): a streamed response's size prefix and first bytes leave in one
  write, or go into the splice's pipe ahead of the spliced bytes. Anything else written
  to the client first sends what is unsent, so order holds; nothing stays unsent between
  reads.
- Back-pressure, uvicorn style: reading from a side pauses while the other side's write
  buffer is above the high-water mark, and resumes below the low-water mark. Responses held
  behind a slow one count too, so nothing buffers without bound.
- An intercepted request's exchange (what its interceptors keep until its response) is
  released when its entry leaves ``_ordered``: its response written, or the pair closed.
  While the exchanges of all pairs hold more than the router's
  :class:`~proxy.exchange_memory.ExchangeMemory` bound, no request is read.
- A drain (shutdown) goes in stages, never cutting a response: *serving* (requests still
  read and answered, for a while), *finishing* (reading stopped, responses owed still
  written), *closing* (nothing owed: the client side is half-closed, so the client reads
  every byte and then the end, and what it still sends is read and dropped until it
  closes). A close with unread input would send a reset, which may destroy a response the
  client has not read yet; Kafka's clients retry a request that a closed connection left
  unanswered.
- Either side closing closes the pair, with one log line saying why. A close for bad input
  (or a timeout, or a side gone with responses owed) is counted and its line rate-limited
  (:mod:`proxy.bad_connections`).
- Two clocks per pair, checked by the server's once-a-second sweep (:meth:`expire`): time
  since the last byte either way, and time since the request being received began.

A pair is one state machine (its two queues, the response being received, the holds and the
close), and everything that changes it lives here; the read gate and the splicer, which know
nothing of Kafka, are apart (:mod:`proxy.flow_control`, :mod:`proxy.splice`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar, cast

from protocol.buffers import Buffers
from protocol.errors import RemoteProtocolError
from protocol.frames import FrameDecoder, FrameTooLarge, InvalidFrameSize, foreign_protocol
from proxy import audit
from proxy import bad_connections as reasons
from proxy.bad_connections import BadConnectionLog
from proxy.config import HostPort
from proxy.flow_control import ReadGate
from proxy.interceptors.base import ConnectionInfo
from proxy.logs import event
from proxy.metrics import ProxyMetrics, api_name
from proxy.resolver import Resolver, SocketAddress
from proxy.response_stream import ResponseStream
from proxy.router import InterceptedExchange, Router
from proxy.splice import SPLICE_AVAILABLE, SpliceFailure, Splicer

__all__ = ["ConnectionPair", "PairSettings"]

_log = logging.getLogger("tierproxy.connection")

_Response = TypeVar("_Response", bytes | bytearray, bytes | bytearray | Buffers)

_SIZE: Final = struct.Struct(">i")
_SIZE_BYTES: Final = _SIZE.size

# Hold reasons of the read gates.
_CONNECTING: Final = "connecting"
_PEER_BUFFER_FULL: Final = "peer-write-buffer-full"
_HELD_RESPONSES: Final = "held-responses"
_DRAINING: Final = "draining"
_CLIENT_CLOSED: Final = "client closed"
_SPLICING: Final = "splicing"
_PLANS_FULL: Final = "request-plans-full"

# Stages of a drain (see the rules above).
_SERVING: Final = "serving"
_FINISHING: Final = "finishing"
_CLOSING: Final = "closing"

_LINGER_S: Final = 5.0
"""How long a half-closed client may take to close its side before the pair closes anyway:
Kafka's clients close at once when they read the end of the stream."""

_SPLICE_MIN_BYTES: Final = 64 * 1024
"""The fewest bytes worth a splice: it costs a few more system calls than copying one
chunk through Python (pause, pipe in, pipe out, resume), which only larger runs repay."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PairSettings:
    """What every connection pair of a listener shares."""

    upstream_ssl: ssl.SSLContext | None
    max_request_bytes: int
    high_water: int
    low_water: int
    connect_timeout: float
    idle_timeout: float | None
    """Kafka's ``connections.max.idle.ms`` in seconds; None: no limit."""
    request_receive_timeout: float | None
    """Longest a request frame may take to arrive once begun, in seconds; None: no limit."""
    bad_log: BadConnectionLog
    splice: bool
    """Whether response bytes the proxy need not see may be spliced (plain TCP, Linux)."""
    resolver: Resolver
    """The brokers' addresses (:mod:`proxy.resolver`): known ones at once, one lookup per
    name at a time."""


_READ_BYTES: Final = 256 * 1024
"""Most a read of the broker takes: uvloop's own read size."""

_SPLICE_LEAD_BYTES: Final = 4096
"""What a read takes when the next response will likely be spliced: its size prefix and,
for a Fetch v16+, the walk to its first record set, so that the splice, not a copy through
Python, moves the rest."""

_read_buffers = threading.local()


def _read_buffer() -> memoryview:
    """The read buffer of this thread's event loop, shared by its pairs: the loop runs one
    read callback at a time, and each read is copied out before its callback returns."""
    buffer: memoryview | None = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = memoryview(bytearray(_READ_BYTES))
    return buffer


class _InFlight:
    """A request still owed a response."""

    __slots__ = (
        "api_key",
        "buffer",
        "exchange",
        "response",
        "size",
        "spliced",
        "started",
        "stream",
        "streaming",
    )

    def __init__(self, api_key: int, exchange: InterceptedExchange | None) -> None:
        self.api_key = api_key
        self.exchange = exchange
        self.started = time.perf_counter()
        self.streaming = False
        # Whether some of the response went through the splicer.
        self.spliced = False
        # An intercepted response that streams all but its tail (see ResponseStream).
        self.stream: ResponseStream | None = None
        # Size of the response frame with its prefix: the broker's once its prefix arrived,
        # then the one written to the client.
        self.size = 0
        # Bytes of the response received so far when it is not streamed.
        self.buffer: bytearray | None = None
        # The whole response frame (size prefix included, possibly in parts) once it may be
        # written, and its size.
        self.response: tuple[bytes | bytearray | memoryview, ...] | None = None


class ConnectionPair(asyncio.Protocol):
    """The client side's protocol; it opens and owns the matching upstream connection."""

    def __init__(
        self,
        *,
        connection_id: int,
        node_id: int,
        upstream: HostPort,
        router: Router,
        metrics: ProxyMetrics,
        settings: PairSettings,
        on_closed: Callable[[ConnectionPair], None],
    ) -> None:
        self.connection_id = connection_id
        self._node_id = node_id
        self._upstream_address = upstream
        self._router = router
        self._metrics = metrics
        self._settings = settings
        self._on_closed = on_closed
        self._info = ConnectionInfo(connection_id=connection_id, client="?", node_id=node_id)
        self._client: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._client_gate: ReadGate | None = None
        self._upstream_gate: ReadGate | None = None
        self._requests = FrameDecoder(settings.max_request_bytes)
        self._ordered: deque[_InFlight] = deque()
        self._awaiting: deque[_InFlight] = deque()
        # The response being received from the broker: its size prefix, then its bytes.
        self._size_prefix = bytearray()
        # What this read of the broker produced for the client, not yet written.
        self._unsent: list[bytes | bytearray | memoryview] = []
        self._receiving: _InFlight | None = None
        self._remaining = 0
        self._held_bytes = 0
        # Zero-copy forwarding (proxy.splice): whether this pair may splice, once both
        # sides are up, and its splicer, made at its first splice.
        self._can_splice = False
        self._splicer: Splicer | None = None
        # Whether the next read of the broker takes only a lead (see _upstream_read_size).
        self._lead_read = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Why the pair stops reading requests and closes once answered ("" while serving),
        # and the drain's stage (_SERVING, _FINISHING, _CLOSING).
        self._draining = ""
        self._drain_stage = ""
        self._drain_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._done = asyncio.get_running_loop().create_future()
        # The two clocks of :meth:`expire` (time.monotonic()).
        self._last_active = time.monotonic()
        self._frame_started: float | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def wait_closed(self) -> None:
        """Return once the pair is closed."""
        await asyncio.shield(self._done)

    def drain(self, reason: str = "shutdown", *, serve_s: float = 0.0) -> None:
        """Take no more work and close once every response owed has been written.

        Requests go on being read and answered for up to ``serve_s`` seconds (a client
        between requests is closed at once), then reading stops; the close itself is a
        half-close, so no response is cut (see the rules of this file).
        """
        if self._closed or self._draining:
            return
        self._draining = reason
        if serve_s > 0 and reason != _CLIENT_CLOSED:
            self._drain_stage = _SERVING
            loop = asyncio.get_running_loop()
            self._drain_timer = loop.call_later(serve_s, self._stop_serving)
        else:
            self._stop_serving()
        if self._upstream is not None:
            self._drain_step()

    def _stop_serving(self) -> None:
        """The drain's *finishing* stage: read no more requests."""
        if self._closed or self._drain_stage == _CLOSING:
            return
        self._drain_stage = _FINISHING
        if self._client_gate is not None:
            self._client_gate.hold(_DRAINING)
        if self._upstream is not None:
            self._drain_step()

    def _drain_step(self) -> None:
        """Close a draining pair that owes nothing: half-close it if the client is between
        requests or no longer read; a client that closed its side is closed at once."""
        if self._closed or self._ordered or self._drain_stage == _CLOSING:
            return
        if self._drain_stage == _SERVING and self._requests.buffered_bytes:
            return  # a request is on its way: answer it first
        client = self._client
        if self._draining == _CLIENT_CLOSED or client is None or not client.can_write_eof():
            self._close_drained()  # TLS has no half-close
            return
        self._drain_stage = _CLOSING
        self._send_unsent()
        client.write_eof()
        if self._client_gate is not None:
            self._client_gate.release(_DRAINING)  # read and drop until the client closes
        self._drain_timer = asyncio.get_running_loop().call_later(
            _LINGER_S, self._close, self._draining
        )

    def abort(self, reason: str) -> None:
        """Close both sides now, dropping unwritten data. A half-closed pair (the *closing*
        stage of a drain) owes nothing and has nothing unwritten: it closes as drained."""
        if self._drain_stage == _CLOSING:
            self._close(self._draining)
            return
        self._close(reason, abort=True)

    def expire(self, now: float) -> None:
        """Close the pair if its client has been idle, or sending one request, for too long.

        Idle time counts only while no response is owed; the request clock stops while the
        proxy holds reading (back-pressure, connecting), so only the client can run it out.
        """
        settings = self._settings
        if self._ordered or self._upstream is None:
            self._last_active = now
        elif settings.idle_timeout is not None and now - self._last_active > settings.idle_timeout:
            self._close(
                "idle", bad=reasons.IDLE, level=logging.WARNING, idle_s=settings.idle_timeout
            )
            return
        started = self._frame_started
        if started is None or settings.request_receive_timeout is None:
            return
        if self._client_gate is not None and self._client_gate.held:
            self._frame_started = now
        elif now - started > settings.request_receive_timeout:
            self._close(
                "request not received in time",
                bad=reasons.SLOW_REQUEST,
                level=logging.WARNING,
                buffered=self._requests.buffered_bytes,
                timeout_s=settings.request_receive_timeout,
            )

    def _close(
        self,
        reason: str,
        *,
        abort: bool = False,
        level: int = logging.INFO,
        bad: str | None = None,
        **fields: Any,
    ) -> None:
        """Close both sides with one ``connection.closed`` line; ``bad`` names the reason
        of a bad-input close, whose line is counted and rate-limited."""
        if self._closed:
            return
        self._closed = True
        line = {
            "conn": self.connection_id,
            "node": self._node_id,
            "client": self._info.client,
            "reason": reason,
            "in_flight": len(self._ordered),
            **fields,
        }
        if bad is None:
            event(_log, level, "connection.closed", **line)
        else:
            self._settings.bad_log.closed(level, bad, **line)
        if self._splicer is not None:
            self._splicer.close()
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        for transport in (self._client, self._upstream):
            if transport is not None:
                if abort:
                    transport.abort()
                else:
                    transport.close()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._release_in_flight()
        self._router.connection_closed(self.connection_id)
        self._metrics.connection_closed()
        self._done.set_result(None)
        self._on_closed(self)

    def _release_in_flight(self) -> None:
        """The pair closed: no request in flight will be answered; release their exchanges."""
        self._router.memory.stop_waiting(self.connection_id)
        ordered = list(self._ordered)
        self._ordered.clear()
        self._awaiting.clear()
        for entry in ordered:
            if entry.exchange is not None:
                entry.exchange.release()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- client side (asyncio.Protocol) ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._client = transport
        peer = transport.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        tls = transport.get_extra_info("ssl_object")
        certificate = tls.getpeercert(binary_form=True) if tls is not None else None
        self._info = dataclasses.replace(
            self._info, client=client, peer_certificate=certificate or None
        )
        self._metrics.connection_opened()
        transport.set_write_buffer_limits(self._settings.high_water, self._settings.low_water)
        self._client_gate = ReadGate(transport)
        event(
            _log,
            logging.DEBUG,
            "connection.opened",
            conn=self.connection_id,
            node=self._node_id,
            client=client,
            upstream=str(self._upstream_address),
        )
        self._spawn(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        if self._drain_stage == _CLOSING:
            return  # half-closed: dropped, the client will see the end and retry elsewhere
        now = time.monotonic()
        self._last_active = now
        if self._frame_started is None:
            self._frame_started = now
        self._requests.feed(data)
        if self._upstream is None:
            # Keep what came before the broker connection is up, and read no more until it
            # is (pausing in connection_made is not enough: uvloop starts reading after it).
            if self._client_gate is not None:
                self._client_gate.hold(_CONNECTING)
            return
        self._process_requests()

    def _process_requests(self) -> None:
        while not self._closed:
            if not self._router.memory.admits:
                self._wait_for_memory()
                return
            frame = self._requests.next_frame()
            if frame is None:
                if self._draining:
                    self._drain_step()
                return
            if isinstance(frame, FrameTooLarge):
                spoken = foreign_protocol(frame.declared_size)
                self._close(
                    "request frame too large"
                    if spoken is None
                    else f"the client spoke {spoken}, not the Kafka protocol",
                    bad=reasons.FRAME_TOO_LARGE if spoken is None else reasons.FOREIGN_PROTOCOL,
                    level=logging.WARNING,
                    size=frame.declared_size,
                    limit=frame.limit,
                )
                return
            if isinstance(frame, InvalidFrameSize):
                self._close(
                    "invalid request frame size",
                    bad=reasons.INVALID_FRAME_SIZE,
                    level=logging.WARNING,
                    size=frame.declared_size,
                )
                return
            self._frame_started = time.monotonic() if self._requests.buffered_bytes else None
            self._on_request(frame)

    def _wait_for_memory(self) -> None:
        """Read no request until the exchanges in flight hold less (new work is refused;
        outstanding work is never dropped)."""
        if self._client_gate is not None:
            self._client_gate.hold(_PLANS_FULL)
        self._router.memory.wait(self.connection_id, self._memory_freed)

    def _memory_freed(self) -> None:
        asyncio.get_running_loop().call_soon(self._resume_requests)

    def _resume_requests(self) -> None:
        if self._closed:
            return
        if self._client_gate is not None:
            self._client_gate.release(_PLANS_FULL)
        self._process_requests()

    def eof_received(self) -> bool:
        # The client sent its last bytes (a close looks the same until we write): answer what
        # it asked first, then close. TLS has no half-close: there the transport closes anyway.
        if self._drain_stage == _CLOSING:
            self._close(self._draining)  # the client read our end and closed its side
            return False
        self.drain(_CLIENT_CLOSED)
        return self._client is not None and self._client.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._drain_stage == _CLOSING:
            self._close(self._draining)
            return
        self._close(
            _CLIENT_CLOSED,
            bad=self._client_gone_early(),
            error=str(exc) if exc else "",
        )

    def _client_gone_early(self) -> str | None:
        """Why a client that closed left something unfinished: responses still owed, or
        the start of a request it never finished sending; None for a clean close."""
        if self._ordered:
            return reasons.CLIENT_DROPPED
        return reasons.TRUNCATED_REQUEST if self._requests.buffered_bytes else None

    def _close_drained(self) -> None:
        """Close a drained pair (every response owed has been written)."""
        client_closed = self._draining == _CLIENT_CLOSED
        self._close(
            self._draining,
            bad=self._client_gone_early() if client_closed else None,
        )

    def pause_writing(self) -> None:
        if self._upstream_gate is not None:
            self._upstream_gate.hold(_PEER_BUFFER_FULL)

    def resume_writing(self) -> None:
        if self._upstream_gate is not None:
            self._upstream_gate.release(_PEER_BUFFER_FULL)

    # -- upstream side -----------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        address = self._upstream_address
        context = self._settings.upstream_ssl
        loop = asyncio.get_running_loop()
        resolver = self._settings.resolver
        addresses: tuple[SocketAddress, ...] = ()
        try:
            async with asyncio.timeout(self._settings.connect_timeout):
                addresses = await resolver.resolve(address.host, address.port)
                transport = await _connect_to_any(
                    loop,
                    lambda: _UpstreamProtocol(self),
                    addresses,
                    ssl_context=context,
                    server_hostname=address.host if context is not None else None,
                )
        except OSError as err:
            # None of the addresses took the connection in time: the broker may have moved
            # (a restarted container's new address), so the next connection asks again.
            resolver.forget(address.host, address.port, addresses)
            self._metrics.upstream_error("connect")
            self._close(
                "broker unreachable",
                level=logging.WARNING,
                upstream=str(address),
                error=str(err) or type(err).__name__,
            )
            return
        if self._closed:
            transport.close()

    @property
    def client(self) -> str:
        """The client's address (``ip:port``), once connected."""
        return self._info.client

    def _upstream_made(self, transport: asyncio.Transport) -> None:
        self._upstream = transport
        if self._client is not None:
            audit.connection_opened(
                self.connection_id,
                node_id=self._node_id,
                client=self._client,
                upstream=transport,
                broker=str(self._upstream_address),
            )
        transport.set_write_buffer_limits(self._settings.high_water, self._settings.low_water)
        self._upstream_gate = ReadGate(transport)
        self._can_splice = (
            self._settings.splice
            and SPLICE_AVAILABLE
            and self._settings.upstream_ssl is None
            and self._client is not None
            and self._client.get_extra_info("sslcontext") is None
        )
        if self._client_gate is not None:
            self._client_gate.release(_CONNECTING)
        self._process_requests()

    def _upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed and self._ordered:
            self._metrics.upstream_error("closed")
        self._close(
            "broker closed",
            bad=reasons.BROKER_CLOSED if self._ordered else None,
            error=str(exc) if exc else "",
        )

    def _upstream_pause_writing(self) -> None:
        if self._client_gate is not None:
            self._client_gate.hold(_PEER_BUFFER_FULL)

    def _upstream_resume_writing(self) -> None:
        if self._client_gate is not None:
            self._client_gate.release(_PEER_BUFFER_FULL)

    # -- requests ----------------------------------------------------------------------

    def _on_request(self, frame: bytes) -> None:
        try:
            route = self._router.route(frame, self._info)
        except RemoteProtocolError as err:
            self._close(
                "bad request",
                bad=reasons.MALFORMED_REQUEST,
                level=logging.WARNING,
                error=str(err),
                code=err.error_code.name,
            )
            return
        except Exception as err:
            event(
                _log,
                logging.ERROR,
                "interceptor.failed",
                msg="interceptor failed on a request",
                conn=self.connection_id,
                exc_info=True,
            )
            self._close("interceptor error", level=logging.ERROR, error=repr(err))
            return
        self._metrics.request(route.api_key, len(frame) + _SIZE_BYTES)
        exchange = route.exchange
        forward = frame if exchange is None else exchange.forward
        entry = _InFlight(route.api_key, exchange)
        if forward is None:
            self._ordered.append(entry)
            self._spawn(self._finish(entry, None))
            return
        assert self._upstream is not None
        self._upstream.writelines((_SIZE.pack(len(forward)), forward))
        if route.expects_response:
            self._ordered.append(entry)
            self._awaiting.append(entry)
        elif exchange is not None:
            exchange.release()

    # -- responses ---------------------------------------------------------------------

    def _upstream_data(self, data: bytes) -> None:
        view = memoryview(data)
        position, end = 0, len(data)
        while position < end and not self._closed:
            target = self._receiving
            if target is None:
                position = self._start_response(data, position)
                continue
            take = min(self._remaining, end - position)
            chunk = data if take == end else view[position : position + take]
            if target.streaming:
                self._write_streamed(target, chunk)
            else:
                assert target.buffer is not None
                target.buffer += chunk
            self._remaining -= take
            position += take
            if self._remaining == 0:
                self._response_received(target)
        if self._closed:
            self._unsent.clear()
        elif not (self._can_splice and self._maybe_splice()):
            self._send_unsent()

    def _send_unsent(self) -> None:
        """Write what is unsent, in one system call."""
        unsent = self._unsent
        if not unsent:
            return
        self._unsent = []
        assert self._client is not None
        if len(unsent) == 1:
            self._client.write(unsent[0])
        else:
            self._client.writelines(unsent)

    def _upstream_read_size(self) -> int:
        """How much the next read of the broker may take: a lead only between responses
        after one that was spliced (a consumer's next Fetch answer most likely is too)."""
        return _SPLICE_LEAD_BYTES if self._lead_read and self._receiving is None else _READ_BYTES

    def _maybe_splice(self) -> bool:
        """Splice the next bytes of the response being streamed, if the proxy need not see
        them (all the rest of a raw one, the records a ResponseStream skips) and nothing
        waits in the client's write buffer ahead of them; the unsent bytes go first, through
        the pipe. Whether it did."""
        target = self._receiving
        if target is None or not target.streaming:
            return False
        stream = target.stream
        count = self._remaining if stream is None else min(self._remaining, stream.skippable)
        assert self._client is not None and self._upstream_gate is not None
        if count < _SPLICE_MIN_BYTES or self._client.get_write_buffer_size():
            return False
        splicer = self._splicer or self._make_splicer()
        if splicer is None:
            return False
        target.spliced = True
        prelude, self._unsent = self._unsent, []
        splicer.start(
            count,
            functools.partial(self._spliced, target, count),
            prelude,
            more=count < self._remaining,
        )
        if splicer.busy:
            # The transport must not read the bytes the splice takes, nor the next response.
            # (A splice done at once needs no hold: the transport reads nothing during this
            # callback, and pausing and resuming it cost two epoll changes per response.)
            self._upstream_gate.hold(_SPLICING)
        return True

    def _make_splicer(self) -> Splicer | None:
        assert self._client is not None and self._upstream is not None
        try:
            self._splicer = Splicer(
                self._upstream.get_extra_info("socket").fileno(),
                self._client.get_extra_info("socket").fileno(),
                pipe_bytes=self._settings.high_water,
            )
        except OSError as err:
            self._can_splice = False
            event(
                _log,
                logging.WARNING,
                "connection.splice.unavailable",
                conn=self.connection_id,
                error=str(err),
                meaning="this connection copies its responses through Python",
            )
        return self._splicer

    def _spliced(self, target: _InFlight, count: int, failure: SpliceFailure | None) -> None:
        if failure is not None:
            if failure.side == "broker":
                self._upstream_lost(ConnectionError(failure.error))
            else:
                self.connection_lost(ConnectionError(failure.error))
            return
        if target.stream is not None:
            target.stream.skip(count)
        self._remaining -= count
        if self._remaining == 0:
            self._response_received(target)
        assert self._upstream_gate is not None
        self._upstream_gate.release(_SPLICING)

    def _start_response(self, data: bytes, position: int) -> int:
        """Consume (part of) a size prefix; once whole, decide where the response goes."""
        needed = _SIZE_BYTES - len(self._size_prefix)
        self._size_prefix += data[position : position + needed]
        position = min(position + needed, len(data))
        if len(self._size_prefix) < _SIZE_BYTES:
            return position
        prefix = bytes(self._size_prefix)
        self._size_prefix.clear()
        (size,) = _SIZE.unpack(prefix)
        if not self._awaiting or size < 0:
            self._metrics.upstream_error("protocol")
            self._close(
                "broker sent an unexpected response",
                level=logging.WARNING,
                size=size,
                awaiting=len(self._awaiting),
            )
            return len(data)
        target = self._awaiting.popleft()
        target.size = size + _SIZE_BYTES
        if self._ordered[0] is target and target.exchange is not None:
            target.stream = target.exchange.stream()
        target.streaming = self._ordered[0] is target and (
            target.exchange is None or target.stream is not None
        )
        if target.streaming:
            self._unsent.append(prefix)
        else:
            target.buffer = bytearray(prefix) if target.exchange is None else bytearray()
        self._receiving = target
        self._remaining = size
        if size == 0:
            self._response_received(target)
        return position

    def _write_streamed(self, target: _InFlight, chunk: bytes | memoryview) -> None:
        stream = target.stream
        released = len(chunk) if stream is None else stream.feed(chunk)
        if released == len(chunk):
            self._unsent.append(chunk)
        elif released:
            self._unsent.append(memoryview(chunk)[:released])

    def _response_received(self, target: _InFlight) -> None:
        self._receiving = None
        self._lead_read = target.spliced
        if target.streaming:
            stream, target.stream = target.stream, None
            if stream is not None:
                tail = stream.end()
                if tail is None:
                    self._spawn(self._finish_tail(target, stream))
                    return
                self._write_tail(target, tail)
                return
            self._ordered.popleft()
            self._finished(target)
            self._flush()
            return
        buffer = target.buffer
        assert buffer is not None
        target.buffer = None
        if target.exchange is None:
            self._ready(target, (buffer,))
        elif target.exchange.try_pass_through(buffer):
            self._ready(target, (_SIZE.pack(len(buffer)), buffer))
        else:
            self._spawn(self._finish(target, buffer))

    def _write_tail(self, entry: _InFlight, tail: bytes | bytearray) -> None:
        """The last bytes of a streamed response: it is complete, the next may go."""
        if tail:
            self._unsent.append(tail)
        self._ordered.popleft()
        self._finished(entry)
        self._flush()

    async def _finish_tail(self, entry: _InFlight, stream: ResponseStream) -> None:
        tail = await self._intercepted(entry, stream.rewrite())
        if tail is not None and not self._closed:
            self._write_tail(entry, tail)

    async def _finish(self, entry: _InFlight, payload: bytearray | None) -> None:
        assert entry.exchange is not None
        response = await self._intercepted(entry, entry.exchange.respond(payload))
        if response is not None and not self._closed:
            parts = response.parts if isinstance(response, Buffers) else (response,)
            self._ready(entry, (_SIZE.pack(len(response)), *parts))

    async def _intercepted(self, entry: _InFlight, work: Awaitable[_Response]) -> _Response | None:
        """What the interceptors made of a response, or ``None`` once their failure closed
        the pair."""
        try:
            return await work
        except RemoteProtocolError as err:
            self._metrics.upstream_error("protocol")
            self._close(
                "bad response", level=logging.WARNING, api=api_name(entry.api_key), error=str(err)
            )
        except Exception as err:
            event(
                _log,
                logging.ERROR,
                "interceptor.failed",
                msg="interceptor failed on a response",
                conn=self.connection_id,
                exc_info=True,
            )
            self._close("interceptor error", level=logging.ERROR, error=repr(err))
        return None

    def _ready(self, entry: _InFlight, parts: tuple[bytes | bytearray | memoryview, ...]) -> None:
        entry.response = parts
        entry.size = sum(len(part) for part in parts)
        self._held_bytes += entry.size
        if self._held_bytes > self._settings.high_water and self._upstream_gate is not None:
            self._upstream_gate.hold(_HELD_RESPONSES)
        self._flush()

    def _flush(self) -> None:
        """Write every response at the head of the queue that is ready (after what is
        unsent, in the same system call)."""
        while self._ordered and self._ordered[0].response is not None:
            entry = self._ordered.popleft()
            parts = entry.response
            assert parts is not None
            entry.response = None
            self._unsent.extend(parts)
            self._held_bytes -= entry.size
            self._finished(entry)
        self._send_unsent()
        if self._held_bytes <= self._settings.low_water and self._upstream_gate is not None:
            self._upstream_gate.release(_HELD_RESPONSES)
        if self._draining:
            self._drain_step()

    def _finished(self, entry: _InFlight) -> None:
        """``entry``'s response is written (or queued to be): release its exchange."""
        if entry.exchange is not None:
            entry.exchange.release()
        self._metrics.response(entry.api_key, entry.size, time.perf_counter() - entry.started)


class _UpstreamProtocol(asyncio.BufferedProtocol):
    """The broker side of a pair: hands everything to the pair.

    A buffered protocol so that the pair chooses how much each read may take (see
    :meth:`ConnectionPair._upstream_read_size`); the bytes leave the shared read buffer as
    one ``bytes`` per read, the copy uvloop makes for a plain protocol.
    """

    __slots__ = ("_pair",)

    def __init__(self, pair: ConnectionPair) -> None:
        self._pair = pair

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._pair._upstream_made(cast(asyncio.Transport, transport))

    def get_buffer(self, sizehint: int) -> memoryview:
        return _read_buffer()[: self._pair._upstream_read_size()]

    def buffer_updated(self, nbytes: int) -> None:
        self._pair._upstream_data(_read_buffer()[:nbytes].tobytes())

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._pair._upstream_lost(exc)

    def pause_writing(self) -> None:
        self._pair._upstream_pause_writing()

    def resume_writing(self) -> None:
        self._pair._upstream_resume_writing()


async def _connect_to_any(
    loop: asyncio.AbstractEventLoop,
    protocol: Callable[[], asyncio.BaseProtocol],
    addresses: tuple[SocketAddress, ...],
    *,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
) -> asyncio.BaseTransport:
    """A connection to the first of ``addresses`` that takes one, tried in order (Kafka's
    ``use_all_dns_ips``).

    :raises OSError: the last address's error.
    """
    last: OSError | None = None
    for address in addresses:
        try:
            transport, _ = await loop.create_connection(
                protocol,
                address.host,
                address.port,
                family=address.family,
                ssl=ssl_context,
                server_hostname=server_hostname,
            )
        except OSError as err:
            last = err
            continue
        return transport
    raise last if last is not None else OSError(f"no address to connect to among {addresses}")
