"""SaslHandshake and SaslAuthenticate requests as the proxy reads them (every version alike):
the mechanism a client chose, and the bytes of each step of its exchange."""

from __future__ import annotations

from typing import Any

from protocol.messages import Body

__all__ = ["sasl_auth_bytes", "sasl_mechanism"]


def sasl_mechanism(body: Body) -> str:
    """The mechanism a decoded SaslHandshake request body names."""
    kio: Any = body
    return str(kio.mechanism)


def sasl_auth_bytes(body: Body) -> bytes:
    """The ``auth_bytes`` of a decoded SaslAuthenticate request body."""
    kio: Any = body
    return bytes(kio.auth_bytes)
