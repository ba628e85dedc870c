"""How tierproxy's own connections to the cluster are secured: TLS and SASL, with Kafka's names.

Every part that connects to the cluster as a client of its own reads these ``upstream.*``
settings: the proxy's broker discovery and topic-id lookups, the metadata manager's consumer
and producer, the tiering pipeline (driver and executors) and ``tierproxy status``. Client
connections that pass through the proxy are different: their SASL exchange runs end to end
between the client and the broker, so the broker's ACLs apply to the client's own principal;
the proxy only opens the TLS session to the broker for them (``upstream.security.protocol``
SSL or SASL_SSL).

The names are librdkafka's (``ssl.ca.location`` and friends are PEM paths, where Java's
clients take key stores), behind the ``upstream.`` prefix because the proxy's own ``ssl.*``
settings are those of its listener. Secrets come from the config file, a file named there, or
an environment variable, are resolved once (on the Spark driver, so that executors need no
access to the file or the variable), and never appear in a ``repr``, a log line or ``--help``.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storage.config import ConfigError, setting

__all__ = ["PASSWORD_ENV", "SASL_MECHANISMS", "SECURITY_PROTOCOLS", "KafkaSecurityConfig"]

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PASSWORD_ENV: Final = "TIERPROXY_UPSTREAM_SASL_PASSWORD"
"""Read when neither ``upstream.sasl.password`` nor ``upstream.sasl.password.file`` is set."""
CLIENT_SECRET_ENV: Final = "TIERPROXY_UPSTREAM_SASL_OAUTHBEARER_CLIENT_SECRET"
"""Read when ``upstream.sasl.oauthbearer.client.secret`` is not set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSecurityConfig:
    """How tierproxy's own connections to the brokers are secured (TLS, SASL).

    :raises ConfigError: for an unknown protocol or mechanism, or SASL settings that do not
        fit together (a mechanism without SASL_*, SASL_* without a user).
    """

    security_protocol: str = setting(
        "upstream.security.protocol",
        "PLAINTEXT",
        "Transport of tierproxy's connections to the brokers: PLAINTEXT, SSL, SASL_PLAINTEXT "
        "or SASL_SSL. With SASL_*, tierproxy's own connections log in with upstream.sasl.*; "
        "clients' connections through the proxy log in themselves, end to end.",
        kafka="security.protocol",
    )
    ssl_ca_location: str = setting(
        "upstream.ssl.ca.location",
        "",
        "PEM CA bundle that signed the brokers' certificates; empty: the system's CAs.",
        kafka="ssl.ca.location",
    )
    ssl_certificate_location: str = setting(
        "upstream.ssl.certificate.location",
        "",
        "PEM client certificate, for brokers that require one (ssl.client.auth=required).",
        kafka="ssl.certificate.location",
    )
    ssl_key_location: str = setting(
        "upstream.ssl.key.location",
        "",
        "PEM private key of the client certificate.",
        kafka="ssl.key.location",
    )
    ssl_key_password: str = setting(
        "upstream.ssl.key.password",
        "",
        "Password of that private key, if any.",
        kafka="ssl.key.password",
        secret=True,
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "upstream.ssl.endpoint.identification.algorithm",
        "https",
        "https: check that each broker's certificate names its host (the default, as in "
        "Kafka); empty: do not check.",
        kafka="ssl.endpoint.identification.algorithm",
    )
    sasl_mechanism: str = setting(
        "upstream.sasl.mechanism",
        "",
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; required with SASL_PLAINTEXT "
        "and SASL_SSL.",
        kafka="sasl.mechanism",
    )
    sasl_username: str = setting(
        "upstream.sasl.username",
        "",
        "User that tierproxy logs in as (PLAIN and SCRAM).",
        kafka="sasl.username",
    )
    sasl_password: str = setting(
        "upstream.sasl.password",
        "",
        f"Password of upstream.sasl.username. Better kept out of the file: see "
        f"upstream.sasl.password.file, or set ${PASSWORD_ENV}.",
        kafka="sasl.password",
        secret=True,
    )
    sasl_password_file: str = setting(
        "upstream.sasl.password.file",
        "",
        "File whose content (trailing newline removed) is the password, e.g. a mounted secret.",
    )
    sasl_oauthbearer_token_endpoint_url: str = setting(
        "upstream.sasl.oauthbearer.token.endpoint.url",
        "",
        "OAUTHBEARER: the OAuth 2 token endpoint, asked with the client credentials grant.",
        kafka="sasl.oauthbearer.token.endpoint.url",
    )
    sasl_oauthbearer_client_id: str = setting(
        "upstream.sasl.oauthbearer.client.id",
        "",
        "OAUTHBEARER: the client id at the token endpoint.",
        kafka="sasl.oauthbearer.client.id",
    )
    sasl_oauthbearer_client_secret: str = setting(
        "upstream.sasl.oauthbearer.client.secret",
        "",
        f"OAUTHBEARER: the client secret (or set ${CLIENT_SECRET_ENV}).",
        kafka="sasl.oauthbearer.client.secret",
        secret=True,
    )
    sasl_oauthbearer_scope: str = setting(
        "upstream.sasl.oauthbearer.scope",
        "",
        "OAUTHBEARER: the scope to ask the token endpoint for, if any.",
        kafka="sasl.oauthbearer.scope",
    )

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"upstream.security.protocol must be one of {SECURITY_PROTOCOLS}, "
                f"not {self.security_protocol!r}"
            )
        if self.ssl_endpoint_identification_algorithm not in ("https", ""):
            raise ConfigError(
                'upstream.ssl.endpoint.identification.algorithm must be "https" or ""'
            )
        if not self.sasl:
            if self.sasl_mechanism:
                raise ConfigError(
                    f"upstream.sasl.mechanism is {self.sasl_mechanism} but "
                    f"upstream.security.protocol is {self.security_protocol}: use SASL_PLAINTEXT "
                    "or SASL_SSL to log in"
                )
            return
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"upstream.security.protocol {self.security_protocol} needs "
                f"upstream.sasl.mechanism, one of {SASL_MECHANISMS}"
                + (f", not {self.sasl_mechanism!r}" if self.sasl_mechanism else "")
            )
        if self.sasl_mechanism == "OAUTHBEARER":
            if not (self.sasl_oauthbearer_token_endpoint_url and self.sasl_oauthbearer_client_id):
                raise ConfigError(
                    "OAUTHBEARER needs upstream.sasl.oauthbearer.token.endpoint.url and "
                    "upstream.sasl.oauthbearer.client.id"
                )
        elif not self.sasl_username:
            raise ConfigError(f"{self.sasl_mechanism} needs upstream.sasl.username")

    @property
    def tls(self) -> bool:
        """Whether connections to the brokers use TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether tierproxy's own connections log in."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def with_secrets_resolved(self) -> KafkaSecurityConfig:
        """A copy whose password and client secret are filled in from a file or the environment.

        :raises ConfigError: when the password file cannot be read, or SASL needs a password
            that no source gives.
        """
        password = self.sasl_password
        if not password and self.sasl_password_file:
            try:
                password = Path(self.sasl_password_file).read_text(encoding="utf-8").rstrip("\n")
            except OSError as err:
                raise ConfigError(f"cannot read upstream.sasl.password.file: {err}") from err
        password = password or os.environ.get(PASSWORD_ENV, "")
        secret = self.sasl_oauthbearer_client_secret or os.environ.get(CLIENT_SECRET_ENV, "")
        if self.sasl and self.sasl_mechanism != "OAUTHBEARER" and not password:
            raise ConfigError(
                f"{self.sasl_mechanism} needs a password: upstream.sasl.password, "
                f"upstream.sasl.password.file or ${PASSWORD_ENV}"
            )
        return dataclasses.replace(
            self, sasl_password=password, sasl_oauthbearer_client_secret=secret
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of connections to the brokers, or ``None`` for plaintext.

        :raises OSError: when a CA, certificate or key file cannot be read.
        :raises ssl.SSLError: when they are not valid.
        """
        if not self.tls:
            return None
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=self.ssl_ca_location or None
        )
        context.check_hostname = self.ssl_endpoint_identification_algorithm == "https"
        if self.ssl_certificate_location:
            context.load_cert_chain(
                self.ssl_certificate_location,
                self.ssl_key_location or None,
                self.ssl_key_password or None,
            )
        return context

    def describe(self) -> str:
        """What an operator needs to see at start: protocol, mechanism and user, no secret."""
        if not self.sasl:
            return self.security_protocol
        who = self.sasl_username or self.sasl_oauthbearer_client_id
        return f"{self.security_protocol} {self.sasl_mechanism} as {who}"
