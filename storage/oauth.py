"""OAuth 2 access tokens for SASL/OAUTHBEARER, by the client credentials grant (KIP-768).

Kafka's Java clients ask the token endpoint for a token with ``grant_type=client_credentials``,
the client id and secret as HTTP basic authentication and an optional scope, and reuse it until
shortly before it expires. This does the same for tierproxy's own connections: each login of
the product's Kafka client, and each re-authentication of a connection whose session the
broker limits (KIP-368), asks its :class:`TokenProvider` (a
:class:`ClientCredentialsTokenProvider`) for a token. As Kafka's refreshing login does, a
token whose renewal fails is used until it expires, so an endpoint that is briefly away does
not close connections.
"""

from __future__ import annotations

import base64
import logging
from time import monotonic
from typing import TYPE_CHECKING, Final, Protocol

from storage.log_event import event

if TYPE_CHECKING:
    from storage.kafka_security import KafkaSecurityConfig

__all__ = ["ClientCredentialsTokenProvider", "TokenError", "TokenProvider", "fetch_token"]

log = logging.getLogger(__name__)

_TIMEOUT_S: Final = 30.0
_REFRESH_AT: Final = 0.8
"""Share of a token's lifetime after which a new one is asked for (Kafka's
``sasl.login.refresh.window.factor``)."""


class TokenError(Exception):
    """The token endpoint refused or could not be reached (the message says which)."""


class TokenProvider(Protocol):
    """Where a SASL/OAUTHBEARER login gets its access token (Kafka's login callback handler)."""

    async def token(self) -> str:
        """A valid access token.

        :raises TokenError: when none can be had.
        """
        ...


async def fetch_token(config: KafkaSecurityConfig) -> tuple[str, float]:
    """A fresh access token and its lifetime in seconds (an hour when the endpoint omits it).

    :raises TokenError: the endpoint is unreachable, refused, or answered without a token.
    """
    form = {"grant_type": "client_credentials"}
    if config.sasl_oauthbearer_scope:
        form["scope"] = config.sasl_oauthbearer_scope
    # RFC 7617 basic authentication, as Kafka sends it (no URL-encoding: Kafka's default).
    credentials = f"{config.sasl_oauthbearer_client_id}:{config.sasl_oauthbearer_client_secret}"
    auth = {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}
    url = config.sasl_oauthbearer_token_endpoint_url
    # Only a login by OAUTHBEARER asks an endpoint: every other user of the Kafka client
    # (``tierproxy status``, say) starts without the HTTP client.
    import aiohttp  # noqa: PLC0415

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_TIMEOUT_S)) as session,
            session.post(url, data=form, headers=auth) as response,
        ):
            if response.status != 200:
                raise TokenError(f"token endpoint {url} answered HTTP {response.status}")
            document = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        raise TokenError(f"token endpoint {url}: {err or type(err).__name__}") from err
    token = document.get("access_token") if isinstance(document, dict) else None
    if not isinstance(token, str) or not token:
        raise TokenError(f"token endpoint {url} answered without an access_token")
    lifetime = document.get("expires_in", 3600)
    return token, float(lifetime) if isinstance(lifetime, (int, float)) else 3600.0


class ClientCredentialsTokenProvider:
    """A :class:`TokenProvider` by the client credentials grant: one token, renewed after 80 %
    of its lifetime; while a renewal fails, the token is used until it expires."""

    def __init__(self, config: KafkaSecurityConfig) -> None:
        self._config = config
        self._token = ""
        self._renew_at = 0.0
        self._expires_at = 0.0

    async def token(self) -> str:
        now = monotonic()
        if self._token and now < self._renew_at:
            return self._token
        try:
            token, lifetime = await fetch_token(self._config)
        except TokenError as err:
            if not self._token or now >= self._expires_at:
                raise
            event(
                log,
                logging.WARNING,
                "oauth.token.renewal_failed",
                msg=f"could not renew the OAUTHBEARER token ({err}); using the current one, "
                f"which expires in {self._expires_at - now:.0f} s",
            )
            return self._token
        now = monotonic()
        self._token = token
        self._renew_at, self._expires_at = now + lifetime * _REFRESH_AT, now + lifetime
        return self._token
