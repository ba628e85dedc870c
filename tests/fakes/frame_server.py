"""A loopback server that speaks Kafka framing: the plumbing the fake brokers share.

It listens on 127.0.0.1 on a free port. Each connection gets its own answer function (from
``connect``, so a broker can keep per-connection state such as a SASL session); every frame
read is handed to it and the payload it returns is written back as one frame, or nothing
for ``None``. Rules, as a Kafka broker keeps them:

- A connection's requests are answered one after the other, in order: a slow answer delays
  the ones after it on that connection only.
- An answer that raises :class:`HangUp` (or any ``ConnectionError``) closes its connection
  without answering; so does a bad size prefix. Everyone else keeps being served.
- :meth:`FrameServer.close` stops listening, aborts every connection still open and waits
  for their tasks, so no socket outlives the test.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import cast

from protocol.errors import RemoteProtocolError
from protocol.frames import FrameDecoder, encode_frame

__all__ = ["Answer", "FrameServer", "HangUp"]

Answer = Callable[[bytes], Awaitable[bytes | None]]
"""One connection's answer to a request frame: the response payload, or ``None``."""


class HangUp(ConnectionError):
    """Raised by an answer: close this connection without answering, as a broker does."""


class FrameServer:
    """Serves Kafka frames on a free loopback port (see the module)."""

    def __init__(self, connect: Callable[[], Answer]) -> None:
        self._connect = connect
        self.port = 0
        self.connections: list[asyncio.Transport] = []
        """Every connection accepted, in order (closed ones too)."""
        self.disconnected = asyncio.Event()
        """Set whenever a connection ends."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        return len(self.connections)

    async def start(self, *, tls: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for transport in self.connections:
            transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.connections.append(cast(asyncio.Transport, writer.transport))
        answer = self._connect()
        decoder = FrameDecoder()
        try:
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    data = await reader.read(65536)
                    if not data:
                        return
                    decoder.feed(data)
                    continue
                if not isinstance(frame, bytes):
                    return  # a bad size prefix: no frame boundaries any more
                payload = await answer(frame)
                if payload is not None:
                    writer.write(encode_frame(payload))
                    await writer.drain()
        except (ConnectionError, RemoteProtocolError, asyncio.CancelledError):
            return  # garbage, a closed peer or a hang-up: close the connection
        finally:
            self._tasks.discard(task)
            writer.close()
            self.disconnected.set()
