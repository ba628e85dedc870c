"""The interception points: how Kafka logic sees and changes the requests it cares about.

An :class:`Interceptor` names the API versions it handles. For those, the proxy decodes the
request and the response and hands them over; every other request passes through as raw
bytes and is never decoded. Several interceptors may handle one API: requests go through
them in registration order, responses in reverse order, like middleware.

Decoding a multi-MiB Fetch response costs a copy of its records. An interceptor that can tell
from a cheap scan of the encoded body that it has nothing to change also implements
:class:`ResponseFilter`; when every interceptor of a chain does and none wants the response,
it is forwarded as the broker sent it, undecoded. ``wants_response`` is a pure predicate; each
response then reaches every interceptor of its chain exactly once, either decoded through
``on_response`` or, when it passes undecoded, as bytes through ``on_raw_response``: those two
are where an interceptor learns from a response.

A :class:`TailFilter` goes further: it may only ever change a response's top-level tagged
fields (its *tail*), so a chain of them lets a Fetch response stream to the client as it
arrives, with only the tail held until it has been judged (``wants_tail``) and, rarely,
rewritten (``rewrite_tail``, to the same length: the size prefix is out by then). Such a
streamed response reaches the filter through those two only.

``on_request`` is synchronous on purpose: requests reach the broker in the order the client
sent them with no queue in between, and every decision it needs (address maps, the remote
log metadata cache) is in memory. ``on_response`` is a coroutine, so an interceptor may
await remote reads before the response goes back; the connection still returns responses in
request order, so a slow response holds back the ones after it (Kafka clients require it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from protocol.headers import RequestHeader
from protocol.messages import ApiKey

__all__ = ["Answer", "Call", "ConnectionInfo", "Interceptor", "ResponseFilter", "TailFilter"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionInfo:
    """Which client connection a request came on, and which broker it fronts."""

    connection_id: int
    client: str
    node_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One intercepted request as the interceptors see it.

    ``client_request`` is the body the client sent, ``request`` the one forwarded after every
    ``on_request`` (the same object when nobody rewrote it). Both are ``None`` when no
    interceptor of the chain asked for decoded requests (``needs_request``).
    """

    connection: ConnectionInfo
    header: RequestHeader
    client_request: Any
    request: Any


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """Returned by ``on_request`` to answer without asking the broker.

    ``response`` then goes through the ``on_response`` chain as if the broker had sent it.
    """

    response: Any


class Interceptor(Protocol):
    """Kafka logic for some API versions; see the module docstring for the order of calls.

    Subclass it to inherit the pass-through defaults of ``on_request``/``on_response``.
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
        """Whether ``on_request``/``on_response`` read the decoded request.

        ``False`` spares decoding requests for interceptors that only rewrite responses
        (a Produce request's records are never decoded for address rewriting).
        """
        return False

    def on_request(self, call: Call) -> Any | Answer:
        """Return the request body to forward (``call.request`` unchanged), or an Answer."""
        return call.request

    async def on_response(self, call: Call, response: Any) -> Any:
        """Return the response body for the client (``response`` itself when unchanged).

        :raises RemoteProtocolError: to close the client connection with a log line.
        """
        return response

    def on_raw_response(self, call: Call, body: memoryview) -> None:
        """The response passes to the client undecoded (no interceptor wanted it); ``body``
        is its encoded body after the response header. Called instead of ``on_response``."""
        return None

    def on_connection_closed(self, connection_id: int) -> None:
        """The client connection ``connection_id`` is gone: release what was kept for it
        (its requests in flight get no response)."""
        return None


@runtime_checkable
class ResponseFilter(Protocol):
    """Optional: an interceptor that can skip responses it has nothing to change."""

    def wants_response(self, call: Call, body: memoryview) -> bool:
        """Whether ``on_response`` must see this response, judged from its encoded body
        (after the response header), without decoding it. Free of side effects."""
        ...


@runtime_checkable
class TailFilter(ResponseFilter, Protocol):
    """Optional: a :class:`ResponseFilter` that changes nothing but a response's top-level
    tagged fields, so its responses may stream; see the module docstring."""

    def wants_tail(self, call: Call, tail: bytes) -> bool:
        """Whether :meth:`rewrite_tail` must see ``tail`` (the encoded top-level tagged
        fields). Free of side effects."""
        ...

    async def rewrite_tail(self, call: Call, tail: bytes) -> bytes:
        """The tail for the client, exactly ``len(tail)`` bytes long.

        :raises RemoteProtocolError: when the tail is malformed or cannot be rewritten in
            place (the client connection closes with a log line).
        """
        ...
