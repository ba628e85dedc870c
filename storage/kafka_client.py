"""A small asyncio Kafka client that speaks the raw protocol through :mod:`protocol`.

The tiering pipeline, ``tierproxy status``, the proxy's own broker queries and the benchmarks
need a handful of requests that ordinary clients hide or refuse: Fetch returning the record
batches *as stored* (no decompression, no record objects) with the high watermark, last
stable offset and log start offset of each partition; ListOffsets; DeleteRecords; topic ids
from Metadata; DescribeConfigs. This client sends exactly those, one connection per broker,
pipelined (Kafka answers in request order, so the head of a deque of in-flight correlation
ids matches every response), with versions negotiated through ApiVersions.

Brokers differ. Tansu advertises DeleteRecords but drops the connection when it gets one, so
:attr:`KafkaClient.broker_kind` tells brokers apart from their ApiVersions answer (Apache
Kafka has always had OffsetForLeaderEpoch; Tansu has not, and reports no feature epoch) and
:meth:`KafkaClient.delete_records` refuses to send to anything but Apache Kafka.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Self, cast

from protocol.errors import KafkaError, ProtocolError, RemoteProtocolError
from protocol.frames import FrameDecoder, encode_frame, foreign_protocol
from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import (
    ApiKey,
    decode_response,
    encode_request,
    nested_class,
    request_class,
)
from protocol.messages import build as build_entity
from protocol.sasl import OAuthBearerExchange, PlainExchange, SaslExchange, ScramClient
from storage.kafka_security import KafkaSecurityConfig
from storage.oauth import ClientCredentialsTokenProvider, TokenError

__all__ = [
    "AuthenticationError",
    "BrokerAddress",
    "BrokerConnectionError",
    "BrokerKind",
    "ClusterMetadata",
    "ConfigEntry",
    "DeleteRecordsUnsupportedError",
    "DeletedRecords",
    "FetchTarget",
    "FetchedPartition",
    "KafkaClient",
    "KafkaClientError",
    "ListedOffset",
    "PartitionMetadata",
    "TopicMetadata",
    "broker_kind_from_api_versions",
    "parse_bootstrap",
]

BrokerKind = Literal["kafka", "tansu", "other"]

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
TOPIC_RESOURCE: Final = 2
"""DescribeConfigs resource type of a topic (``ConfigResource.Type.TOPIC``)."""
DYNAMIC_TOPIC_CONFIG: Final = 1
"""DescribeConfigs config source of a value set on the topic itself."""
NO_TOPIC_ID: Final = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: what brokers without topic ids report."""

# The versions this client speaks, newest first within what kio knows. Fetch stops at 12,
# the last version that names topics (13+ address them by id only).
_SUPPORTED: Final[Mapping[ApiKey, range]] = {
    ApiKey.API_VERSIONS: range(3, 4),
    ApiKey.METADATA: range(1, 13),
    ApiKey.FETCH: range(4, 13),
    ApiKey.LIST_OFFSETS: range(1, 9),
    ApiKey.DELETE_RECORDS: range(0, 3),
    ApiKey.DESCRIBE_CONFIGS: range(1, 5),
    ApiKey.SASL_HANDSHAKE: range(1, 2),
    ApiKey.SASL_AUTHENTICATE: range(1, 3),
}
_MAX_RESPONSE_BYTES: Final = 512 * 1024 * 1024
"""Largest response frame accepted: above any Fetch ``max_bytes`` the pipeline asks for
(Kafka may exceed ``max_bytes`` by one batch, bounded by ``message.max.bytes``)."""


class KafkaClientError(Exception):
    """A request could not be answered (the message says which and why)."""


class BrokerConnectionError(KafkaClientError):
    """The connection to a broker failed, closed or timed out; retrying may succeed."""


class AuthenticationError(KafkaClientError):
    """The broker refused tierproxy's TLS or SASL login: retrying with these settings fails too."""


class DeleteRecordsUnsupportedError(KafkaClientError):
    """The broker cannot delete records (Tansu drops the connection when asked)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAddress:
    """A broker as Metadata (or another response naming brokers) gives it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    partition: int
    leader_id: int
    leader_epoch: int
    error: KafkaError


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    """:data:`NO_TOPIC_ID` where the broker has no topic ids (Metadata before v10)."""
    is_internal: bool
    error: KafkaError
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, BrokerAddress]
    topics: Mapping[str, TopicMetadata]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTarget:
    """One partition to fetch from ``offset``, at most ``max_bytes`` (KIP-74 may exceed it
    by one batch)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedPartition:
    """A partition of a Fetch answer; ``records`` are the batches as the broker stores them
    (possibly ending with a partial batch)."""

    topic: str
    partition: int
    error: KafkaError
    high_watermark: int
    last_stable_offset: int
    """-1 where the broker does not report one."""
    log_start_offset: int
    """-1 where the broker does not report one."""
    records: bytes
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    """``(producer id, first offset)`` of aborted transactions in range (READ_COMMITTED)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedOffset:
    topic: str
    partition: int
    error: KafkaError
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletedRecords:
    topic: str
    partition: int
    error: KafkaError
    low_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    """Kafka's ``ConfigSource`` (1: set on the topic itself, 5: static broker default, ...)."""

    @property
    def is_topic_override(self) -> bool:
        return self.source == DYNAMIC_TOPIC_CONFIG


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list of such) as ``[(host, port), ...]``.

    :raises ValueError: for an entry without a numeric port.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap servers given")
    return addresses


def broker_kind_from_api_versions(api_keys: Mapping[int, range], feature_epoch: int) -> BrokerKind:
    """Tell Apache Kafka from Tansu by the APIs a broker advertises.

    Every Apache Kafka broker since 0.11 serves OffsetForLeaderEpoch; Tansu serves it not, and
    reports no finalized-feature epoch.
    """
    if ApiKey.OFFSET_FOR_LEADER_EPOCH in api_keys:
        return "kafka"
    if feature_epoch < 0 and ApiKey.DESCRIBE_TOPIC_PARTITIONS in api_keys:
        return "tansu"
    return "other"


def _topics(
    request_cls: type[Any],
    partitions: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    name_field: str = "name",
) -> tuple[Any, ...]:
    """The ``topics`` field of a per-partition request, for ``request_cls``'s version.

    ``partitions`` are ``(topic, partition fields)`` rows; they are grouped by topic in the
    order topics first appear, as Fetch, ListOffsets and DeleteRecords all nest them.
    """
    topic_cls = nested_class(request_cls, "topics")
    partition_cls = nested_class(topic_cls, "partitions")
    by_topic: dict[str, list[Mapping[str, Any]]] = {}
    for topic, fields in partitions:
        by_topic.setdefault(topic, []).append(fields)
    return tuple(
        build_entity(
            topic_cls,
            **{name_field: topic},
            partitions=tuple(build_entity(partition_cls, **fields) for fields in rows),
        )
        for topic, rows in by_topic.items()
    )


class _Protocol(asyncio.Protocol):
    """Frames in, responses matched to requests in order; nothing else."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._decoder = FrameDecoder(max_frame_bytes=_MAX_RESPONSE_BYTES)
        self._pending: deque[tuple[int, asyncio.Future[bytes]]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed: BrokerConnectionError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transports are not asyncio.Transport subclasses, only duck-alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while (frame := self._decoder.next_frame()) is not None:
            if not isinstance(frame, bytes):
                spoken = foreign_protocol(frame.declared_size)
                what = f"the peer spoke {spoken}, not the Kafka protocol" if spoken else f"{frame}"
                self._fail(BrokerConnectionError(f"{self._name}: {what}"))
                return
            if not self._pending:
                self._fail(BrokerConnectionError(f"{self._name} sent an unrequested response"))
                return
            correlation_id, future = self._pending.popleft()
            if frame[:4] != correlation_id.to_bytes(4, "big", signed=True):
                self._fail(BrokerConnectionError(f"{self._name} answered out of order"))
                return
            if not future.done():
                future.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._fail(BrokerConnectionError(f"connection to {self._name} closed{reason}"))

    def expect(self, correlation_id: int) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, future))
        return future

    def _fail(self, error: BrokerConnectionError) -> None:
        if self.closed is None:
            self.closed = error
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class _Login:
    """How each connection is secured: its TLS context and SASL exchange, from the settings."""

    def __init__(self, security: KafkaSecurityConfig) -> None:
        self._security = security.with_secrets_resolved()
        self.tls = self._security.ssl_context()
        self.mechanism = self._security.sasl_mechanism if self._security.sasl else ""
        self.principal = self._security.sasl_username or self._security.sasl_oauthbearer_client_id
        self._tokens = (
            ClientCredentialsTokenProvider(self._security)
            if self.mechanism == "OAUTHBEARER"
            else None
        )

    async def exchange(self) -> SaslExchange:
        """A fresh client side of the configured mechanism (OAUTHBEARER: with a valid token)."""
        username, password = self._security.sasl_username, self._security.sasl_password
        if self._tokens is not None:
            return OAuthBearerExchange(await self._tokens.token())
        if self.mechanism == "SCRAM-SHA-256":
            return ScramClient("SCRAM-SHA-256", username, password)
        if self.mechanism == "SCRAM-SHA-512":
            return ScramClient("SCRAM-SHA-512", username, password)
        return PlainExchange(username, password)


class _Connection:
    """One pipelined connection to one broker, with its negotiated API versions."""

    def __init__(self, protocol: _Protocol, name: str, client_id: str, timeout: float) -> None:
        self._protocol = protocol
        self._name = name
        self._client_id = client_id
        self._timeout = timeout
        self._correlation_id = 0
        self.versions: dict[int, range] = {}
        self.feature_epoch = -1

    @classmethod
    async def open(
        cls, host: str, port: int, client_id: str, request_timeout: float, login: _Login
    ) -> _Connection:
        name = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(request_timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Protocol(name),
                    host,
                    port,
                    ssl=login.tls,
                    server_hostname=host if login.tls is not None else None,
                )
        except ssl.SSLCertVerificationError as err:
            raise AuthenticationError(f"TLS to {name}: {err.verify_message}") from err
        except (OSError, TimeoutError) as err:
            raise BrokerConnectionError(f"cannot connect to {name}: {err}") from err
        connection = cls(protocol, name, client_id, request_timeout)
        try:
            await connection._negotiate()
            if login.mechanism:
                await connection._log_in(login)
        except BaseException:
            connection.close()
            raise
        return connection

    @property
    def is_closed(self) -> bool:
        return self._protocol.closed is not None

    def close(self) -> None:
        if self._protocol.transport is not None:
            self._protocol.transport.close()

    async def _negotiate(self) -> None:
        request = request_class(ApiKey.API_VERSIONS, 3)(
            client_software_name="tierproxy", client_software_version="1"
        )
        response = await self._send(ApiKey.API_VERSIONS, 3, request)
        if response.error_code != 0:
            raise BrokerConnectionError(
                f"{self._name} refused ApiVersions v3: {KafkaError(int(response.error_code)).name}"
            )
        self.versions = {
            int(k.api_key): range(int(k.min_version), int(k.max_version) + 1)
            for k in response.api_keys
        }
        self.feature_epoch = int(response.finalized_features_epoch)

    async def _log_in(self, login: _Login) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism's exchange is complete.

        :raises AuthenticationError: the broker refused the mechanism or the credentials.
        """
        handshake = await self.request(
            ApiKey.SASL_HANDSHAKE, lambda cls: cls(mechanism=login.mechanism)
        )
        if handshake.error_code != KafkaError.NONE:
            raise AuthenticationError(
                f"{self._name} offers SASL mechanisms {list(handshake.mechanisms)}, "
                f"not {login.mechanism}"
            )
        try:
            exchange = await login.exchange()
            message = exchange.respond(b"")
            while message is not None:
                answer = await self.request(
                    ApiKey.SASL_AUTHENTICATE, lambda cls, m=message: cls(auth_bytes=m)
                )
                if answer.error_code != KafkaError.NONE:
                    reason = answer.error_message or KafkaError(answer.error_code).name
                    raise AuthenticationError(
                        f"{self._name} refused the SASL/{login.mechanism} login as "
                        f"{login.principal}: {reason}"
                    )
                message = exchange.respond(bytes(answer.auth_bytes))
        except (RemoteProtocolError, TokenError) as err:
            raise AuthenticationError(
                f"SASL/{login.mechanism} login to {self._name} as {login.principal}: {err}"
            ) from err

    def version(self, api_key: ApiKey) -> int:
        """The newest version both sides speak.

        :raises KafkaClientError: when there is none.
        """
        ours = _SUPPORTED[api_key]
        theirs = self.versions.get(api_key)
        if theirs is not None:
            common = range(max(ours.start, theirs.start), min(ours.stop, theirs.stop))
            if common:
                return common[-1]
        raise KafkaClientError(f"{self._name} speaks no version of {api_key.name} we know")

    async def request(self, api_key: ApiKey, build: Any) -> Any:
        """Send the request ``build(request_class)`` returns, in the negotiated version."""
        version = self.version(api_key)
        return await self._send(api_key, version, build(request_class(api_key, version)))

    async def _send(self, api_key: ApiKey, version: int, payload: Any) -> Any:
        if self._protocol.closed is not None:
            raise self._protocol.closed
        transport = self._protocol.transport
        assert transport is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        header = encode_request_header(api_key, version, correlation_id, self._client_id)
        future = self._protocol.expect(correlation_id)
        transport.write(encode_frame(header + encode_request(payload)))
        try:
            async with asyncio.timeout(self._timeout):
                frame = await future
        except TimeoutError as err:
            self._protocol.connection_lost(err)
            raise BrokerConnectionError(
                f"{api_key.name} to {self._name} timed out after {self._timeout:.0f} s"
            ) from err
        header_version = 0 if api_key == ApiKey.API_VERSIONS else None
        if header_version is None:
            header_version = response_header_version(api_key, version)
        assert header_version is not None
        try:
            _, size = parse_response_header(frame, header_version)
            return decode_response(api_key, version, memoryview(frame)[size:])
        except ProtocolError as err:
            raise KafkaClientError(
                f"cannot decode {api_key.name} v{version} from {self._name}: {err}"
            ) from err


class KafkaClient:
    """Raw requests to the brokers of one cluster.

    Use as ``async with KafkaClient(...) as client``. Connections open on first use, one per
    broker, and are reopened after a failure on the next request.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tierproxy",
        request_timeout_ms: int = 30_000,
        security: KafkaSecurityConfig | None = None,
    ) -> None:
        """:raises ValueError: for malformed bootstrap servers.
        :raises ConfigError: when the SASL password file cannot be read.
        :raises OSError: when a TLS CA, certificate or key file cannot be read.
        """
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._login = _Login(security or KafkaSecurityConfig())
        self._brokers: dict[int, BrokerAddress] = {}
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[_Connection]] = {}
        self._kind: BrokerKind | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection."""
        for task in self._opening.values():
            task.cancel()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        self._opening.clear()

    @property
    def broker_kind(self) -> BrokerKind:
        """What the first broker answered as (``"other"`` before any connection)."""
        return self._kind or "other"

    async def detect_broker_kind(self) -> BrokerKind:
        """Connect if needed and tell what kind of broker this is.

        :raises BrokerConnectionError: when no bootstrap server answers.
        """
        await self._bootstrap_connection()
        return self.broker_kind

    async def _connect(self, host: str, port: int) -> _Connection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is not None and not connection.is_closed:
            return connection
        task = self._opening.get(key)
        if task is None:
            task = asyncio.ensure_future(
                _Connection.open(host, port, self._client_id, self._timeout, self._login)
            )
            self._opening[key] = task
        try:
            connection = await asyncio.shield(task)
        finally:
            if self._opening.get(key) is task and task.done():
                del self._opening[key]
        self._connections[key] = connection
        if self._kind is None:
            self._kind = broker_kind_from_api_versions(
                connection.versions, connection.feature_epoch
            )
        return connection

    async def _bootstrap_connection(self) -> _Connection:
        errors = []
        for host, port in self._bootstrap:
            try:
                return await self._connect(host, port)
            except BrokerConnectionError as err:
                errors.append(str(err))
        raise BrokerConnectionError("no bootstrap server answered: " + "; ".join(errors))

    async def _node(self, node_id: int | None) -> _Connection:
        if node_id is None:
            return await self._bootstrap_connection()
        address = self._brokers.get(node_id)
        if address is None:
            await self.metadata(())
            address = self._brokers.get(node_id)
            if address is None:
                raise KafkaClientError(f"broker {node_id} is not in the cluster metadata")
        return await self._connect(address.host, address.port)

    async def api_versions(self, node_id: int | None = None) -> Mapping[int, range]:
        """The API version ranges the broker advertised."""
        return dict((await self._node(node_id)).versions)

    async def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """Brokers, and the topics named (all topics for ``None``, none for ``()``).

        :raises BrokerConnectionError: when no broker answers.
        """
        connection = await self._bootstrap_connection()

        def build(cls: type[Any]) -> Any:
            if topics is None:
                wanted = None
            else:
                topic_cls = nested_class(cls, "topics")
                wanted = tuple(
                    build_entity(topic_cls, name=t, topic_id=NO_TOPIC_ID) for t in topics
                )
            return build_entity(
                cls,
                topics=wanted,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        response = await connection.request(ApiKey.METADATA, build)
        brokers = {
            int(b.node_id): BrokerAddress(node_id=int(b.node_id), host=b.host, port=int(b.port))
            for b in response.brokers
        }
        self._brokers = dict(brokers)
        topic_map = {}
        for t in response.topics:
            if t.name is None:
                continue
            topic_map[t.name] = TopicMetadata(
                name=t.name,
                topic_id=getattr(t, "topic_id", None) or NO_TOPIC_ID,
                is_internal=bool(getattr(t, "is_internal", False)),
                error=KafkaError(int(t.error_code)),
                partitions=tuple(
                    sorted(
                        (
                            PartitionMetadata(
                                partition=int(p.partition_index),
                                leader_id=int(p.leader_id),
                                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                                error=KafkaError(int(p.error_code)),
                            )
                            for p in t.partitions
                        ),
                        key=lambda p: p.partition,
                    )
                ),
            )
        return ClusterMetadata(
            cluster_id=getattr(response, "cluster_id", None),
            controller_id=int(getattr(response, "controller_id", -1)),
            brokers=brokers,
            topics=topic_map,
        )

    async def fetch(
        self,
        node_id: int | None,
        targets: Sequence[FetchTarget],
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 64 * 1024 * 1024,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[FetchedPartition]:
        """Fetch raw record batches from the leader ``node_id`` (sessionless, replica -1).

        :raises BrokerConnectionError: when the broker cannot be reached or times out.
        :raises KafkaClientError: for a top-level error of the whole response.
        """
        connection = await self._node(node_id)
        partitions = [
            (
                t.topic,
                {
                    "partition": t.partition,
                    "fetch_offset": t.offset,
                    "partition_max_bytes": t.max_bytes,
                    "log_start_offset": -1,
                    "current_leader_epoch": -1,
                    "last_fetched_epoch": -1,
                },
            )
            for t in targets
        ]

        def build(cls: type[Any]) -> Any:
            return build_entity(
                cls,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                isolation_level=isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=_topics(cls, partitions, name_field="topic"),
                forgotten_topics_data=(),
                rack_id="",
            )

        response = await connection.request(ApiKey.FETCH, build)
        error = KafkaError(int(getattr(response, "error_code", 0)))
        if error != KafkaError.NONE:
            raise KafkaClientError(f"Fetch failed: {error.name}")
        return [
            FetchedPartition(
                topic=t.topic,
                partition=int(p.partition_index),
                error=KafkaError(int(p.error_code)),
                high_watermark=int(p.high_watermark),
                last_stable_offset=int(getattr(p, "last_stable_offset", -1)),
                log_start_offset=int(getattr(p, "log_start_offset", -1)),
                records=bytes(p.records or b""),
                aborted_transactions=tuple(
                    (int(a.producer_id), int(a.first_offset))
                    for a in (p.aborted_transactions or ())
                ),
            )
            for t in response.responses
            for p in t.partitions
        ]

    async def list_offsets(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[ListedOffset]:
        """ListOffsets for ``(topic, partition, timestamp)`` targets (-2 earliest, -1 latest).

        Tansu may answer LATEST with the last batch's base offset: use a Fetch's high
        watermark for the log end.
        """
        connection = await self._node(node_id)
        partitions = [
            (topic, {"partition_index": p, "timestamp": ts, "current_leader_epoch": -1})
            for topic, p, ts in targets
        ]

        def build(cls: type[Any]) -> Any:
            return build_entity(
                cls,
                replica_id=-1,
                isolation_level=isolation_level,
                topics=_topics(cls, partitions),
            )

        response = await connection.request(ApiKey.LIST_OFFSETS, build)
        return [
            ListedOffset(
                topic=t.name,
                partition=int(p.partition_index),
                error=KafkaError(int(p.error_code)),
                offset=int(p.offset),
                timestamp=int(p.timestamp),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
            )
            for t in response.topics
            for p in t.partitions
        ]

    async def delete_records(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        timeout_ms: int = 30_000,
    ) -> list[DeletedRecords]:
        """Move the log start of ``(topic, partition, offset)`` targets forward.

        :raises DeleteRecordsUnsupportedError: unless the broker is Apache Kafka (Tansu drops
            the connection on DeleteRecords).
        """
        connection = await self._node(node_id)
        if self.broker_kind != "kafka":
            raise DeleteRecordsUnsupportedError(
                f"the broker ({self.broker_kind}) does not support DeleteRecords"
            )
        partitions = [(topic, {"partition_index": p, "offset": o}) for topic, p, o in targets]

        def build(cls: type[Any]) -> Any:
            return build_entity(
                cls,
                timeout=datetime.timedelta(milliseconds=timeout_ms),
                topics=_topics(cls, partitions),
            )

        response = await connection.request(ApiKey.DELETE_RECORDS, build)
        return [
            DeletedRecords(
                topic=t.name,
                partition=int(p.partition_index),
                error=KafkaError(int(p.error_code)),
                low_watermark=int(p.low_watermark),
            )
            for t in response.topics
            for p in t.partitions
        ]

    async def describe_configs(
        self, topics: Sequence[str]
    ) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
        """Each topic's configs, or the error the broker gave for it.

        Brokers that keep no topic configs (Tansu) answer with an empty mapping.
        """
        if not topics:
            return {}
        connection = await self._bootstrap_connection()

        def build(cls: type[Any]) -> Any:
            resource_cls = nested_class(cls, "resources")
            return build_entity(
                cls,
                resources=tuple(
                    build_entity(
                        resource_cls,
                        resource_type=TOPIC_RESOURCE,
                        resource_name=t,
                        configuration_keys=None,
                    )
                    for t in topics
                ),
                include_synonyms=False,
                include_documentation=False,
            )

        response = await connection.request(ApiKey.DESCRIBE_CONFIGS, build)
        results: dict[str, dict[str, ConfigEntry] | KafkaError] = {}
        for result in response.results:
            error = KafkaError(int(result.error_code))
            if error != KafkaError.NONE:
                results[result.resource_name] = error
                continue
            results[result.resource_name] = {
                c.name: ConfigEntry(
                    name=c.name,
                    value=c.value,
                    source=int(getattr(c, "config_source", -1)),
                )
                for c in result.configs
            }
        return results
