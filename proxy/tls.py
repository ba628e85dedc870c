"""The TLS context of the proxy's listeners, built from the ``ssl.*`` settings.

Clients terminate TLS at the proxy (the proxy presents its own certificate) and the proxy
opens its own TLS session to the broker (``upstream.*``, :mod:`storage.kafka_security`).
SASL runs inside those sessions, end to end between client and broker, so a client's
requests reach the broker under the client's own principal.
"""

from __future__ import annotations

import ssl

from proxy.config import ProxyConfig

__all__ = ["server_context", "tls_server_context"]

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
    return tls_server_context(
        certificate=config.ssl_certificate_location,
        key=config.ssl_key_location,
        password=config.ssl_key_password,
        ca=config.ssl_ca_location,
        client_auth=config.ssl_client_auth,
    )


def tls_server_context(
    *, certificate: str, key: str, password: str, ca: str, client_auth: str
) -> ssl.SSLContext:
    """A server-side context: the PEM ``certificate`` chain and its ``key`` (may be the
    same file; empty ``key`` and ``password`` are none), clients' certificates verified
    against ``ca`` as ``client_auth`` (none, requested, required) asks.

    :raises OSError: when a file cannot be read.
    :raises ssl.SSLError: when they do not form a valid key pair or CA bundle.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key or None, password or None)
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if ca:
        context.load_verify_locations(cafile=ca)
    return context
