"""The client side of the SASL mechanisms Kafka offers, as bytes in and bytes out (no sockets).

Kafka carries each mechanism's messages in SaslAuthenticate requests after a SaslHandshake
names the mechanism (KIP-152). What goes in ``auth_bytes``:

- PLAIN (RFC 4616): one message, ``authzid NUL authcid NUL passwd`` with no authorisation id.
- SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677, KIP-84): client-first, then
  client-final with the proof; the server's final message carries its own signature, which
  :class:`ScramClient` checks, so a server that does not know the password is refused too.
- OAUTHBEARER (RFC 7628, KIP-255): one message carrying the bearer token.

Each exchange is a small state machine: :meth:`SaslExchange.respond` is given the server's
last message (empty before the first) and returns the next client message, or ``None`` when
the exchange is complete. The shell that sends these (``storage/kafka_client/connection.py``)
knows nothing of any mechanism.

A broker with ``connections.max.reauth.ms`` (KIP-368) answers SaslAuthenticate v1+ with the
session's lifetime and closes a connection whose session has expired at its next request;
:func:`reauthentication_delay` says when the client logs in again on the same connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final, Literal, Protocol

from protocol.errors import RemoteProtocolError

__all__ = [
    "MECHANISMS",
    "REAUTHENTICATION_WINDOW",
    "OAuthBearerExchange",
    "PlainExchange",
    "SaslExchange",
    "ScramClient",
]

Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
MECHANISMS: Final[tuple[Mechanism, ...]] = (
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "OAUTHBEARER",
)

_GS2_HEADER: Final = b"n,,"
"""No channel binding, no authorisation identity: what Kafka's clients send."""
_NONCE_BYTES: Final = 24

REAUTHENTICATION_WINDOW: Final = (0.85, 0.95)
"""The share of a session's lifetime after which Kafka's clients re-authenticate
(``SaslClientAuthenticator``): at least 15 % is left for network latency and clock drift, and
the 10 % between is random so that many connections do not log in again at once."""


def reauthentication_delay(session_lifetime_ms: int, jitter: float) -> float | None:
    """Seconds after a login at which to log in again, or ``None`` if the session never expires.

    :param session_lifetime_ms: the ``session_lifetime_ms`` of the last SaslAuthenticate
        answer (0: the broker does not expire sessions).
    :param jitter: a number in ``[0, 1)``, random in use: where in
        :data:`REAUTHENTICATION_WINDOW` the delay falls.
    """
    if session_lifetime_ms <= 0:
        return None
    low, high = REAUTHENTICATION_WINDOW
    return session_lifetime_ms * (low + (high - low) * jitter) / 1000


class SaslExchange(Protocol):
    """One client's side of one authentication."""

    def respond(self, challenge: bytes) -> bytes | None:
        """The next message for the server, given its last one; ``None`` once done.

        :raises RemoteProtocolError: the server's message is malformed or not genuine.
        """
        ...


class PlainExchange:
    """SASL/PLAIN: the whole exchange is one message."""

    def __init__(self, username: str, password: str) -> None:
        self._message: bytes | None = b"\0" + username.encode() + b"\0" + password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        message, self._message = self._message, None
        return message


class OAuthBearerExchange:
    """SASL/OAUTHBEARER with a token obtained beforehand (RFC 7628 section 3.1)."""

    def __init__(self, token: str) -> None:
        self._message: bytes | None = (
            _GS2_HEADER + b"\x01auth=Bearer " + token.encode() + b"\x01\x01"
        )

    def respond(self, challenge: bytes) -> bytes | None:
        if self._message is None and challenge:
            # The server sends an error document instead of success (RFC 7628 section 3.2.2).
            raise RemoteProtocolError(f"OAUTHBEARER refused: {challenge.decode(errors='replace')}")
        message, self._message = self._message, None
        return message


class ScramClient:
    """SCRAM-SHA-256 or SCRAM-SHA-512 (RFC 5802), client side.

    :param nonce: for tests only (RFC 7677's example); a fresh random one otherwise.
    """

    def __init__(
        self,
        mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"],
        username: str,
        password: str,
        *,
        nonce: str | None = None,
    ) -> None:
        self._hash = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self._password = password.encode()
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._step = 0

    def respond(self, challenge: bytes) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return _GS2_HEADER + self._first_bare.encode()
        if self._step == 2:
            return self._client_final(challenge.decode(errors="replace"))
        if self._step == 3:
            self._verify_server_final(challenge.decode(errors="replace"))
            return None
        raise RemoteProtocolError("the SCRAM exchange is already complete")

    def _client_final(self, server_first: str) -> bytes:
        fields = _attributes(server_first)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise RemoteProtocolError("SCRAM server nonce does not extend the client's")
        if not salt or not iterations.isdigit() or int(iterations) < 1:
            raise RemoteProtocolError(f"malformed SCRAM server-first message {server_first!r}")
        salted = hashlib.pbkdf2_hmac(
            self._hash, self._password, base64.b64decode(salt), int(iterations)
        )
        without_proof = f"c={base64.b64encode(_GS2_HEADER).decode()},r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        client_key = self._hmac(salted, b"Client Key")
        client_signature = self._hmac(hashlib.new(self._hash, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: str) -> None:
        fields = _attributes(server_final)
        if "e" in fields:
            raise RemoteProtocolError(f"SCRAM authentication failed: {fields['e']}")
        expected = self._server_signature
        given = base64.b64decode(fields.get("v", ""))
        if expected is None or not hmac.compare_digest(given, expected):
            raise RemoteProtocolError(
                "the SCRAM server's signature is wrong (not the real broker?)"
            )

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()


def _escape(username: str) -> str:
    """RFC 5802's saslname: ``=`` and ``,`` are written as ``=3D`` and ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    """``a=1,b=2`` as a mapping (values may themselves contain ``=``)."""
    pairs = (part.split("=", 1) for part in message.split(",") if "=" in part)
    return {key: value for key, value in pairs}
