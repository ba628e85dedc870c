"""Size-prefixed Kafka frames cut out of an incremental byte stream.

Every Kafka request and response travels as an int32 byte count followed by that many
bytes. :class:`FrameDecoder` is fed whatever the transport delivers and hands back whole
frames; it never touches a socket. Rules of this file:

- A bad size prefix is reported as an error *value* (:class:`FrameTooLarge`,
  :class:`InvalidFrameSize`), not raised, so the caller's read loop decides what to answer
  and when to close. After an error the stream has no frame boundaries any more, so the
  decoder keeps returning the same error and drops whatever it is fed.
- Work is linear in the bytes fed: pieces are kept as received and joined once per frame,
  so a 100 MiB Fetch response arriving in 64 KiB reads is copied once, not re-joined per read.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Final

from protocol.errors import LocalProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameDecoder",
    "FrameTooLarge",
    "InvalidFrameSize",
    "encode_frame",
    "foreign_protocol",
    "frame_size_error",
    "valid_frame_limit",
]

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
"""Kafka's ``socket.request.max.bytes`` default (104857600).

A broker refuses larger requests, and a peer's size prefix is the only thing that decides
how much we buffer before a frame is complete, so this bounds memory per connection.
"""

_SIZE: Final = struct.Struct(">i")
_SIZE_BYTES: Final = _SIZE.size
_MAX_PAYLOAD: Final = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameTooLarge:
    """The peer announced a frame above the decoder's limit."""

    declared_size: int
    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidFrameSize:
    """The peer announced a negative frame size (Kafka's ``InvalidReceiveException``)."""

    declared_size: int


_HTTP_PREFIXES: Final = (b"HTTP", b"GET ", b"POST", b"PUT ", b"HEAD")


def foreign_protocol(declared_size: int) -> str | None:
    """The protocol a peer spoke when its "size prefix" is really the start of something
    else: ``"HTTP"`` (an answer or request line) or ``"TLS"`` (a handshake record, a TLS
    client or server on a plaintext port), else ``None``. Kafka's SocketServer warns the
    same way ("likely TLS/HTTP"); naming it saves an operator the hex arithmetic."""
    prefix = _SIZE.pack(declared_size)
    if prefix in _HTTP_PREFIXES:
        return "HTTP"
    if prefix[0] == 0x16 and prefix[1] == 0x03:  # handshake record, SSL 3.0 / TLS 1.x
        return "TLS"
    return None


FrameError = FrameTooLarge | InvalidFrameSize


def valid_frame_limit(max_frame_bytes: int) -> int:
    """``max_frame_bytes`` if a size prefix can express it, else :class:`LocalProtocolError`."""
    if not 0 <= max_frame_bytes <= _MAX_PAYLOAD:
        raise LocalProtocolError(f"max_frame_bytes {max_frame_bytes} is not in [0, 2**31)")
    return max_frame_bytes


def frame_size_error(declared_size: int, limit: int) -> FrameError | None:
    """What is wrong with a peer's size prefix, if anything: the one rule every frame
    reader of this package applies."""
    if declared_size < 0:
        return InvalidFrameSize(declared_size=declared_size)
    if declared_size > limit:
        return FrameTooLarge(declared_size=declared_size, limit=limit)
    return None


class FrameDecoder:
    """Turns a byte stream into frame payloads (without their size prefix).

    Call :meth:`feed` with each read, then :meth:`next_frame` until it returns ``None``.
    """

    __slots__ = ("_chunks", "_error", "_frame_size", "_head", "_max_frame_bytes", "_size")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max_frame_bytes = valid_frame_limit(max_frame_bytes)
        # Unconsumed input: pieces as fed, ``_head`` bytes of the first piece already used.
        self._chunks: deque[bytes] = deque()
        self._head = 0
        self._size = 0
        # Payload size of the frame being received once its prefix has been consumed.
        self._frame_size: int | None = None
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet returned in a frame, a size prefix already read included."""
        pending_prefix = _SIZE_BYTES if self._frame_size is not None else 0
        return self._size + pending_prefix

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the peer.

        ``bytes`` are kept without copying; other buffers are copied because a transport may
        reuse them for the next read.
        """
        if self._error is not None or not data:
            return
        chunk = data if isinstance(data, bytes) else bytes(data)
        self._chunks.append(chunk)
        self._size += len(chunk)

    def next_frame(self) -> bytes | FrameTooLarge | InvalidFrameSize | None:
        """Return the next complete frame's payload, an error value, or ``None`` for "need more"."""
        if self._error is not None:
            return self._error
        if self._frame_size is None:
            if self._size < _SIZE_BYTES:
                return None
            declared = _SIZE.unpack(self._take(_SIZE_BYTES))[0]
            error = frame_size_error(declared, self._max_frame_bytes)
            if error is not None:
                return self._fail(error)
            self._frame_size = declared
        if self._size < self._frame_size:
            return None
        frame = self._take(self._frame_size)
        self._frame_size = None
        return frame

    def _fail(self, error: FrameError) -> FrameError:
        self._error = error
        self._chunks.clear()
        self._head = 0
        self._size = 0
        return error

    def _take(self, count: int) -> bytes:
        """Remove ``count`` buffered bytes (the caller checked they are there) and return them."""
        if count == 0:
            return b""
        first = self._chunks[0]
        start = self._head
        available = len(first) - start
        if count < available:
            self._head = start + count
            self._size -= count
            return first[start : start + count]
        if count == available:
            self._chunks.popleft()
            self._head = 0
            self._size -= count
            return first if start == 0 else first[start:]
        parts: list[memoryview | bytes] = [memoryview(first)[start:]]
        self._chunks.popleft()
        self._head = 0
        missing = count - available
        while missing:
            chunk = self._chunks[0]
            if len(chunk) <= missing:
                parts.append(chunk)
                self._chunks.popleft()
                missing -= len(chunk)
            else:
                parts.append(memoryview(chunk)[:missing])
                self._head = missing
                missing = 0
        self._size -= count
        return b"".join(parts)


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size, ready to write to a transport.

    :raises LocalProtocolError: if the payload cannot be described by an int32 size.
    """
    size = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    if size > _MAX_PAYLOAD:
        raise LocalProtocolError(f"frame payload of {size} bytes exceeds the int32 size prefix")
    return _SIZE.pack(size) + payload
