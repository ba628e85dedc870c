"""A bare client that sends kio-encoded requests through the proxy and decodes the answers.

It stands in for a Kafka client where a test needs one exact request of one exact version
(a real client negotiates and retries on its own). It is a
:class:`~tests.fakes.frame_client.FrameClient` that encodes and decodes: requests on a
connection are answered in order, each call waits for its own answer and checks its
correlation id.
"""

from __future__ import annotations

import itertools
from typing import Any

from protocol.frames import encode_frame
from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import decode_response, encode_request
from proxy.server import ProxyServer
from tests.fakes.frame_client import FrameClient

__all__ = ["KioClient"]


class KioClient:
    """Sends kio requests through the proxy and decodes the responses."""

    def __init__(self, connection: FrameClient) -> None:
        self._connection = connection
        self._ids = itertools.count(1)

    @classmethod
    async def connect(cls, server: ProxyServer) -> KioClient:
        return cls(await FrameClient.connect(server))

    async def call(
        self,
        api_key: int,
        version: int,
        body: Any,
        seconds: float = 5.0,
        *,
        client_id: str = "test",
    ) -> Any:
        """``body`` as a request of ``version``; its answer, decoded.

        :raises ConnectionError: the proxy closed the connection first.
        :raises TimeoutError: no answer within ``seconds``.
        """
        correlation_id = next(self._ids)
        payload = encode_request_header(api_key, version, correlation_id, client_id)
        await self._connection.send(encode_frame(payload + encode_request(body)))
        answer = await self._connection.receive(seconds)
        header_version = response_header_version(api_key, version)
        assert header_version is not None
        got, size = parse_response_header(answer, header_version)
        assert got == correlation_id
        return decode_response(api_key, version, memoryview(answer)[size:])

    async def close(self) -> None:
        await self._connection.close()
