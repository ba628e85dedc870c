"""The interception points: how Kafka logic sees and changes the requests it cares about.

An :class:`Interceptor` names the API versions it handles. For those, the proxy decodes the
request and hands it to ``on_request``; every other request passes through as raw bytes and
is never decoded. Several interceptors may handle one API: requests go through them in
registration order, responses in reverse order, like middleware.

``on_request`` returns what happens to the request: :class:`Forward` (to the broker, as it
is or rewritten) or :class:`Answer` (answered without the broker), each with the
interceptor's :class:`Exchange` for this one request, or ``None`` when the interceptor has
nothing to do with the response. The exchange is a continuation: whatever must survive
from the request to its response (a Fetch's plan, the sentinels a ListOffsets asked) lives
in it and nowhere else. The router keeps the request's exchanges with the connection's
entry for the request in flight and releases them (:meth:`Exchange.release`) exactly once,
when that entry goes: its response was written, or the connection closed. So state lives
exactly as long as its request is outstanding, and memory pressure is met by reading no
new requests (:class:`ExchangeMemory <proxy.exchange_memory.ExchangeMemory>`), never by
forgetting outstanding ones. An interceptor that rewrites a request must keep an exchange:
a response to a rewritten request is never relayed as the broker sent it.

Decoding a multi-MiB Fetch response costs a copy of its records. ``wants_response`` is a
pure predicate over the encoded body; when no exchange of a request wants its response, it
is forwarded as the broker sent it, undecoded. Each response then reaches every exchange
exactly once, decoded through ``on_response`` or, when it passes undecoded, as bytes through
``on_raw_response``: those two are where an interceptor learns from a response.

A :class:`TailExchange` goes further: it may only ever change a response's top-level tagged
fields (its *tail*), so a request whose exchanges are all of that kind lets a Fetch response
stream to the client as it arrives, with only the tail held until it has been judged
(``wants_tail``) and, rarely, rewritten (``rewrite_tail``, to the same length: the size
prefix is out by then). Such a streamed response reaches the exchange through those two only.

``on_request`` is synchronous on purpose: requests reach the broker in the order the client
sent them with no queue in between, and every decision it needs (address maps, the remote
log metadata cache) is in memory. ``on_response`` is a coroutine, so an exchange may await
remote reads before the response goes back; the connection still returns responses in
request order, so a slow response holds back the ones after it (Kafka clients require it).

Bodies are :data:`~protocol.messages.Body` values, opaque here: interceptors read and change
them through the typed views of ``protocol`` (``fetch_bodies``, ``offset_bodies``, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from protocol.errors import LocalProtocolError
from protocol.headers import RequestHeader
from protocol.messages import ApiKey, Body

__all__ = [
    "Answer",
    "Call",
    "ConnectionInfo",
    "Exchange",
    "Forward",
    "Interceptor",
    "OnResponse",
    "TailExchange",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionInfo:
    """Which client connection a request came on, and which broker it fronts."""

    connection_id: int
    client: str
    node_id: int
    peer_certificate: bytes | None = None
    """The client's certificate (DER), when its TLS listener verified one (ssl.client.auth)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One intercepted request as an interceptor sees it: ``request`` is the body as the
    interceptors before it left it, ``None`` when no interceptor of the chain asked for
    decoded requests (``needs_request``)."""

    connection: ConnectionInfo
    header: RequestHeader
    request: Body | None

    @property
    def body(self) -> Body:
        """``request``, for an interceptor that ``needs_request``.

        :raises LocalProtocolError: the chain did not decode the request.
        """
        if self.request is None:
            raise LocalProtocolError(f"{self.header} was not decoded (needs_request)")
        return self.request


class Exchange(Protocol):
    """One interceptor's part in one request, from its ``on_request`` to the end of the
    request; see the module docstring. Subclass it to inherit the defaults."""

    @property
    def held_bytes(self) -> int:
        """About how many bytes this exchange holds until released (counted against
        ``request.plans.max.bytes``); constant over its life."""
        return 0

    def wants_response(self, body: memoryview) -> bool:
        """Whether :meth:`on_response` must see the response, judged from its encoded body
        (after the response header) without decoding it. Free of side effects."""
        return True

    async def on_response(self, response: Body) -> Body:
        """The response body for the client (``response`` itself when unchanged).

        :raises RemoteProtocolError: to close the client connection with a log line.
        """
        return response

    def on_raw_response(self, body: memoryview) -> None:
        """The response passes to the client undecoded (no exchange wanted it); ``body`` is
        its encoded body after the response header. Called instead of ``on_response``."""
        return None

    def release(self) -> None:
        """The request is over: its response was written, or never will be (the connection
        closed). Called exactly once; drop what only this request needed."""
        return None


@runtime_checkable
class TailExchange(Exchange, Protocol):
    """An exchange that changes nothing but a response's top-level tagged fields, so its
    response may stream; see the module docstring."""

    def wants_tail(self, tail: bytes) -> bool:
        """Whether :meth:`rewrite_tail` must see ``tail`` (the encoded top-level tagged
        fields). Free of side effects."""
        ...

    async def rewrite_tail(self, tail: bytes) -> bytes:
        """The tail for the client, exactly ``len(tail)`` bytes long.

        :raises RemoteProtocolError: when the tail is malformed or cannot be rewritten in
            place (the client connection closes with a log line).
        """
        ...


class OnResponse(Exchange):
    """An exchange that hands the decoded response to ``respond`` (a function of the
    interceptor, bound to what it keeps from the request, about ``held_bytes`` bytes); with
    ``respond`` ``None``, the response passes as the broker sent it (an interceptor that
    rewrote the request so that the broker's answer stays the client's)."""

    __slots__ = ("_held_bytes", "_respond")

    def __init__(
        self, respond: Callable[[Body], Awaitable[Body]] | None, *, held_bytes: int = 0
    ) -> None:
        self._respond = respond
        self._held_bytes = held_bytes

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def wants_response(self, body: memoryview) -> bool:
        return self._respond is not None

    async def on_response(self, response: Body) -> Body:
        return response if self._respond is None else await self._respond(response)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """Returned by ``on_request``: send ``request`` on (the call's own to leave it as it
    is), and hand the response to ``then`` (``None``: nothing to do with it)."""

    request: Body | None
    then: Exchange | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """Returned by ``on_request`` to answer without asking the broker: ``response`` goes
    through the exchanges before it (and ``then``'s) as if the broker had sent it."""

    response: Body
    then: Exchange | None = None


class Interceptor(Protocol):
    """Kafka logic for some API versions; see the module docstring for the order of calls.

    Subclass it to inherit the defaults.
    """

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        """The API versions to intercept; each must lie within ``INTERCEPTED_VERSIONS``."""
        ...

    @property
    def served_above_broker(self) -> Mapping[ApiKey, range]:
        """Versions the client may use although the broker speaks only the first of each
        range: the request (as ``on_request`` left it) goes to the broker at the highest
        version of the range the broker speaks, and its answer comes back converted to the
        client's version. Only for versions with the same fields (ListOffsets v7-v9, whose
        newer versions only allow sentinels the interceptor answers itself)."""
        return {}

    @property
    def needs_request(self) -> bool:
        """Whether ``on_request`` reads the decoded request.

        ``False`` spares decoding requests for interceptors that only rewrite responses
        (a Produce request's records are never decoded for address rewriting).
        """
        return False

    def on_request(self, call: Call) -> Forward | Answer:
        """What happens to the request, and this interceptor's exchange for it.

        :raises RemoteProtocolError: to close the client connection with a log line.
        """
        ...

    def on_connection_closed(self, connection_id: int) -> None:
        """The client connection ``connection_id`` is gone (its exchanges were released
        first): drop what was kept for the connection itself."""
        return None
