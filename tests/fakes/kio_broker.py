"""A scripted fake broker that decodes every request, for the product's Kafka client's unit
tests (not a Kafka broker).

It speaks Kafka framing (:class:`~tests.fakes.frame_server.FrameServer`), decodes each
request with :mod:`protocol` and answers with the kio body built by the handler the test
registered for its API key (ApiVersions is answered from :attr:`KioBroker.apis`), so
framing, header versions, version negotiation, pipelining and error handling are exercised
byte for byte. It records what it got, can delay an API's answers and can hang up on an API.

With ``session_lifetime_ms`` set it also logs clients in with SASL/PLAIN and keeps their
sessions as a Kafka broker with ``connections.max.reauth.ms`` does (KIP-368): a SaslHandshake
begins a login or a re-authentication, anything but SaslAuthenticate in the middle of one
closes the connection, and so does any request but SaslHandshake read after the session
expired.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from protocol.headers import parse_request_header
from protocol.messages import ApiKey, decode_request
from tests.fakes.frame_server import Answer, FrameServer, HangUp
from tests.fakes.kafka_responses import (
    api_versions_body,
    metadata_body,
    metadata_topics,
    plain_authenticate_body,
    plain_handshake_body,
    response_payload,
)

__all__ = [
    "KAFKA_APIS",
    "SASL_APIS",
    "TANSU_APIS",
    "Handler",
    "KioBroker",
    "metadata_answer",
    "running",
]

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
"""The answer body to a decoded request of a version."""


@dataclass
class KioBroker:
    """Answers requests with ``handlers[api_key](request, version)``; records what it got."""

    apis: dict[ApiKey, tuple[int, int]]
    handlers: dict[ApiKey, Handler] = field(default_factory=dict)
    received: list[tuple[int, int]] = field(default_factory=list)
    """(API key, version) of every request read."""
    requests: list[tuple[ApiKey, Any]] = field(default_factory=list)
    """Every decoded request, with its API key."""
    delay: dict[ApiKey, float] = field(default_factory=dict)
    """Seconds to wait before answering each request of an API."""
    close_on: ApiKey | None = None
    """An API whose requests make the broker hang up instead of answering."""
    session_lifetime_ms: int | None = None
    """With a value: SASL/PLAIN logins whose sessions last this long (0: for ever)."""
    refused_logins: set[int] = field(default_factory=set)
    """Which logins (1 for the first SaslAuthenticate, counting over all connections) fail."""
    logins: int = 0
    clock: Callable[[], float] = time.monotonic
    """When sessions expire, in seconds."""
    expired: int = 0
    """Connections closed because a request came after their session expired."""
    server: FrameServer = field(init=False)

    def __post_init__(self) -> None:
        self.server = FrameServer(self._connection)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        return self.server.accepted

    def _connection(self) -> Answer:
        session = _Session()

        async def answer(frame: bytes) -> bytes | None:
            header = parse_request_header(frame)
            self.received.append((header.api_key, header.api_version))
            key = ApiKey(header.api_key)
            if key == self.close_on:
                raise HangUp(f"told to hang up on {key.name}")
            request = decode_request(header.api_key, header.api_version, frame[header.size :])
            self.requests.append((key, request))
            if self.session_lifetime_ms is None:
                body = self.respond(key, request, header.api_version)
            else:
                body = self._sasl_respond(session, key, request, header.api_version)
            await asyncio.sleep(self.delay.get(key, 0))
            return response_payload(header, body)

        return answer

    def _sasl_respond(self, session: _Session, key: ApiKey, request: Any, version: int) -> Any:
        """The answer under KIP-368's session rules.

        :raises HangUp: Kafka closes the connection here.
        """
        lifetime_ms = self.session_lifetime_ms or 0
        if key == ApiKey.SASL_HANDSHAKE:
            session.exchanging = True
            return plain_handshake_body(version, request.mechanism)
        if session.exchanging != (key == ApiKey.SASL_AUTHENTICATE):
            raise HangUp("an unexpected request during (or outside) a SASL exchange")
        if key == ApiKey.SASL_AUTHENTICATE:
            session.exchanging = False
            self.logins += 1
            refused = self.logins in self.refused_logins
            session.expires_at = self.clock() + lifetime_ms / 1000 if lifetime_ms else None
            return plain_authenticate_body(
                version,
                refusal="Authentication failed: invalid credentials" if refused else None,
                session_lifetime_ms=lifetime_ms,
            )
        if session.expires_at is not None and self.clock() >= session.expires_at:
            self.expired += 1
            raise HangUp("a request after the session expired")
        return self.respond(key, request, version)

    def respond(self, key: ApiKey, request: Any, version: int) -> Any:
        if key == ApiKey.API_VERSIONS:
            return api_versions_body(version, self.apis)
        return self.handlers[key](request, version)


@dataclass
class _Session:
    """One connection's SASL state on the fake broker."""

    exchanging: bool = False
    """Between a SaslHandshake and the SaslAuthenticate that ends the exchange."""
    expires_at: float | None = None


@asynccontextmanager
async def running(fake: KioBroker) -> AsyncIterator[KioBroker]:
    """``fake`` listening on a free loopback port (``fake.port``) until the block ends."""
    await fake.server.start()
    try:
        yield fake
    finally:
        await fake.server.close()


def metadata_answer(
    version: int,
    *,
    brokers: Mapping[int, int],
    topic: str,
    leaders: Mapping[int, int],
    topic_id: uuid.UUID | None = None,
    leader_epoch: int = 0,
) -> Any:
    """A Metadata answer: ``brokers`` (node id to port, all on 127.0.0.1; the lowest id is
    the controller) and one ``topic`` whose partitions are led as ``leaders`` (partition to
    node id) says, in that order."""
    return metadata_body(
        version,
        [(node, "127.0.0.1", port) for node, port in sorted(brokers.items())],
        metadata_topics(version, [(topic, topic_id, leaders.items())], leader_epoch=leader_epoch),
        cluster_id="c",
    )
