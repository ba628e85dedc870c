"""The streaming of a Fetch v12+ response whose exchanges judge only its tail.

:mod:`proxy.router` decides that a response may stream (every exchange of its request a
:class:`~proxy.interceptors.base.TailExchange`); :mod:`proxy.connection` writes what this
releases. This module only holds the tail back and has the exchanges judge and rewrite it.
"""

from __future__ import annotations

import logging
from typing import Final

from protocol.errors import LocalProtocolError
from protocol.fetch_tail import FetchTailFinder
from protocol.varint import Buffer, VarintError
from proxy.interceptors.base import Call, TailExchange
from proxy.logs import event

__all__ = ["ResponseStream"]

# The router's logger: the warning is about the response the router let stream.
_log = logging.getLogger("tierproxy.router")

_EVERYTHING: Final = 1 << 62
"""What a stream whose walk failed may skip: the rest of the response, whatever its size."""


class ResponseStream:
    """A Fetch v12+ response on its way to the client: everything before its top-level tagged
    fields goes out as it arrives; the tail is held until the request's exchanges judged it.

    The frame's size prefix went out with the first bytes, so a rewritten tail keeps its
    length (see :mod:`protocol.fetch_tail`). A response whose structure cannot be walked
    passes as the broker sent it, with a warning, as an undecodable one does in
    :meth:`proxy.router._ChainExchange.respond`.
    """

    __slots__ = ("_call", "_exchanges", "_finder", "_malformed", "_tail")

    def __init__(self, call: Call, exchanges: tuple[TailExchange, ...]) -> None:
        self._call = call
        self._exchanges = exchanges
        self._finder = FetchTailFinder(call.header.api_version)
        self._tail = bytearray()
        self._malformed = ""

    def feed(self, chunk: Buffer) -> int:
        """Take the response payload's next bytes; how many of them, from the start of
        ``chunk``, may be written now (the rest is held as part of the tail)."""
        if self._malformed:
            return len(chunk)
        try:
            released = self._finder.feed(chunk)
        except VarintError as err:
            self._malformed = str(err)
            return len(chunk)
        if released < len(chunk):
            self._tail += chunk[released:]
        return released

    @property
    def skippable(self) -> int:
        """How many of the payload's next bytes need not be fed (see :meth:`skip`): record
        bytes the tail finder skips unread, or all of them once the walk has failed."""
        return self._finder.skippable if not self._malformed else _EVERYTHING

    def skip(self, count: int) -> None:
        """Account for ``count`` of the :attr:`skippable` bytes, written without being fed."""
        if not self._malformed:
            self._finder.skip(count)

    def end(self) -> bytes | None:
        """Once the whole response was fed: the held tail to write as it is, or ``None``
        when :meth:`rewrite` must produce it."""
        tail = bytes(self._tail)
        if self._malformed or self._finder.tail_start is None:
            event(
                _log,
                logging.WARNING,
                "response.unwalkable",
                conn=self._call.connection.connection_id,
                api=self._call.header.api_key,
                version=self._call.header.api_version,
                error=self._malformed or "the response ended before its top-level tagged fields",
            )
            return tail
        if any(f.wants_tail(tail) for f in self._exchanges):
            return None
        return tail

    async def rewrite(self) -> bytes:
        """The tail as the request's exchanges rewrite it, as long as the broker's.

        :raises RemoteProtocolError: from an exchange (the connection closes).
        :raises LocalProtocolError: an exchange changed the tail's length.
        """
        tail = bytes(self._tail)
        for exchange in self._exchanges:
            rewritten = await exchange.rewrite_tail(tail)
            if len(rewritten) != len(tail):
                raise LocalProtocolError(
                    f"{type(exchange).__name__} changed a streamed tail's length "
                    f"({len(tail)} -> {len(rewritten)} bytes)"
                )
            tail = rewritten
        return tail
