"""The TLS context of the proxy's listeners, built from the ``ssl.*`` settings.

Clients terminate TLS at the proxy (the proxy presents its own certificate) and the proxy
opens its own TLS session to the broker (``upstream.*``, :mod:`storage.kafka_security`).
SASL runs inside those sessions, end to end between client and broker, so a client's
requests reach the broker under the client's own principal.
"""

from __future__ import annotations

import ssl

from proxy.config import ProxyConfig

__all__ = ["server_context"]

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def server_context(config: ProxyConfig) -> ssl.SSLContext | None:
    """The context of SSL/SASL_SSL listeners, or ``None`` for plaintext ones.

    :raises OSError: when a certificate or key file cannot be read.
    :raises ssl.SSLError: when they do not form a valid key pair.
    """
    if not config.listener.tls:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        config.ssl_certificate_location,
        config.ssl_key_location or None,
        config.ssl_key_password or None,
    )
    context.verify_mode = _CLIENT_AUTH[config.ssl_client_auth]
    if config.ssl_ca_location:
        context.load_verify_locations(cafile=config.ssl_ca_location)
    return context
