"""Who each client connection is: the Kafka principal the broker gives it, as the proxy can
tell it, for the quotas the proxy enforces itself (remote fetch bytes, see
:mod:`proxy.remote.client_quotas`), which apply per user as Kafka's do.

SASL passes through the proxy untouched and the broker authenticates the client; the proxy
reads the name from the client's messages, and a client the broker refuses is disconnected
by the broker before it fetches anything:

- PLAIN: ``authzid NUL authcid NUL password`` (RFC 4616); Kafka's principal is the authcid.
- SCRAM: the client-first ``gs2-header n=user,r=nonce`` (RFC 5802, with ``=2C`` and ``=3D``
  for ``,`` and ``=``).
- OAUTHBEARER: the bearer token of the client's first message (RFC 7628) is a JWT; Kafka's
  validators name the principal by its claim ``sasl.oauthbearer.sub.claim.name`` (``sub``),
  and so does the proxy, reading the claims without checking the signature (the broker checks
  it, and closes the connection of a token it refuses).
- An SSL listener's client certificate (``ssl.client.auth``), on a connection without SASL:
  ``ssl.principal.mapping.rules`` applied to the certificate's subject
  (:mod:`proxy.ssl_principals`), as Kafka's ``DefaultKafkaPrincipalBuilder`` does. A DN that
  no rule maps is logged and left unknown.
- GSSAPI: unknown, so such clients are bounded by client id only. The Kerberos principal is
  only inside the encrypted parts of the client's AP-REQ (the ticket, the authenticator); the
  one name in the clear, the authorisation identity of the last GSSAPI message (RFC 4752),
  is the client's own claim, which Kafka ignores (its callback authorises the authenticated
  name), so trusting it would let a client pick whose quota it uses.

Passwords are never kept or logged. :class:`proxy.interceptors.sasl_identity.SaslIdentity`
feeds the registry from the requests passing through.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.logs import event
from proxy.ssl_principals import NoMatchingRuleError, SslPrincipalMapper, distinguished_name
from storage.config import ConfigError, setting

if TYPE_CHECKING:  # the settings load this module: it must not load the wire protocol
    from proxy.interceptors.base import ConnectionInfo

__all__ = ["ClientIdentities", "ClientPrincipalConfig", "user_of"]

_log = logging.getLogger("tierproxy.identities")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientPrincipalConfig:
    """How the proxy names client principals for its quotas, with the broker's settings.

    :raises ConfigError: for mapping rules Kafka would refuse.
    """

    ssl_principal_mapping_rules: str = setting(
        "ssl.principal.mapping.rules",
        "DEFAULT",
        "Rules that map the subject of an SSL client's certificate to its user name (Kafka's "
        "syntax: RULE:pattern/replacement/[LU], DEFAULT = the whole DN, first match wins); "
        "set them as on the brokers' SSL listener, for remote.fetch.client.quotas by user.",
        kafka="ssl.principal.mapping.rules",
    )
    sasl_oauthbearer_sub_claim_name: str = setting(
        "sasl.oauthbearer.sub.claim.name",
        "sub",
        "The JWT claim that names an OAUTHBEARER client's user, as on the brokers.",
        kafka="sasl.oauthbearer.sub.claim.name",
    )

    def __post_init__(self) -> None:
        try:
            SslPrincipalMapper(self.ssl_principal_mapping_rules)
        except ValueError as err:
            raise ConfigError(f"ssl.principal.mapping.rules: {err}") from err
        if not self.sasl_oauthbearer_sub_claim_name.strip():
            raise ConfigError("sasl.oauthbearer.sub.claim.name must not be blank")


class ClientIdentities:
    """The Kafka principal (``User:name``) of each client connection, once known."""

    def __init__(
        self,
        config: ClientPrincipalConfig | None = None,
        *,
        on_principal: Callable[[int, str], None] | None = None,
    ) -> None:
        """:param on_principal: called with the connection id and principal once known."""
        config = config or ClientPrincipalConfig()
        self._on_principal = on_principal
        self._mapper = SslPrincipalMapper(config.ssl_principal_mapping_rules)
        self._claim = config.sasl_oauthbearer_sub_claim_name.strip()
        self._mechanisms: dict[int, str] = {}
        self._principals: dict[int, str | None] = {}

    def principal(self, connection: ConnectionInfo) -> str | None:
        """The connection's principal: its SASL user once its login showed it, or for a
        connection without SASL, its client certificate's."""
        connection_id = connection.connection_id
        if connection_id in self._principals or connection_id in self._mechanisms:
            return self._principals.get(connection_id)
        if connection.peer_certificate is None:
            return None
        principal = self._certificate_principal(connection_id, connection.peer_certificate)
        self._known(connection_id, principal)
        return principal

    def mechanism_chosen(self, connection_id: int, mechanism: str) -> None:
        self._mechanisms[connection_id] = mechanism.upper()

    def authenticating(self, connection_id: int, auth_bytes: bytes) -> None:
        mechanism = self._mechanisms.get(connection_id)
        if self._principals.get(connection_id) is not None or mechanism is None:
            return
        user = user_of(mechanism, auth_bytes, sub_claim=self._claim)
        if user is not None:
            self._known(connection_id, f"User:{user}")

    def forget(self, connection_id: int) -> None:
        self._mechanisms.pop(connection_id, None)
        self._principals.pop(connection_id, None)

    def _known(self, connection_id: int, principal: str | None) -> None:
        self._principals[connection_id] = principal
        if principal is not None and self._on_principal is not None:
            self._on_principal(connection_id, principal)

    def _certificate_principal(self, connection_id: int, certificate: bytes) -> str | None:
        try:
            return f"User:{self._mapper.name(distinguished_name(certificate))}"
        except (NoMatchingRuleError, ValueError) as err:
            event(
                _log,
                logging.WARNING,
                "identity.unknown",
                conn=connection_id,
                reason=f"{err}; its remote fetches are bounded by client id only",
            )
            return None


def user_of(mechanism: str, auth_bytes: bytes, *, sub_claim: str = "sub") -> str | None:
    """The user name in a mechanism's first client message, or ``None``."""
    try:
        text = auth_bytes.decode()
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\0")
        return (parts[1] or None) if len(parts) == 3 else None
    if mechanism.startswith("SCRAM-"):
        for attribute in text.split(",")[2:]:
            if attribute.startswith("n="):
                return attribute[2:].replace("=2C", ",").replace("=3D", "=") or None
    if mechanism == "OAUTHBEARER":
        return _bearer_subject(text, sub_claim)
    return None


def _bearer_subject(message: str, claim: str) -> str | None:
    """The ``claim`` of the JWT in an OAUTHBEARER client's first message (RFC 7628 section
    3.1: ``gs2-header \\x01 key=value \\x01 ... \\x01\\x01``, the token in ``auth=Bearer``)."""
    _, separator, pairs = message.partition("\x01")
    if not separator:
        return None
    for pair in pairs.split("\x01"):
        key, _, value = pair.partition("=")
        if key == "auth" and value[:7].lower() == "bearer ":
            found = _jwt_claims(value[7:].strip()).get(claim)
            return found if isinstance(found, str) and found.strip() else None
    return None


def _jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWS in compact serialization, unverified; empty if it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}
