"""Frames received straight into their own buffers: the Kafka client's read side.

:class:`protocol.frames.FrameDecoder` is fed the transport's reads and joins them once per
frame; for the pipeline's Fetch responses (8 MiB and more, read 64 KiB at a time) that join
is a full copy of every byte fetched. :class:`FrameReceiver` serves
``asyncio.BufferedProtocol`` instead: the socket is read *into* the buffer
:meth:`FrameReceiver.buffer` hands out, so a large frame lands in the buffer it is returned
in, with no copy in user space. Rules of this file:

- Small frames and size prefixes are read into one staging buffer of ``_STAGING_BYTES``
  and copied out of it (a few kilobytes: Metadata, ApiVersions, an empty Fetch), so a burst
  of small answers costs one read, not two per frame.
- A frame larger than what is left of the staging buffer is read into a buffer of its own;
  the part already staged is moved into it, and reads then fill the rest. That buffer is
  kept for the next large frame (up to ``_REUSED_BYTES``): a fresh one per frame costs a
  page fault and the zeroing of every page, as much as the copy it saves. So a large frame
  is valid only until the next :meth:`FrameReceiver.buffer` call: decode it at once.
- A bad size prefix is returned as an error value (:class:`protocol.frames.FrameTooLarge`,
  :class:`protocol.frames.InvalidFrameSize`), as :class:`~protocol.frames.FrameDecoder`
  does; after one, the stream has no frame boundaries, so the receiver keeps returning it.
- Sans-IO: no socket, no event loop; the protocol calls :meth:`~FrameReceiver.buffer` and
  :meth:`~FrameReceiver.received`.
"""

from __future__ import annotations

import struct
from typing import Final

from protocol.frames import FrameError, frame_size_error, valid_frame_limit

__all__ = ["Frame", "FrameReceiver"]

_SIZE: Final = struct.Struct(">i")
_STAGING_BYTES: Final = 64 * 1024
"""What one read asks for between large frames: the size of a socket read uvloop itself
uses, so small answers cost no more reads than with a plain protocol."""

_REUSED_BYTES: Final = 64 * 1024 * 1024
"""Largest frame buffer kept between frames: the pipeline's 8 MiB Fetch responses (and a
few partitions' worth) reuse one; a rare larger answer gets a buffer that is then freed."""

Frame = bytes | memoryview
"""A frame without its size prefix: small ones are copied out as ``bytes``, large ones are
views of the receiver's buffer."""


class FrameReceiver:
    """Cuts size-prefixed frames out of the bytes read into the buffers it hands out."""

    __slots__ = (
        "_end",
        "_error",
        "_filled",
        "_frame",
        "_max_frame_bytes",
        "_spare",
        "_staging",
        "_start",
    )

    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = valid_frame_limit(max_frame_bytes)
        self._staging = bytearray(_STAGING_BYTES)
        # Unconsumed bytes of the staging buffer: [start, end).
        self._start = 0
        self._end = 0
        # A large frame being filled in place: its buffer and how much of it has arrived.
        self._frame: memoryview | None = None
        self._filled = 0
        self._spare = bytearray()
        self._error: FrameError | None = None

    def buffer(self) -> memoryview:
        """Where the next read goes (never empty)."""
        if self._frame is not None:
            return self._frame[self._filled :]
        if self._start:
            # Move the unconsumed tail (a prefix or a small frame's start) to the front.
            pending = self._end - self._start
            self._staging[:pending] = self._staging[self._start : self._end]
            self._start, self._end = 0, pending
        return memoryview(self._staging)[self._end :]

    def received(self, count: int) -> tuple[list[Frame], FrameError | None]:
        """Account for ``count`` bytes read into the last :meth:`buffer`: the frames now
        complete, in order (each without its size prefix), and the stream's error if a
        size prefix was bad (the frames before it are still good)."""
        frames: list[Frame] = []
        if self._error is not None:
            return frames, self._error
        if self._frame is not None:
            self._filled += count
            if self._filled == len(self._frame):
                frames.append(self._frame)
                self._frame = None
            return frames, None
        self._end += count
        self._cut(frames)
        return frames, self._error

    def _cut(self, frames: list[Frame]) -> None:
        staging = self._staging
        while self._end - self._start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(staging, self._start)
            self._error = frame_size_error(size, self._max_frame_bytes)
            if self._error is not None:
                return
            body = self._start + _SIZE.size
            if self._end - body >= size:
                frames.append(bytes(staging[body : body + size]))
                self._start = body + size
                continue
            if size > len(staging) - _SIZE.size:
                # Too large to stage: it gets its own buffer, which reads then fill.
                staged = self._end - body
                self._frame = self._frame_buffer(size)
                self._frame[:staged] = staging[body : self._end]
                self._filled = staged
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _frame_buffer(self, size: int) -> memoryview:
        if len(self._spare) < size:
            self._spare = bytearray(size)
        frame = memoryview(self._spare)[:size]
        if size > _REUSED_BYTES:
            self._spare = bytearray()
        return frame
