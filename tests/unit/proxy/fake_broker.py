"""An in-process, scripted FAKE broker for the proxy's unit tests (not a Kafka broker).

It speaks Kafka framing and answers the two requests the proxy itself sends at start-up
(ApiVersions, Metadata) with kio-encoded bodies. Every other request goes to the test's
script: a coroutine that returns the response payload (header included) or ``None`` for
no response. Requests on one connection are answered one after the other, as Kafka does,
so a slow scripted answer delays the ones after it on that connection.

Raw pass-through tests use API keys the proxy never decodes (Heartbeat, OffsetCommit) with
opaque bodies: the proxy must not care what is inside.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import struct
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from kio.static.primitive import Records

from protocol.errors import RemoteProtocolError
from protocol.frames import FrameDecoder
from protocol.headers import (
    RequestHeader,
    encode_response_header,
    parse_request_header,
    peek_request,
    response_header_version,
)
from protocol.messages import (
    ApiKey,
    ErrorCode,
    build,
    decode_request,
    encode_response,
    nested_class,
    request_class,
    response_class,
)

Script = Callable[[RequestHeader, bytes], Awaitable[bytes | None]]

# A raw API for pass-through tests: the proxy never decodes Heartbeat.
RAW_API = 12
RAW_VERSION = 0

# ApiVersions ranges the fake advertises (Fetch deliberately wider than the proxy handles).
ADVERTISED = {
    int(ApiKey.PRODUCE): (0, 11),
    int(ApiKey.FETCH): (0, 17),
    int(ApiKey.METADATA): (0, 12),
    int(ApiKey.OFFSET_COMMIT): (0, 9),
    int(ApiKey.FIND_COORDINATOR): (0, 6),
    int(ApiKey.HEARTBEAT): (0, 4),
    int(ApiKey.API_VERSIONS): (0, 4),
    int(ApiKey.DESCRIBE_CLUSTER): (0, 1),
    int(ApiKey.SASL_HANDSHAKE): (0, 1),
    int(ApiKey.SASL_AUTHENTICATE): (0, 2),
}


def response_payload(header: RequestHeader, body: Any) -> bytes:
    """Header (of the right version) plus encoded body, for ``header``'s request."""
    version = response_header_version(header.api_key, header.api_version)
    assert version is not None
    return encode_response_header(header.correlation_id, version) + encode_response(body)


def list_offsets_request(version: int = 1, timestamp: int = -1) -> Any:
    body_class = request_class(ApiKey.LIST_OFFSETS, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        replica_id=-1,
        isolation_level=0,
        topics=(
            topic_class(
                name="t",
                partitions=(build(partition_class, partition_index=0, timestamp=timestamp),),
            ),
        ),
    )


def list_offsets_response(version: int = 1, offset: int = 5) -> Any:
    body_class = response_class(ApiKey.LIST_OFFSETS, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        throttle_time=datetime.timedelta(0),
        topics=(
            topic_class(
                name="t",
                partitions=(
                    build(
                        partition_class,
                        partition_index=0,
                        error_code=ErrorCode.none,
                        timestamp=-1,
                        offset=offset,
                    ),
                ),
            ),
        ),
    )


def empty_fetch_request(version: int) -> Any:
    """A consumer's Fetch asking for nothing (the fake answers what its script says)."""
    return build(
        request_class(ApiKey.FETCH, version),
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetch_response_payload(
    version: int,
    correlation_id: int,
    *,
    records: bytes,
    endpoints: Sequence[tuple[int, str, int]] = (),
) -> bytes:
    """A Fetch v12+ response payload with one partition of ``records``; with ``endpoints``
    (node id, host, port) the partition failed with NOT_LEADER_OR_FOLLOWER and they are its
    KIP-951 node endpoints (v16+), as Kafka sends them."""
    body_class = response_class(ApiKey.FETCH, version)
    topic_class = nested_class(body_class, "responses")
    partition_class = nested_class(topic_class, "partitions")
    partition = build(
        partition_class,
        partition_index=0,
        error_code=ErrorCode.not_leader_or_follower if endpoints else ErrorCode.none,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=Records(records),
    )
    topic = build(topic_class, topic_id=uuid.UUID(int=7), topic="t", partitions=(partition,))
    endpoint_class = nested_class(body_class, "node_endpoints") if version >= 16 else None
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(topic,),
        node_endpoints=tuple(
            endpoint_class(node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in endpoints
        )
        if endpoint_class is not None
        else (),
    )
    return encode_response_header(correlation_id, 1) + encode_response(body)


def share_response_payload(
    api_key: ApiKey,
    version: int,
    correlation_id: int,
    *,
    records: bytes = b"",
    endpoints: Sequence[tuple[int, str, int]] = (),
) -> bytes:
    """A ShareFetch (with ``records``, acquired) or ShareAcknowledge response payload with one
    partition; with ``endpoints`` (node id, host, port) the partition failed with
    NOT_LEADER_OR_FOLLOWER and they are its node endpoints, as Kafka sends them."""
    body_class = response_class(api_key, version)
    topic_class = nested_class(body_class, "responses")
    partition_class = nested_class(topic_class, "partitions")
    leader = nested_class(partition_class, "current_leader")(leader_id=2, leader_epoch=3)
    acquired = (
        (
            nested_class(partition_class, "acquired_records")(
                first_offset=0, last_offset=9, delivery_count=1
            ),
        )
        if records
        else ()
    )
    partition = build(
        partition_class,
        partition_index=0,
        error_code=ErrorCode.not_leader_or_follower if endpoints else ErrorCode.none,
        error_message=None,
        acknowledge_error_code=0,
        acknowledge_error_message=None,
        current_leader=leader,
        records=Records(records),
        acquired_records=acquired,
    )
    topic = build(topic_class, topic_id=uuid.UUID(int=7), partitions=(partition,))
    endpoint_class = nested_class(body_class, "node_endpoints")
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=(topic,),
        node_endpoints=tuple(
            endpoint_class(node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in endpoints
        ),
    )
    return encode_response_header(correlation_id, 1) + encode_response(body)


def raw_request(correlation_id: int, body: bytes, api_key: int = RAW_API) -> bytes:
    """A framed request of a raw API with an opaque body (request header v1)."""
    header = struct.pack(">hhih", api_key, RAW_VERSION, correlation_id, 4) + b"test"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def raw_response_body(payload: bytes) -> tuple[int, bytes]:
    """Split a raw response payload into (correlation id, body)."""
    return struct.unpack_from(">i", payload)[0], payload[4:]


async def echo(header: RequestHeader, body: bytes) -> bytes:
    """Default script: answer with the request body after ``echo:``."""
    return struct.pack(">i", header.correlation_id) + b"echo:" + body


def metadata_response(
    header: RequestHeader, brokers: Sequence[tuple[int, str, int]], topics: tuple[Any, ...] = ()
) -> bytes:
    body_class = response_class(ApiKey.METADATA, header.api_version)
    broker_class = nested_class(body_class, "brokers")
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            build(broker_class, node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in brokers
        ),
        cluster_id="fake",
        controller_id=brokers[0][0] if brokers else -1,
        topics=topics,
    )
    return response_payload(header, body)


def metadata_topics(
    version: int, topics: Sequence[tuple[str, uuid.UUID, Sequence[tuple[int, int]]]]
) -> tuple[Any, ...]:
    """The ``topics`` of a Metadata answer of ``version``: (name, id, [(partition, leader)])."""
    topic_class = nested_class(response_class(ApiKey.METADATA, version), "topics")
    partition_class = nested_class(topic_class, "partitions")
    return tuple(
        build(
            topic_class,
            error_code=ErrorCode.none,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=tuple(
                build(
                    partition_class,
                    error_code=ErrorCode.none,
                    partition_index=index,
                    leader_id=leader,
                    leader_epoch=0,
                    replica_nodes=(leader,),
                    isr_nodes=(leader,),
                    offline_replicas=(),
                )
                for index, leader in partitions
            ),
        )
        for name, topic_id, partitions in topics
    )


def api_versions_response(header: RequestHeader) -> bytes:
    body_class = response_class(ApiKey.API_VERSIONS, header.api_version)
    entry_class = nested_class(body_class, "api_keys")
    body = build(
        body_class,
        error_code=ErrorCode.none,
        api_keys=tuple(
            entry_class(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in ADVERTISED.items()
        ),
        throttle_time=datetime.timedelta(0),
    )
    return response_payload(header, body)


def sasl_response(header: RequestHeader, **fields: Any) -> bytes:
    return response_payload(
        header, build(response_class(header.api_key, header.api_version), **fields)
    )


class FakeBroker:
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
        # Other brokers this one reports in Metadata: (node id, host, port).
        self.peers: list[tuple[int, str, int]] = []
        # Topics this one reports in Metadata, every partition led by itself:
        # name -> (topic id, partition count).
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.requests: list[tuple[int, int, int]] = []
        self.connections: list[asyncio.Transport] = []
        # Set whenever a connection to the fake ends.
        self.disconnected = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def brokers(self) -> list[tuple[int, str, int]]:
        return [(self.node_id, "127.0.0.1", self.port), *self.peers]

    async def start(self, *, tls: ssl.SSLContext | None = None) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

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
        transport = cast(asyncio.Transport, writer.transport)
        self.connections.append(transport)
        decoder = FrameDecoder()
        authenticated = [self.sasl_users is None]
        try:
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    data = await reader.read(65536)
                    if not data:
                        return
                    decoder.feed(data)
                    continue
                assert isinstance(frame, bytes)
                self.requests.append(peek_request(frame))
                payload = await self._answer(frame, authenticated)
                if payload is not None:
                    writer.write(struct.pack(">i", len(payload)) + payload)
                    await writer.drain()
        except (ConnectionError, RemoteProtocolError, asyncio.CancelledError):
            # Garbage or a closed peer: close the connection, as a broker does.
            return
        finally:
            self._tasks.discard(task)
            writer.close()
            self.disconnected.set()

    async def _answer(self, frame: bytes, authenticated: list[bool]) -> bytes | None:
        api_key, _, _ = peek_request(frame)
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return self._sasl(frame, authenticated)
        if not authenticated[0] and api_key != ApiKey.API_VERSIONS:
            raise ConnectionError("a request before SASL authentication")
        if api_key in (ApiKey.API_VERSIONS, ApiKey.METADATA):
            header = parse_request_header(frame)
            if api_key == ApiKey.API_VERSIONS:
                return api_versions_response(header)
            return metadata_response(header, self.brokers, self._topics(header.api_version))
        header = parse_request_header(frame)
        return await self.script(header, frame[header.size :])

    def _topics(self, version: int) -> tuple[Any, ...]:
        return metadata_topics(
            version,
            [
                (name, topic_id, [(index, self.node_id) for index in range(count)])
                for name, (topic_id, count) in self.topics.items()
            ],
        )

    def _sasl(self, frame: bytes, authenticated: list[bool]) -> bytes:
        header = parse_request_header(frame)
        body = decode_request(header.api_key, header.api_version, frame[header.size :])
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            ok = body.mechanism == "PLAIN"
            return sasl_response(
                header,
                error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                mechanisms=("PLAIN",),
            )
        _, user, password = bytes(body.auth_bytes).split(b"\0")
        ok = (self.sasl_users or {}).get(user.decode()) == password.decode()
        if ok:
            authenticated[0] = True
            self.logins.append(user.decode())
        return sasl_response(
            header,
            error_code=ErrorCode.none if ok else ErrorCode.sasl_authentication_failed,
            error_message=None if ok else "bad password",
            auth_bytes=b"",
            session_lifetime=datetime.timedelta(0),
        )
