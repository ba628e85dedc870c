"""Fixtures of the proxy unit tests: a scripted fake broker and proxies in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, ClassVar

import pytest

from proxy import connection
from proxy.config import ProxyConfig
from proxy.interceptors.base import Call, Forward, Interceptor
from proxy.server import ProxyServer
from proxy.splice import Prelude, SpliceDone, Splicer
from storage.kafka_security import KafkaSecurityConfig
from tests.fakes.frame_client import FrameClient
from tests.fakes.wire_broker import WireBroker

ProxyFactory = Callable[..., Awaitable[ProxyServer]]


@pytest.fixture
async def fake_broker() -> AsyncIterator[WireBroker]:
    broker = await WireBroker().start()
    yield broker
    await broker.close()


class CountingSplicer(Splicer):
    """A Splicer that records the size of every splice it starts."""

    __slots__ = ()
    started: ClassVar[list[int]] = []

    def start(
        self, count: int, done: SpliceDone, prelude: Prelude = (), *, more: bool = False
    ) -> None:
        self.started.append(count)
        super().start(count, done, prelude, more=more)


@pytest.fixture
def spliced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sizes of the splices the proxy starts during the test."""
    started: list[int] = []
    monkeypatch.setattr(CountingSplicer, "started", started)
    monkeypatch.setattr(connection, "Splicer", CountingSplicer)
    yield started


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start proxies (listening on free ports) in front of fake brokers; closed at teardown."""
    started: list[ProxyServer] = []

    async def start(
        broker: WireBroker,
        *,
        interceptors: tuple[Interceptor, ...] = (),
        security: KafkaSecurityConfig | None = None,
        **settings: Any,
    ) -> ProxyServer:
        config = ProxyConfig(
            bootstrap_servers=f"127.0.0.1:{broker.port}",
            listeners=settings.pop("listeners", "127.0.0.1:0"),
            **settings,
        )
        server = ProxyServer(config, interceptors=interceptors, security=security)
        await server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.close(1.0)


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    """Close, in the test's own event loop, the clients it left open (it failed before
    closing them): left to the garbage collector, they would warn (ResourceWarning, an error
    under ``filterwarnings = error``) in whichever later test happens to collect them."""
    yield
    while FrameClient.still_open:
        await FrameClient.still_open.pop().close()


async def through(interceptor: Interceptor, call: Call, response: Any) -> Any:
    """``response`` as ``interceptor``'s exchange for ``call`` leaves it (the router's path
    for an interceptor that forwards the request)."""
    outcome = interceptor.on_request(call)
    assert isinstance(outcome, Forward) and outcome.then is not None
    try:
        return await outcome.then.on_response(response)
    finally:
        outcome.then.release()
