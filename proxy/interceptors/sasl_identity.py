"""Feeds :class:`proxy.identities.ClientIdentities` from the SASL requests passing through."""

from __future__ import annotations

from collections.abc import Mapping

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from protocol.sasl_bodies import sasl_auth_bytes, sasl_mechanism
from proxy.identities import ClientIdentities
from proxy.interceptors.base import Call, Forward, Interceptor

__all__ = ["SaslIdentity"]


class SaslIdentity(Interceptor):
    """Feeds :class:`ClientIdentities` from SaslHandshake and SaslAuthenticate requests."""

    def __init__(self, identities: ClientIdentities) -> None:
        self._identities = identities

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {
            ApiKey.SASL_HANDSHAKE: INTERCEPTED_VERSIONS[ApiKey.SASL_HANDSHAKE],
            ApiKey.SASL_AUTHENTICATE: INTERCEPTED_VERSIONS[ApiKey.SASL_AUTHENTICATE],
        }

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        connection_id = call.connection.connection_id
        if call.header.api_key == ApiKey.SASL_HANDSHAKE:
            self._identities.mechanism_chosen(connection_id, sasl_mechanism(call.body))
        else:
            self._identities.authenticating(connection_id, sasl_auth_bytes(call.body))
        return Forward(request=call.request)

    def on_connection_closed(self, connection_id: int) -> None:
        self._identities.forget(connection_id)
