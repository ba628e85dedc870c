"""A scripted fake broker at the wire, for the proxy's unit tests (not a Kafka broker).

It speaks Kafka framing (:class:`~tests.fakes.frame_server.FrameServer`) and answers the two
requests the proxy itself sends at start-up, ApiVersions and Metadata, with kio-encoded
bodies. Every other request goes to the test's script: a coroutine that returns the response
payload (header included) or ``None`` for no response. Requests on one connection are
answered one after the other, as Kafka does, so a slow scripted answer delays the ones
after it on that connection.

Raw pass-through tests use API keys the proxy never decodes (Heartbeat, OffsetCommit) with
opaque bodies (:func:`raw_request`, answered by the default script :func:`echo`): the proxy
must not care what is inside.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from protocol.frames import encode_frame
from protocol.headers import RequestHeader, parse_request_header, peek_request
from protocol.messages import ApiKey, decode_request
from tests.fakes.frame_server import Answer, FrameServer, HangUp
from tests.fakes.kafka_responses import (
    Endpoint,
    api_versions_body,
    metadata_body,
    metadata_topics,
    plain_authenticate_body,
    plain_handshake_body,
    response_payload,
)

__all__ = ["ADVERTISED", "RAW_API", "Script", "WireBroker", "echo", "raw_request"]

Script = Callable[[RequestHeader, bytes], Awaitable[bytes | None]]

RAW_API = 12
"""A raw API for pass-through tests: the proxy never decodes Heartbeat."""
RAW_VERSION = 0

ADVERTISED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.FETCH: (0, 17),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
"""ApiVersions ranges the fake advertises (Fetch deliberately wider than the proxy handles)."""


def raw_request(correlation_id: int, body: bytes, api_key: int = RAW_API) -> bytes:
    """A framed request of a raw API with an opaque body (request header v1)."""
    header = struct.pack(">hhih", api_key, RAW_VERSION, correlation_id, 4) + b"test"
    return encode_frame(header + body)


def raw_response_body(payload: bytes) -> tuple[int, bytes]:
    """Split a raw response payload into (correlation id, body)."""
    return struct.unpack_from(">i", payload)[0], payload[4:]


async def echo(header: RequestHeader, body: bytes) -> bytes:
    """The default script: answer with the request body after ``echo:``."""
    return struct.pack(">i", header.correlation_id) + b"echo:" + body


class WireBroker:
    """A scripted fake broker on 127.0.0.1 (see the module docstring).

    With ``sasl_users`` it behaves like a SASL_PLAINTEXT listener with the PLAIN mechanism:
    before a connection has logged in, anything but ApiVersions, SaslHandshake and
    SaslAuthenticate closes it; :attr:`logins` records each successful user.
    """

    def __init__(
        self, *, node_id: int = 1, script: Script = echo, sasl_users: dict[str, str] | None = None
    ) -> None:
        self.node_id = node_id
        self.script = script
        self.sasl_users = sasl_users
        self.logins: list[str] = []
        self.peers: list[Endpoint] = []
        """Other brokers this one reports in Metadata."""
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        """Topics this one reports in Metadata, every partition led by itself:
        name -> (topic id, partition count)."""
        self.requests: list[tuple[int, int, int]] = []
        """(API key, version, correlation id) of every request, in order."""
        self.server = FrameServer(self._connection)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def connections(self) -> list[asyncio.Transport]:
        """Every connection accepted, in order (closed ones too)."""
        return self.server.connections

    @property
    def disconnected(self) -> asyncio.Event:
        """Set whenever a connection to the fake ends."""
        return self.server.disconnected

    @property
    def brokers(self) -> list[Endpoint]:
        return [(self.node_id, "127.0.0.1", self.port), *self.peers]

    async def start(self, *, tls: ssl.SSLContext | None = None) -> WireBroker:
        await self.server.start(tls=tls)
        return self

    async def close(self) -> None:
        await self.server.close()

    def _connection(self) -> Answer:
        authenticated = self.sasl_users is None

        async def answer(frame: bytes) -> bytes | None:
            nonlocal authenticated
            self.requests.append(peek_request(frame))
            header = parse_request_header(frame)
            if header.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                payload, logged_in = self._sasl(header, frame)
                authenticated = authenticated or logged_in
                return payload
            if not authenticated and header.api_key != ApiKey.API_VERSIONS:
                raise HangUp("a request before SASL authentication")
            if header.api_key == ApiKey.API_VERSIONS:
                return response_payload(header, api_versions_body(header.api_version, ADVERTISED))
            if header.api_key == ApiKey.METADATA:
                version = header.api_version
                return response_payload(
                    header, metadata_body(version, self.brokers, self._topics(version))
                )
            return await self.script(header, frame[header.size :])

        return answer

    def _topics(self, version: int) -> tuple[Any, ...]:
        return metadata_topics(
            version,
            [
                (name, topic_id, [(index, self.node_id) for index in range(count)])
                for name, (topic_id, count) in self.topics.items()
            ],
        )

    def _sasl(self, header: RequestHeader, frame: bytes) -> tuple[bytes, bool]:
        """The answer to a SASL request, and whether it logged the connection in."""
        body = decode_request(header.api_key, header.api_version, frame[header.size :])
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            return response_payload(
                header, plain_handshake_body(header.api_version, body.mechanism)
            ), False
        _, user, password = bytes(body.auth_bytes).split(b"\0")
        ok = (self.sasl_users or {}).get(user.decode()) == password.decode()
        if ok:
            self.logins.append(user.decode())
        refusal = None if ok else "bad password"
        return response_payload(
            header, plain_authenticate_body(header.api_version, refusal=refusal)
        ), ok
