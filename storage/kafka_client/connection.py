"""One pipelined connection to one broker: framing, version negotiation and the login.

Kafka answers the requests of a connection in the order they were sent, so the head of a
deque of in-flight correlation ids matches every response and any number of requests can be
in flight. ApiVersions v3 opens each connection; the versions it answers bound what
:meth:`Connection.request` sends. Then, with SASL configured, the connection logs in
(SaslHandshake and SaslAuthenticate around the sans-IO exchanges of :mod:`protocol.sasl`).

Re-authentication (KIP-368), as Kafka's ``KafkaChannel`` and ``SaslClientAuthenticator`` do
it: a broker with ``connections.max.reauth.ms`` gives each login a session lifetime and closes
the connection at the first request it reads after the session expired. The connection logs
in again on the same socket once 85 to 95 % of the lifetime has passed
(:func:`protocol.sasl.reauthentication_delay`), before the next request it sends, and with a
fresh exchange (OAUTHBEARER: a token valid then). Requests already in flight stay in flight:
the broker answers them before the SaslHandshake, in order, so the deque matches them as
always. No other request is sent until the login is complete, because a broker closes a
connection that sends anything else in the middle of a SASL exchange.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from time import monotonic
from typing import Any, Final, cast

from protocol.errors import KafkaError, ProtocolError, RemoteProtocolError
from protocol.frame_receiver import Frame, FrameReceiver
from protocol.frames import encode_frame, foreign_protocol
from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, decode_response, encode_request, request_class
from protocol.sasl import (
    OAuthBearerExchange,
    PlainExchange,
    SaslExchange,
    ScramClient,
    reauthentication_delay,
)
from storage.kafka_client.values import AuthenticationError, BrokerConnectionError, KafkaClientError
from storage.kafka_security import KafkaSecurityConfig
from storage.log_event import event
from storage.oauth import ClientCredentialsTokenProvider, TokenError, TokenProvider

__all__ = ["Connection", "Login"]

log = logging.getLogger(__name__)

# The versions this client speaks, within what kio knows. Fetch stops at 12, the last
# version that names topics (13+ address them by id only); Produce at 11, the last before
# KIP-890's transactions v2, whose implicit AddPartitionsToTxn the fenced pipeline's
# transactions (v1, storage.kafka_client.transactions) must not mix with.
_SUPPORTED: Final[Mapping[ApiKey, range]] = {
    ApiKey.API_VERSIONS: range(3, 4),
    ApiKey.PRODUCE: range(3, 12),
    ApiKey.METADATA: range(1, 13),
    ApiKey.FETCH: range(4, 13),
    ApiKey.LIST_OFFSETS: range(1, 9),
    ApiKey.DELETE_RECORDS: range(0, 3),
    ApiKey.DESCRIBE_CONFIGS: range(1, 5),
    ApiKey.CREATE_TOPICS: range(2, 8),
    ApiKey.INIT_PRODUCER_ID: range(0, 6),
    # Transactions v1 (storage.kafka_client.transactions): the client's AddPartitionsToTxn
    # versions, and EndTxn before v5, which would bump the epoch on every commit.
    ApiKey.FIND_COORDINATOR: range(1, 7),
    ApiKey.ADD_PARTITIONS_TO_TXN: range(0, 4),
    ApiKey.END_TXN: range(0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: range(0, 1),
    ApiKey.SASL_HANDSHAKE: range(1, 2),
    ApiKey.SASL_AUTHENTICATE: range(1, 3),
}
_MAX_RESPONSE_BYTES: Final = 512 * 1024 * 1024
"""Largest response frame accepted: above any Fetch ``max_bytes`` the pipeline asks for
(Kafka may exceed ``max_bytes`` by one batch, bounded by ``message.max.bytes``)."""


_Decoder = Callable[[Frame], Any]
"""Turns a response frame into its message, or raises :class:`KafkaClientError`."""

_CLOSE_WAIT_S: Final = 1.0
"""How long closing waits for a peer's TLS close_notify before dropping the connection: a
peer that does not answer is not worth holding a caller's shutdown for."""


class _FrameProtocol(asyncio.BufferedProtocol):
    """Frames in, responses matched to requests in order; nothing else.

    A buffered protocol: the socket is read into :class:`FrameReceiver`'s buffers, so a
    large Fetch response arrives in the buffer it is decoded from, never joined. Each
    response is decoded here, as soon as its frame is complete, because the receiver
    reuses that buffer for the next large frame.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._receiver = FrameReceiver(max_frame_bytes=_MAX_RESPONSE_BYTES)
        self._pending: deque[tuple[int, asyncio.Future[Any], _Decoder]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed: BrokerConnectionError | None = None
        self.lost = asyncio.Event()
        """Set once the transport is gone (its socket closed)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transports are not asyncio.Transport subclasses, only duck-alike.
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        frames, error = self._receiver.received(nbytes)
        for frame in frames:
            if not self._pending:
                self._fail(BrokerConnectionError(f"{self._name} sent an unrequested response"))
                return
            correlation_id, future, decode = self._pending.popleft()
            if frame[:4] != correlation_id.to_bytes(4, "big", signed=True):
                self._fail(BrokerConnectionError(f"{self._name} answered out of order"))
                return
            if not future.done():
                try:
                    future.set_result(decode(frame))
                except Exception as err:  # the request's own failure: its caller gets it
                    future.set_exception(err)
        if error is not None:
            spoken = foreign_protocol(error.declared_size)
            what = f"the peer spoke {spoken}, not the Kafka protocol" if spoken else f"{error}"
            self._fail(BrokerConnectionError(f"{self._name}: {what}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        reason = f": {exc}" if exc else ""
        self._fail(BrokerConnectionError(f"connection to {self._name} closed{reason}"))

    def expect(self, correlation_id: int, decode: _Decoder) -> asyncio.Future[Any]:
        """A future for the response to ``correlation_id``: ``decode`` of its frame, or what
        it raised (:class:`KafkaClientError` for a response it cannot decode)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, future, decode))
        return future

    def _fail(self, error: BrokerConnectionError) -> None:
        if self.closed is None:
            self.closed = error
        while self._pending:
            _, future, _ = self._pending.popleft()
            if not future.done():
                future.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class Login:
    """How each connection is secured: its TLS context and SASL exchange, from the settings."""

    def __init__(self, security: KafkaSecurityConfig) -> None:
        self._security = security.with_secrets_resolved()
        self.tls = self._security.ssl_context()
        self.mechanism = self._security.sasl_mechanism if self._security.sasl else ""
        self.principal = self._security.sasl_username or self._security.sasl_oauthbearer_client_id
        self._tokens: TokenProvider | None = (
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


class Connection:
    """One pipelined connection to one broker, with its negotiated API versions."""

    def __init__(
        self,
        protocol: _FrameProtocol,
        name: str,
        client_id: str,
        timeout: float,
        login: Login,
    ) -> None:
        self._protocol = protocol
        self._name = name
        self._client_id = client_id
        self._timeout = timeout
        self._login = login
        self._correlation_id = 0
        self._reauthenticate_at: float | None = None
        """``time.monotonic()`` after which the next request first logs in again."""
        self._reauthenticating = asyncio.Lock()
        self.session_lifetime_ms = 0
        """The SASL session lifetime the broker gave the last login (0: none, or no SASL)."""
        self.versions: dict[int, range] = {}
        self.feature_epoch = -1

    @classmethod
    async def open(
        cls, host: str, port: int, client_id: str, request_timeout: float, login: Login
    ) -> Connection:
        name = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(request_timeout):
                _, protocol = await loop.create_connection(
                    lambda: _FrameProtocol(name),
                    host,
                    port,
                    ssl=login.tls,
                    server_hostname=host if login.tls is not None else None,
                )
        except ssl.SSLCertVerificationError as err:
            raise AuthenticationError(f"TLS to {name}: {err.verify_message}") from err
        except (OSError, TimeoutError) as err:
            raise BrokerConnectionError(f"cannot connect to {name}: {err}") from err
        connection = cls(protocol, name, client_id, request_timeout, login)
        try:
            await connection._negotiate()
            if login.mechanism:
                await connection._log_in()
        except BaseException:
            connection.close()
            raise
        event(
            log,
            logging.DEBUG,
            "kafka.connected",
            msg=f"connected to {name} (client id {client_id})",
            broker=name,
            client_id=client_id,
        )
        return connection

    @property
    def is_closed(self) -> bool:
        return self._protocol.closed is not None

    def close(self) -> None:
        if self._protocol.transport is not None:
            self._protocol.transport.close()

    async def aclose(self) -> None:
        """Close and wait until the socket is closed, aborting after ``_CLOSE_WAIT_S``.

        A TLS connection's ``close`` first exchanges close_notify with the peer; a caller
        whose event loop ends right after (``asyncio.run`` around a short-lived client)
        would otherwise leave the socket open behind it.
        """
        transport = self._protocol.transport
        if transport is None:
            return
        transport.close()
        try:
            async with asyncio.timeout(_CLOSE_WAIT_S):
                await self._protocol.lost.wait()
        except TimeoutError:
            transport.abort()

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

    async def _log_in(self) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism's exchange is complete;
        the session lifetime of the last answer schedules the next login.

        :raises AuthenticationError: the broker refused the mechanism or the credentials.
        """
        login = self._login
        handshake = await self._request(
            ApiKey.SASL_HANDSHAKE, lambda cls: cls(mechanism=login.mechanism)
        )
        if handshake.error_code != KafkaError.NONE:
            raise AuthenticationError(
                f"{self._name} offers SASL mechanisms {list(handshake.mechanisms)}, "
                f"not {login.mechanism}"
            )
        session_lifetime_ms = 0
        try:
            exchange = await login.exchange()
            message = exchange.respond(b"")
            while message is not None:
                answer = await self._request(
                    ApiKey.SASL_AUTHENTICATE, lambda cls, m=message: cls(auth_bytes=m)
                )
                if answer.error_code != KafkaError.NONE:
                    reason = answer.error_message or KafkaError(answer.error_code).name
                    raise AuthenticationError(
                        f"{self._name} refused the SASL/{login.mechanism} login as "
                        f"{login.principal}: {reason}"
                    )
                lifetime = answer.session_lifetime  # a timedelta of Kafka's session_lifetime_ms
                session_lifetime_ms = round(lifetime.total_seconds() * 1000) or session_lifetime_ms
                message = exchange.respond(bytes(answer.auth_bytes))
        except (RemoteProtocolError, TokenError) as err:
            raise AuthenticationError(
                f"SASL/{login.mechanism} login to {self._name} as {login.principal}: {err}"
            ) from err
        delay = reauthentication_delay(session_lifetime_ms, random.random())
        self._reauthenticate_at = None if delay is None else monotonic() + delay
        self.session_lifetime_ms = session_lifetime_ms

    def _session_due(self) -> bool:
        """Whether the SASL session must be renewed before the next request."""
        due = self._reauthenticate_at
        return due is not None and monotonic() >= due

    async def _reauthenticate(self) -> None:
        """Log in again on this connection (KIP-368); one request does it, the others that
        want to send meanwhile wait for it.

        :raises AuthenticationError: the broker refused the new login; the connection is
            closed (the broker closes it too) and its in-flight requests fail.
        :raises BrokerConnectionError: the connection closed or timed out meanwhile.
        """
        async with self._reauthenticating:
            if not self._session_due():
                return  # done by the request that waited before this one
            began = monotonic()
            try:
                await self._log_in()
            except AuthenticationError as err:
                self._protocol.connection_lost(err)
                raise
            event(
                log,
                logging.DEBUG,
                "kafka.reauthenticated",
                msg=f"re-authenticated to {self._name} (client id {self._client_id}) in "
                f"{(monotonic() - began) * 1000:.0f} ms; session lifetime "
                f"{self.session_lifetime_ms} ms",
                broker=self._name,
                client_id=self._client_id,
            )

    def speaks(self, api_key: ApiKey) -> bool:
        """Whether the broker advertised ``api_key`` in a version this client knows."""
        try:
            self.version(api_key)
        except KafkaClientError:
            return False
        return True

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
        """Send the request ``build(request_class)`` returns, in the negotiated version, after
        renewing the SASL session if it is due.

        :raises AuthenticationError: the broker refused the renewed login.
        :raises BrokerConnectionError: the connection closed or the request timed out.
        """
        if self._session_due() or self._reauthenticating.locked():
            await self._reauthenticate()
        return await self._request(api_key, build)

    async def _request(self, api_key: ApiKey, build: Any) -> Any:
        # No await before the frame is written: nothing can start a login in between.
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
        future = self._protocol.expect(
            correlation_id, functools.partial(self._decode, api_key, version)
        )
        transport.write(encode_frame(header + encode_request(payload)))
        try:
            async with asyncio.timeout(self._timeout):
                return await future
        except TimeoutError as err:
            self._protocol.connection_lost(err)
            raise BrokerConnectionError(
                f"{api_key.name} to {self._name} timed out after {self._timeout:.0f} s"
            ) from err

    def _decode(self, api_key: ApiKey, version: int, frame: Frame) -> Any:
        """The response in ``frame`` (valid only during this call: see :class:`FrameReceiver`).

        :raises KafkaClientError: when it cannot be decoded.
        """
        header_version = 0 if api_key == ApiKey.API_VERSIONS else None
        if header_version is None:
            header_version = response_header_version(api_key, version)
        assert header_version is not None
        try:
            _, size = parse_response_header(frame, header_version)
            # Read-only: kio's readers refuse a writable buffer (a large frame's bytearray).
            body = memoryview(frame).toreadonly()[size:]
            return decode_response(api_key, version, body)
        except ProtocolError as err:
            raise KafkaClientError(
                f"cannot decode {api_key.name} v{version} from {self._name}: {err}"
            ) from err
