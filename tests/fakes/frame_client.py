"""A bare Kafka-framing client for the proxy's unit tests: it writes frames and reads whole
response payloads, and decodes nothing; and the framed requests such a client sends.

Rules: a read waits at most ``seconds`` (generous by default, as :mod:`tests.conditions`
explains) and fails with ``ConnectionError`` if the peer closes first. Every client still
open is listed in :attr:`FrameClient.still_open`, so that a fixture can close, in the test's
own event loop, those a failing test left open (the proxy tests' ``_close_clients``):
left to the garbage collector, they would warn (a ResourceWarning, an error under
``filterwarnings = error``) in whichever later test happens to collect them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from protocol.frames import FrameDecoder, encode_frame
from protocol.headers import encode_request_header
from protocol.messages import ApiKey, encode_request
from proxy.server import ProxyServer
from tests.conditions import GENEROUS_S
from tests.fakes.kafka_requests import api_versions_request, metadata_request

__all__ = ["FrameClient", "api_versions_frame", "metadata_frame", "request_frame"]


def request_frame(
    api_key: int, version: int, correlation_id: int, body: Any, *, client_id: str = "t"
) -> bytes:
    """``body`` as one framed request of ``version`` from ``client_id``."""
    header = encode_request_header(api_key, version, correlation_id, client_id)
    return encode_frame(header + encode_request(body))


def metadata_frame(correlation_id: int, version: int = 12) -> bytes:
    """A framed Metadata request for every topic."""
    return request_frame(ApiKey.METADATA, version, correlation_id, metadata_request(version))


def api_versions_frame(correlation_id: int, version: int = 3) -> bytes:
    """A framed ApiVersions request."""
    return request_frame(
        ApiKey.API_VERSIONS, version, correlation_id, api_versions_request(version)
    )


class FrameClient:
    """One connection to a proxy's listener (see the module)."""

    still_open: ClassVar[set[FrameClient]] = set()

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._decoder = FrameDecoder(1 << 30)
        self.still_open.add(self)

    @classmethod
    async def connect(cls, server: ProxyServer, node_index: int = 0) -> FrameClient:
        address = server.routes[node_index].advertised
        reader, writer = await asyncio.open_connection(address.host, address.port)
        return cls(reader, writer)

    async def send(self, framed: bytes) -> None:
        self.writer.write(framed)
        await self.writer.drain()

    async def receive(self, seconds: float = GENEROUS_S) -> bytes:
        async with asyncio.timeout(seconds):
            while True:
                received = self._decoder.next_frame()
                if isinstance(received, bytes):
                    return received
                assert received is None, received
                data = await self.reader.read(1 << 20)
                if not data:
                    raise ConnectionError("proxy closed the connection")
                self._decoder.feed(data)

    async def closed(self, seconds: float = GENEROUS_S) -> bool:
        """Whether the proxy closes this connection within ``seconds`` (reading to EOF);
        if it did, our side is closed too."""
        try:
            async with asyncio.timeout(seconds):
                while await self.reader.read(1 << 20):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            pass
        await self.close()
        return True

    async def close(self) -> None:
        self.still_open.discard(self)
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
