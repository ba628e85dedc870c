"""A scripted in-process Kafka broker for the client's unit tests.

It decodes each request with :mod:`protocol` and answers with kio responses built by the
handler registered for its API key, so framing, header versions, version negotiation,
pipelining and error handling are exercised byte for byte.

With ``session_lifetime_ms`` set it also logs clients in with SASL/PLAIN and keeps their
sessions as a Kafka broker with ``connections.max.reauth.ms`` does (KIP-368): a SaslHandshake
begins a login or a re-authentication, anything but SaslAuthenticate in the middle of one
closes the connection, and so does any request but SaslHandshake read after the session
expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from protocol.frames import encode_frame
from protocol.headers import encode_response_header, parse_request_header, response_header_version
from protocol.messages import (
    ApiKey,
    ErrorCode,
    decode_request,
    encode_response,
    nested_class,
    response_class,
)

KAFKA_APIS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
}
SASL_APIS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
TANSU_APIS: dict[ApiKey, tuple[int, int]] = {
    **{k: v for k, v in KAFKA_APIS.items() if k != ApiKey.OFFSET_FOR_LEADER_EPOCH},
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}

Handler = Callable[[Any, int], Any]


def build(cls: type[Any], **values: Any) -> Any:
    return cls(**values)


@dataclass
class FakeBroker:
    """Answers requests with ``handlers[api_key](request, version)``; records what it got."""

    apis: dict[ApiKey, tuple[int, int]]
    handlers: dict[ApiKey, Handler] = field(default_factory=dict)
    received: list[tuple[int, int]] = field(default_factory=list)
    requests: list[tuple[ApiKey, Any]] = field(default_factory=list)
    """Every decoded request, with its API key."""
    delay: dict[ApiKey, float] = field(default_factory=dict)
    close_on: ApiKey | None = None
    port: int = 0
    connections: set[asyncio.StreamWriter] = field(default_factory=set)
    """Connections still open; :func:`running` closes them (Python 3.11's ``Server.close``
    leaves accepted connections open)."""
    accepted: int = 0
    """Connections accepted so far."""
    session_lifetime_ms: int | None = None
    """With a value: SASL/PLAIN logins whose sessions last this long (0: for ever)."""
    refused_logins: set[int] = field(default_factory=set)
    """Which logins (1 for the first SaslAuthenticate, counting over all connections) fail."""
    logins: int = 0
    clock: Callable[[], float] = time.monotonic
    """When sessions expire, in seconds."""
    expired: int = 0
    """Connections closed because a request came after their session expired."""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.add(writer)
        self.accepted += 1
        session = _Session()
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
                self.received.append((header.api_key, header.api_version))
                key = ApiKey(header.api_key)
                if key == self.close_on:
                    return
                request = decode_request(header.api_key, header.api_version, frame[header.size :])
                self.requests.append((key, request))
                if self.session_lifetime_ms is None:
                    response = self.respond(key, request, header.api_version)
                else:
                    response = self._sasl_respond(session, key, request, header.api_version)
                    if response is None:
                        return
                await asyncio.sleep(self.delay.get(key, 0))
                header_version = (
                    0
                    if key == ApiKey.API_VERSIONS
                    else response_header_version(header.api_key, header.api_version)
                )
                assert header_version is not None
                writer.write(
                    encode_frame(
                        encode_response_header(header.correlation_id, header_version)
                        + encode_response(response)
                    )
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.connections.discard(writer)
            writer.close()

    def _sasl_respond(self, session: _Session, key: ApiKey, request: Any, version: int) -> Any:
        """The answer under KIP-368's session rules, or ``None`` to close the connection."""
        lifetime_ms = self.session_lifetime_ms or 0
        if key == ApiKey.SASL_HANDSHAKE:
            session.exchanging = True
            return build(
                response_class(key, version),
                error_code=ErrorCode.none
                if request.mechanism == "PLAIN"
                else ErrorCode.unsupported_sasl_mechanism,
                mechanisms=("PLAIN",),
            )
        if session.exchanging != (key == ApiKey.SASL_AUTHENTICATE):
            return None  # Kafka: an unexpected request during (or outside) a SASL exchange
        if key == ApiKey.SASL_AUTHENTICATE:
            session.exchanging = False
            self.logins += 1
            refused = self.logins in self.refused_logins
            session.expires_at = self.clock() + lifetime_ms / 1000 if lifetime_ms else None
            return build(
                response_class(key, version),
                error_code=ErrorCode.sasl_authentication_failed if refused else ErrorCode.none,
                error_message="Authentication failed: invalid credentials" if refused else None,
                auth_bytes=b"",
                session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
            )
        if session.expires_at is not None and self.clock() >= session.expires_at:
            self.expired += 1
            return None
        return self.respond(key, request, version)

    async def close(self) -> None:
        """Close every connection still open and wait until each is."""
        writers = list(self.connections)
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def respond(self, key: ApiKey, request: Any, version: int) -> Any:
        if key == ApiKey.API_VERSIONS:
            cls = response_class(key, version)
            entry = nested_class(cls, "api_keys")
            return build(
                cls,
                error_code=ErrorCode.none,
                api_keys=tuple(
                    build(entry, api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in self.apis.items()
                ),
                throttle_time=datetime.timedelta(0),
            )
        return self.handlers[key](request, version)


@dataclass
class _Session:
    """One connection's SASL state on the fake broker."""

    exchanging: bool = False
    """Between a SaslHandshake and the SaslAuthenticate that ends the exchange."""
    expires_at: float | None = None


@asynccontextmanager
async def running(fake: FakeBroker) -> AsyncIterator[FakeBroker]:
    """``fake`` listening on a free loopback port (``fake.port``) until the block ends."""
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        yield fake
    finally:
        server.close()
        await fake.close()
        await server.wait_closed()


def metadata_response(
    version: int,
    *,
    brokers: Mapping[int, int],
    topic: str,
    leaders: Mapping[int, int],
    topic_id: uuid.UUID | None = None,
    leader_epoch: int = 0,
) -> Any:
    """A Metadata answer: ``brokers`` (node id to port, all on 127.0.0.1) and one ``topic``
    whose partitions are led as ``leaders`` (partition to node id) says, in that order."""
    cls = response_class(ApiKey.METADATA, version)
    topic_cls = nested_class(cls, "topics")
    partition_cls = nested_class(topic_cls, "partitions")
    broker_cls = nested_class(cls, "brokers")
    partitions = tuple(
        build(
            partition_cls,
            error_code=ErrorCode.none,
            partition_index=index,
            leader_id=leader,
            leader_epoch=leader_epoch,
            replica_nodes=(leader,),
            isr_nodes=(leader,),
            offline_replicas=(),
        )
        for index, leader in leaders.items()
    )
    return build(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            build(broker_cls, node_id=node, host="127.0.0.1", port=port, rack=None)
            for node, port in brokers.items()
        ),
        cluster_id="c",
        controller_id=min(brokers),
        topics=(
            build(
                topic_cls,
                error_code=ErrorCode.none,
                name=topic,
                topic_id=topic_id,
                is_internal=False,
                partitions=partitions,
            ),
        ),
    )
