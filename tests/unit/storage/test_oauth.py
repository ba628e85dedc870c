"""The OAUTHBEARER token provider against a token endpoint served in the test (aiohttp)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from storage import oauth
from storage.kafka_security import KafkaSecurityConfig
from storage.oauth import ClientCredentialsTokenProvider, TokenError
from tests.fakes.clocks import ManualClock

LIFETIME_S = 100


@dataclass
class Endpoint:
    url: str = ""
    issued: int = 0
    down: bool = False
    forms: list[dict[str, str]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    async def token(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503)
        self.forms.append({key: str(value) for key, value in (await request.post()).items()})
        self.authorizations.append(request.headers.get("Authorization", ""))
        self.issued += 1
        return web.json_response({"access_token": f"token-{self.issued}", "expires_in": LIFETIME_S})


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    state = Endpoint()
    app = web.Application()
    app.router.add_post("/token", state.token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}/token"
    try:
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock[float]:
    fake = ManualClock(1_000.0)
    monkeypatch.setattr(oauth, "monotonic", fake)
    return fake


def provider(endpoint: Endpoint) -> ClientCredentialsTokenProvider:
    return ClientCredentialsTokenProvider(
        KafkaSecurityConfig(
            security_protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauthbearer_token_endpoint_url=endpoint.url,
            sasl_oauthbearer_client_id="tierproxy",
            sasl_oauthbearer_client_secret="s3cret",
            sasl_oauthbearer_scope="kafka",
        )
    )


async def test_a_token_is_reused_until_80_percent_of_its_lifetime(
    endpoint: Endpoint, clock: ManualClock[float]
) -> None:
    tokens = provider(endpoint)

    first = await tokens.token()
    clock.advance(0.79 * LIFETIME_S)
    again = await tokens.token()
    clock.advance(0.02 * LIFETIME_S)
    renewed = await tokens.token()

    assert (first, again, renewed) == ("token-1", "token-1", "token-2")
    assert endpoint.forms[0] == {"grant_type": "client_credentials", "scope": "kafka"}
    assert endpoint.authorizations[0] == "Basic " + base64.b64encode(b"tierproxy:s3cret").decode()


async def test_a_failed_renewal_keeps_the_token_until_it_expires(
    endpoint: Endpoint, clock: ManualClock[float]
) -> None:
    tokens = provider(endpoint)
    await tokens.token()
    endpoint.down = True

    clock.advance(0.9 * LIFETIME_S)
    assert await tokens.token() == "token-1"
    clock.advance(0.1 * LIFETIME_S)
    with pytest.raises(TokenError, match="HTTP 503"):
        await tokens.token()

    endpoint.down = False
    assert await tokens.token() == "token-2"
