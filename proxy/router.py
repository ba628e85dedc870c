"""Per request frame: pass it through as raw bytes, or run it through its interceptors.

This is the Kafka side of a connection pair; :mod:`proxy.connection` only moves frames. A
raw request costs one ``struct`` unpack (plus the ``acks`` of a Produce, which decides
whether a response will come at all). An intercepted one is decoded, handed to its
interceptor chain, and re-encoded only if an interceptor changed it. The exchanges the
interceptors return for the request are owned by its :class:`_ChainExchange`, which the
connection keeps with the request in flight and releases when that ends (its response
written, or the connection closed); their bytes count against the
:class:`~proxy.exchange_memory.ExchangeMemory` bound. A Fetch v12+ response whose exchanges
only judge its tail (every one a :class:`~proxy.interceptors.base.TailExchange`: KIP-951
node endpoints) streams through a :class:`~proxy.response_stream.ResponseStream` that holds
the tail alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol, cast

from protocol.buffers import Buffers
from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.fetch_tail import walkable
from protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    peek_request,
    response_header_version,
)
from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    Body,
    ErrorCode,
    carries_addresses,
    convert,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_buffers,
    nested_class,
    produce_acks,
    request_class,
    response_class,
)
from proxy.bad_connections import LOG_BURST, LOG_PER_SECOND, TokenBucket
from proxy.broker_versions import BrokerVersions
from proxy.exchange_memory import ExchangeMemory
from proxy.interceptors.base import (
    Answer,
    Call,
    ConnectionInfo,
    Exchange,
    Interceptor,
    TailExchange,
)
from proxy.logs import event
from proxy.response_stream import ResponseStream

__all__ = ["InterceptedExchange", "Route", "Router", "served_above_broker"]

_log = logging.getLogger("tierproxy.router")

_PRODUCE: Final = int(ApiKey.PRODUCE)
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_INTERCEPTED: Final[Mapping[int, range]] = {int(key): v for key, v in INTERCEPTED_VERSIONS.items()}
_PASSED_WHEN_UNKNOWN: Final = frozenset(
    int(key)
    for key in (
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.DELETE_RECORDS,
        ApiKey.PRODUCE,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    )
)
"""APIs whose versions the proxy cannot decode still reach the broker (a client is never
disconnected for a version the broker serves), unless that version's answer may carry broker
addresses (``carries_addresses``: Metadata, FindCoordinator, DescribeCluster, ShareFetch and
ShareAcknowledge at any version, Fetch from v16 and Produce from v10, those above the decoded
range included): those are refused, as passed on undecoded they would send the client around
the proxy."""


class InterceptedExchange(Protocol):
    """One intercepted request in flight, as the connection pair drives it."""

    @property
    def forward(self) -> bytes | None:
        """The request payload to send to the broker, or ``None`` if answered locally."""
        ...

    def stream(self) -> ResponseStream | None:
        """A stream for the broker's response, to write it as it arrives holding only its
        tail, or ``None``: the response is assembled (then :meth:`try_pass_through`)."""
        ...

    def try_pass_through(self, payload: bytes | bytearray) -> bool:
        """Let the broker's response go to the client as it is, if no interceptor needs to
        change it; whether it did (then :meth:`respond` need not run)."""
        ...

    def release(self) -> None:
        """The connection's entry for this request is gone (its response written, or the
        connection closed): release its interceptors' exchanges. Called exactly once."""
        ...

    async def respond(self, payload: bytes | bytearray | None) -> bytes | bytearray | Buffers:
        """Turn the broker's response payload (``None`` if answered locally) into the client's:
        the broker's bytes, or a re-encoded response as buffers (its records not copied).

        :raises RemoteProtocolError: when the broker's response breaks the protocol.
        """
        ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """What to do with one request frame."""

    api_key: int
    api_version: int
    correlation_id: int
    expects_response: bool
    exchange: InterceptedExchange | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Chain:
    interceptors: tuple[Interceptor, ...]
    needs_request: bool


class Router:
    """Routes request frames to raw pass-through or to the interceptors registered for them.

    :raises LocalProtocolError: at construction, if an interceptor claims a version outside
        ``INTERCEPTED_VERSIONS`` (the proxy could not have advertised or decoded it).
    """

    def __init__(
        self,
        interceptors: Sequence[Interceptor],
        *,
        broker_versions: BrokerVersions | None = None,
        memory: ExchangeMemory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        chains: dict[tuple[int, int], list[Interceptor]] = {}
        for interceptor in interceptors:
            for api_key, versions in interceptor.versions.items():
                allowed = INTERCEPTED_VERSIONS.get(api_key)
                if allowed is None or not set(versions) <= set(allowed):
                    raise LocalProtocolError(
                        f"{type(interceptor).__name__} claims {api_key.name} versions "
                        f"{versions} outside INTERCEPTED_VERSIONS"
                    )
                for version in versions:
                    chains.setdefault((int(api_key), version), []).append(interceptor)
        self._interceptors = tuple(dict.fromkeys(interceptors))
        self._served_above = served_above_broker(interceptors)
        self._broker_versions = BrokerVersions() if broker_versions is None else broker_versions
        self.memory = ExchangeMemory() if memory is None else memory
        """What the exchanges in flight hold; over its bound, connections read no request."""
        self._noted: set[int] = set()
        # Those lines are rate-limited like bad-connection closes: old or hostile clients in
        # a reconnect loop would otherwise log one each.
        self._noted_lines = TokenBucket(LOG_BURST, LOG_PER_SECOND, clock)
        self._noted_suppressed = 0
        self._chains: Mapping[tuple[int, int], _Chain] = {
            key: _Chain(
                interceptors=tuple(chain),
                needs_request=any(interceptor.needs_request for interceptor in chain),
            )
            for key, chain in chains.items()
        }

    def _broker_version(self, connection: ConnectionInfo, header: RequestHeader) -> int:
        """The version to send ``header``'s request to the broker at: the client's, or for
        a version served above the broker, the newest the broker speaks."""
        served = self._served_above.get(header.api_key)
        if served is None or header.api_version not in served:
            return header.api_version
        supported = self._broker_versions.supported(connection.node_id, header.api_key)
        if supported is None or supported[-1] >= header.api_version:
            return header.api_version
        if supported[-1] < served[0]:
            return header.api_version  # the broker answers UNSUPPORTED_VERSION itself
        return supported[-1]

    def connection_closed(self, connection_id: int) -> None:
        """Tell every interceptor that a client connection is gone."""
        for interceptor in self._interceptors:
            interceptor.on_connection_closed(connection_id)
        self._noted.discard(connection_id)

    def _note_passed_unknown(
        self, connection: ConnectionInfo, api_key: int, api_version: int, allowed: range
    ) -> None:
        """Log, once per connection, a client that ignored ApiVersions (clients before
        Kafka 0.10 never ask): its request goes to the broker as it is, so it gets only
        the broker's local log, never the remote tier. Over the rate limit, lines are
        counted, and the next line says how many were left out (``suppressed_before``)."""
        if connection.connection_id in self._noted:
            return
        self._noted.add(connection.connection_id)
        if not self._noted_lines.take():
            self._noted_suppressed += 1
            return
        suppressed, self._noted_suppressed = self._noted_suppressed, 0
        event(
            _log,
            logging.WARNING,
            "request.version.passed",
            conn=connection.connection_id,
            client=connection.client,
            api=ApiKey(api_key).name,
            version=api_version,
            advertised=f"v{allowed[0]}-v{allowed[-1]}",
            meaning="not decoded: the broker answers it alone, without the remote tier",
            **({"suppressed_before": suppressed} if suppressed else {}),
        )

    def route(self, frame: bytes, connection: ConnectionInfo) -> Route:
        """Decide how to handle one request frame (payload without its size prefix).

        :raises RemoteProtocolError: for a frame too short for a header, a malformed header
            or body of an intercepted API, or a version of an intercepted API the proxy
            does not handle (it never advertised it).
        """
        api_key, api_version, correlation_id = peek_request(frame)
        chain = self._chains.get((api_key, api_version))
        if chain is None:
            allowed = _INTERCEPTED.get(api_key)
            if allowed is not None and api_version not in allowed:
                if api_key == _API_VERSIONS and api_version > allowed[-1]:
                    # KIP-511: answer a too-new ApiVersions with a v0 body naming the
                    # versions we speak, so the client retries with one of them.
                    return Route(
                        api_key=api_key,
                        api_version=api_version,
                        correlation_id=correlation_id,
                        expects_response=True,
                        exchange=_ReadyAnswer(_unsupported_api_versions(correlation_id)),
                    )
                if api_key not in _PASSED_WHEN_UNKNOWN or carries_addresses(api_key, api_version):
                    raise RemoteProtocolError(
                        f"{ApiKey(api_key).name} v{api_version} is not handled by the proxy "
                        f"(it advertises v{allowed[0]}-v{allowed[-1]})",
                        KafkaError.UNSUPPORTED_VERSION,
                    )
                self._note_passed_unknown(connection, api_key, api_version, allowed)
            expects = api_key != _PRODUCE or _produce_expects_response(frame, api_version)
            return Route(
                api_key=api_key,
                api_version=api_version,
                correlation_id=correlation_id,
                expects_response=expects,
                exchange=None,
            )
        header = parse_request_header(frame)
        expects = (
            api_key != _PRODUCE or produce_acks(api_version, memoryview(frame)[header.size :]) != 0
        )
        exchange = _ChainExchange(
            chain,
            header,
            frame,
            connection,
            broker_version=self._broker_version(connection, header),
            memory=self.memory,
        )
        return Route(
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            expects_response=expects or exchange.forward is None,
            exchange=exchange,
        )


def served_above_broker(interceptors: Sequence[Interceptor]) -> Mapping[int, range]:
    """Every interceptor's :attr:`~Interceptor.served_above_broker`, by API key.

    :raises LocalProtocolError: if two interceptors serve one API above the broker
        differently, or a range leaves ``INTERCEPTED_VERSIONS``.
    """
    served: dict[int, range] = {}
    for interceptor in interceptors:
        for api_key, versions in interceptor.served_above_broker.items():
            if not set(versions) <= set(INTERCEPTED_VERSIONS.get(api_key, ())):
                raise LocalProtocolError(
                    f"{type(interceptor).__name__} serves {api_key.name} {versions} above the "
                    "broker, outside INTERCEPTED_VERSIONS"
                )
            if served.setdefault(int(api_key), versions) != versions:
                raise LocalProtocolError(f"two interceptors serve {api_key.name} above the broker")
    return served


def _produce_expects_response(frame: bytes, api_version: int) -> bool:
    header = parse_request_header(frame)
    return produce_acks(api_version, memoryview(frame)[header.size :]) != 0


def _run_chain(
    interceptors: Sequence[Interceptor], call: Call
) -> tuple[Body | None, Body | None, list[Exchange]]:
    """Hand ``call`` to each interceptor's ``on_request`` in turn, up to an answer: the
    request to forward, the answer (or ``None``), and the exchanges returned in call order.
    If one raises, the exchanges already returned are released.

    :raises LocalProtocolError: an interceptor rewrote the request without an exchange.
    """
    request = call.request
    exchanges: list[Exchange] = []
    try:
        for interceptor in interceptors:
            if request is not call.request:
                call = Call(connection=call.connection, header=call.header, request=request)
            outcome = interceptor.on_request(call)
            if outcome.then is not None:
                exchanges.append(outcome.then)
            if isinstance(outcome, Answer):
                return request, outcome.response, exchanges
            if outcome.request is not request and outcome.then is None:
                raise LocalProtocolError(
                    f"{type(interceptor).__name__} rewrote a request without an exchange "
                    "for its response"
                )
            request = outcome.request
    except BaseException:
        for exchange in exchanges:
            exchange.release()
        raise
    return request, None, exchanges


class _ChainExchange:
    """One request through its interceptor chain: the exchanges its ``on_request`` calls
    returned, which it owns until :meth:`release`."""

    __slots__ = (
        "_answer",
        "_call",
        "_exchanges",
        "_forward",
        "_forwarded_version",
        "_held_bytes",
        "_memory",
        "_rewritten",
    )

    def __init__(
        self,
        chain: _Chain,
        header: RequestHeader,
        frame: bytes,
        connection: ConnectionInfo,
        *,
        broker_version: int,
        memory: ExchangeMemory,
    ) -> None:
        client_request: Body | None = None
        if chain.needs_request or broker_version != header.api_version:
            client_request = decode_request(
                header.api_key, header.api_version, memoryview(frame)[header.size :]
            )
        call = Call(connection=connection, header=header, request=client_request)
        request, self._answer, exchanges = _run_chain(chain.interceptors, call)
        self._exchanges = tuple(reversed(exchanges))
        self._memory = memory
        self._held_bytes = sum(exchange.held_bytes for exchange in exchanges)
        memory.charge(self._held_bytes)
        self._rewritten = request is not client_request
        self._call = Call(connection=connection, header=header, request=request)
        self._forwarded_version = header.api_version
        if self._answer is not None:
            self._forward: bytes | None = None
        elif broker_version != header.api_version:
            # A version served above the broker: the same request at the broker's version;
            # respond() turns the answer back into the client's version.
            self._forwarded_version = broker_version
            self._forward = encode_request_header(
                header.api_key, broker_version, header.correlation_id, header.client_id
            ) + encode_request(convert(request, request_class(header.api_key, broker_version)))
        elif not self._rewritten:
            self._forward = frame
        else:
            self._forward = frame[: header.size] + encode_request(request)

    @property
    def forward(self) -> bytes | None:
        return self._forward

    def release(self) -> None:
        exchanges, self._exchanges = self._exchanges, ()
        try:
            for exchange in exchanges:
                exchange.release()
        finally:
            self._memory.free(self._held_bytes)
            self._held_bytes = 0

    def stream(self) -> ResponseStream | None:
        header = self._call.header
        if (
            self._forward is None
            or not walkable(header.api_key, header.api_version)
            or self._forwarded_version != header.api_version
            or not all(isinstance(exchange, TailExchange) for exchange in self._exchanges)
        ):
            return None
        return ResponseStream(self._call, cast(tuple[TailExchange, ...], self._exchanges))

    def try_pass_through(self, payload: bytes | bytearray) -> bool:
        header = self._call.header
        if self._forwarded_version != header.api_version:
            return False
        header_version = response_header_version(header.api_key, header.api_version)
        if header_version is None:
            return False
        try:
            correlation_id, size = parse_response_header(payload, header_version)
        except RemoteProtocolError:
            return False  # respond() reports it
        body = memoryview(payload).toreadonly()[size:]
        if correlation_id != header.correlation_id or any(
            exchange.wants_response(body) for exchange in self._exchanges
        ):
            return False
        for exchange in self._exchanges:
            exchange.on_raw_response(body)
        return True

    async def respond(self, payload: bytes | bytearray | None) -> bytes | bytearray | Buffers:
        header = self._call.header
        header_version = response_header_version(header.api_key, header.api_version)
        broker_header_version = response_header_version(header.api_key, self._forwarded_version)
        if header_version is None or broker_header_version is None:
            raise LocalProtocolError(f"no response header version for {header}")
        original: Body | None
        if payload is None:
            if self._answer is None:
                raise LocalProtocolError("a forwarded request needs the broker's response")
            original = None
            response = self._answer
        else:
            correlation_id, size = parse_response_header(payload, broker_header_version)
            if correlation_id != header.correlation_id:
                raise RemoteProtocolError(
                    f"broker answered correlation id {correlation_id}, "
                    f"expected {header.correlation_id}"
                )
            # kio reads only read-only buffers; a read-only view of the bytearray is no copy.
            body = memoryview(payload).toreadonly()[size:]
            try:
                response = decode_response(header.api_key, self._forwarded_version, body)
            except RemoteProtocolError as err:
                if self._rewritten or carries_addresses(header.api_key, header.api_version):
                    # The broker answered a rewritten request (a Fetch with probe positions,
                    # say): its bytes answer a question the client never asked, and passed
                    # on they would put the probe's records at the client's position. An
                    # answer that may name brokers would send the client around the proxy.
                    raise RemoteProtocolError(
                        f"undecodable answer to a rewritten or address-carrying request (API "
                        f"{header.api_key} v{header.api_version}): {err}"
                    ) from err
                # Forwarding what the broker said is what a pass-through proxy would do;
                # the client sees the same bytes it would have seen without the proxy.
                event(
                    _log,
                    logging.WARNING,
                    "response.undecodable",
                    conn=self._call.connection.connection_id,
                    api=header.api_key,
                    version=header.api_version,
                    error=str(err),
                )
                return payload
            original = response
            if self._forwarded_version != header.api_version:
                response = convert(response, response_class(header.api_key, header.api_version))
                original = None
        for exchange in self._exchanges:
            response = await exchange.on_response(response)
        if payload is not None and response is original:
            return payload
        return encode_response_buffers(
            response, head=encode_response_header(header.correlation_id, header_version)
        )


class _ReadyAnswer:
    """A response the router built without the broker or any interceptor."""

    __slots__ = ("_payload",)

    def __init__(self, payload: bytes) -> None:
        self._payload = payload

    @property
    def forward(self) -> bytes | None:
        return None

    def stream(self) -> ResponseStream | None:
        return None

    def try_pass_through(self, payload: bytes | bytearray) -> bool:
        return False

    async def respond(self, payload: bytes | bytearray | None) -> bytes | bytearray | Buffers:
        return self._payload

    def release(self) -> None:
        return None


def _unsupported_api_versions(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know (``ApiVersionsRequest.
    getErrorResponse``): a v0 body with UNSUPPORTED_VERSION and the ApiVersions range only."""
    versions = INTERCEPTED_VERSIONS[ApiKey.API_VERSIONS]
    body_class = response_class(_API_VERSIONS, 0)
    entry = nested_class(body_class, "api_keys")(
        api_key=_API_VERSIONS, min_version=versions[0], max_version=versions[-1]
    )
    body = body_class(error_code=ErrorCode(int(KafkaError.UNSUPPORTED_VERSION)), api_keys=(entry,))
    return encode_response_header(correlation_id, 0) + encode_response(body)
