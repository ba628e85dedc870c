"""The streaming of a Fetch v12+, ShareFetch or ShareAcknowledge response whose exchanges
judge only its tail.

:mod:`proxy.router` decides that a response may stream (every exchange of its request a
:class:`~proxy.interceptors.base.TailExchange`); :mod:`proxy.connection` writes what this
releases. This module only holds the tail back and has the exchanges judge and rewrite it.
"""

from __future__ import annotations

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.fetch_tail import TailFinder
from protocol.varint import Buffer, VarintError
from proxy.interceptors.base import Call, TailExchange

__all__ = ["ResponseStream"]


class ResponseStream:
    """A walkable response (:func:`protocol.fetch_tail.walkable`) on its way to the client:
    everything before its tail (the top-level tagged fields, and a ShareFetch's node endpoints
    before them) goes out as it arrives; the tail is held until the request's exchanges
    judged it.

    The frame's size prefix went out with the first bytes, so a rewritten tail keeps its
    length (see :mod:`protocol.fetch_tail`). A response whose structure cannot be walked is
    held from where its walk failed and never completed: it may name brokers where the walk
    could not look, so :meth:`rewrite` raises and the connection closes, as for an undecodable
    address-carrying response in :meth:`proxy.router._ChainExchange.respond`.
    """

    __slots__ = ("_call", "_exchanges", "_finder", "_malformed", "_tail")

    def __init__(self, call: Call, exchanges: tuple[TailExchange, ...]) -> None:
        self._call = call
        self._exchanges = exchanges
        self._finder = TailFinder(call.header.api_key, call.header.api_version)
        self._tail = bytearray()
        self._malformed = ""

    def feed(self, chunk: Buffer) -> int:
        """Take the response payload's next bytes; how many of them, from the start of
        ``chunk``, may be written now (the rest is held as part of the tail)."""
        if self._malformed:
            self._tail += chunk
            return 0
        try:
            released = self._finder.feed(chunk)
        except VarintError as err:
            self._malformed = str(err)
            released = 0
        if released < len(chunk):
            self._tail += chunk[released:]
        return released

    @property
    def skippable(self) -> int:
        """How many of the payload's next bytes need not be fed (see :meth:`skip`): record
        bytes the tail finder skips unread (none once the walk has failed)."""
        return 0 if self._malformed else self._finder.skippable

    def skip(self, count: int) -> None:
        """Account for ``count`` of the :attr:`skippable` bytes, written without being fed."""
        self._finder.skip(count)

    def end(self) -> bytes | None:
        """Once the whole response was fed: the held tail to write as it is, or ``None``
        when :meth:`rewrite` must produce it (or, for a response that could not be walked,
        fail)."""
        tail = bytes(self._tail)
        if self._malformed or self._finder.tail_start is None:
            return None
        if any(f.wants_tail(tail) for f in self._exchanges):
            return None
        return tail

    async def rewrite(self) -> bytes:
        """The tail as the request's exchanges rewrite it, as long as the broker's.

        :raises RemoteProtocolError: from an exchange, or the response could not be walked (the
            connection closes).
        :raises LocalProtocolError: an exchange changed the tail's length.
        """
        if self._malformed or self._finder.tail_start is None:
            raise RemoteProtocolError(
                f"a streamed response that cannot be walked to its tail (API "
                f"{self._call.header.api_key} v{self._call.header.api_version}): "
                f"{self._malformed or 'it ended before its tail'}"
            )
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
