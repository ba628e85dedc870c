"""Who each client connection logs in as: the Kafka principal, once its SASL login shows it.

SASL passes through the proxy untouched: the broker authenticates the client. The proxy
only notes the user name, so that quotas it enforces itself (remote fetch bytes, see
:mod:`proxy.remote.client_quotas`) apply per user as Kafka's do. The name is in the clear
in the mechanisms' first client message: PLAIN's ``authzid NUL authcid NUL password``
(RFC 4616) and SCRAM's client-first ``gs2-header n=user,r=nonce`` (RFC 5802, with ``=2C``
and ``=3D`` for ``,`` and ``=``). Other mechanisms (GSSAPI, OAUTHBEARER) leave the
connection's principal unknown. Passwords are never kept or logged; a failed login closes
the connection at the broker anyway. :class:`proxy.interceptors.sasl_identity.SaslIdentity`
feeds the registry from the requests passing through.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ClientIdentities", "user_of"]


class ClientIdentities:
    """The Kafka principal (``User:name``) of each client connection, once known."""

    def __init__(self, on_principal: Callable[[int, str], None] | None = None) -> None:
        """:param on_principal: called with the connection id and principal once known."""
        self._on_principal = on_principal
        self._mechanisms: dict[int, str] = {}
        self._principals: dict[int, str] = {}

    def principal(self, connection_id: int) -> str | None:
        return self._principals.get(connection_id)

    def mechanism_chosen(self, connection_id: int, mechanism: str) -> None:
        self._mechanisms[connection_id] = mechanism.upper()

    def authenticating(self, connection_id: int, auth_bytes: bytes) -> None:
        mechanism = self._mechanisms.get(connection_id)
        if connection_id in self._principals or mechanism is None:
            return
        user = user_of(mechanism, auth_bytes)
        if user is not None:
            self._principals[connection_id] = principal = f"User:{user}"
            if self._on_principal is not None:
                self._on_principal(connection_id, principal)

    def forget(self, connection_id: int) -> None:
        self._mechanisms.pop(connection_id, None)
        self._principals.pop(connection_id, None)


def user_of(mechanism: str, auth_bytes: bytes) -> str | None:
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
    return None
