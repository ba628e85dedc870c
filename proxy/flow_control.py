"""Back-pressure on one transport: reading pauses while any named hold is set.

uvicorn's ``FlowControl`` in one small class. :mod:`proxy.connection` holds a pair's client
side while the broker's write buffer is full (and the other way round), while connecting,
and while draining; each hold has a name, so releasing one cannot resume reading that
another still needs paused. Pausing reading writes nothing: the rule that only
:mod:`proxy.connection` writes to transports holds.
"""

from __future__ import annotations

import asyncio

__all__ = ["ReadGate"]


class ReadGate:
    """Pauses reading from one transport while any hold is set (uvicorn's FlowControl)."""

    __slots__ = ("_holds", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._holds: set[str] = set()

    def hold(self, reason: str) -> None:
        if not self._holds and not self._transport.is_closing():
            self._transport.pause_reading()
        self._holds.add(reason)

    @property
    def held(self) -> bool:
        """Whether reading is paused."""
        return bool(self._holds)

    def release(self, reason: str) -> None:
        if reason not in self._holds:
            return
        self._holds.discard(reason)
        if not self._holds and not self._transport.is_closing():
            self._transport.resume_reading()
