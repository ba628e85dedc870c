"""TLS for an embedded Kafka broker's SSL and SASL_SSL listeners, from PEM files.

Kafka reads PEM directly since KIP-651 (2.7): ``ssl.keystore.type=PEM`` with
``ssl.keystore.location`` naming one file that holds the PKCS#8 private key and the
certificate chain, and ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` naming a
CA bundle (``DefaultSslEngineFactory.FileBasedPemStore``). No keystore password is allowed with
PEM; an unencrypted key needs no ``ssl.key.password`` either. These broker-wide ``ssl.*``
settings apply to every listener whose protocol is SSL or SASL_SSL; PLAINTEXT listeners (the
harness's probe, inter-broker traffic, the controller) ignore them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["BrokerTls"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerTls:
    """The broker's certificate, and whom it trusts for client certificates."""

    keystore: Path
    """PEM file with the private key (PKCS#8, unencrypted) and the certificate chain."""
    truststore: Path | None = None
    """PEM CA bundle for client certificates (mTLS); needed unless ``client_auth`` is none."""
    client_auth: Literal["none", "requested", "required"] = "none"

    def __post_init__(self) -> None:
        if self.client_auth != "none" and self.truststore is None:
            raise ValueError(f"ssl.client.auth={self.client_auth} needs a truststore")

    def properties(self) -> dict[str, str]:
        """The broker's ``ssl.*`` settings."""
        settings = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.client.auth": self.client_auth,
        }
        if self.truststore is not None:
            settings["ssl.truststore.type"] = "PEM"
            settings["ssl.truststore.location"] = str(self.truststore)
        return settings
