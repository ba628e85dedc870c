"""Who is behind each client connection: audit lines to join with the broker's own logs.

The broker sees every client of the proxy as the proxy: its authorizer log, request log and
per-IP quotas name the proxy's address and the local port of the proxy's connection to it.
So the proxy logs, on the ``tierproxy.audit`` logger at INFO, for every connection pair:

- ``connection.audit`` once the broker connection is up: the client's ``ip:port``, the
  proxy's listener port, the proxy's local ``ip:port`` towards the broker (what the broker
  logs as the client: Kafka's connection id ``brokerIp:port-proxyIp:proxyPort-n``), the
  broker, and the subject of the client's TLS certificate when it presented one (mTLS);
- ``connection.principal`` once a SASL login through the connection shows the principal
  (PLAIN and SCRAM; see :mod:`proxy.identities`), with the client's address again.

``conn=N`` ties both to the connection's other lines. Route or silence the logger like any
other (``log.level`` applies).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from proxy.logs import event

__all__ = ["connection_opened", "peer_subject", "principal_known"]

_log = logging.getLogger("tierproxy.audit")


def connection_opened(
    connection_id: int,
    *,
    node_id: int,
    client: asyncio.BaseTransport,
    upstream: asyncio.BaseTransport,
    broker: str,
) -> None:
    """Log ``connection.audit`` for a pair whose broker connection is now up."""
    if not _log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "conn": connection_id,
        "node": node_id,
        "client": _address(client.get_extra_info("peername")),
        "listener_port": _port(client.get_extra_info("sockname")),
        "upstream_local": _address(upstream.get_extra_info("sockname")),
        "broker": broker,
    }
    subject = peer_subject(client)
    if subject is not None:
        fields["tls_subject"] = subject
    event(_log, logging.INFO, "connection.audit", **fields)


def principal_known(connection_id: int, *, client: str, principal: str) -> None:
    """Log ``connection.principal``: the connection logs in as ``principal``."""
    event(
        _log, logging.INFO, "connection.principal", conn=connection_id, client=client,
        principal=principal,
    )  # fmt: skip


def peer_subject(transport: asyncio.BaseTransport) -> str | None:
    """The subject of the certificate the client presented on a TLS connection, in RFC 4514
    order and form (``CN=alice,O=example``), or None without one."""
    certificate = transport.get_extra_info("peercert")
    if not certificate:
        return None
    relative_names = certificate.get("subject", ())
    parts = [f"{_RFC4514.get(key, key)}={value}" for rdn in relative_names for key, value in rdn]
    return ",".join(reversed(parts)) or None


_RFC4514 = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
}


def _address(address: Any) -> str:
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


def _port(address: Any) -> Any:
    return address[1] if isinstance(address, tuple) else address
