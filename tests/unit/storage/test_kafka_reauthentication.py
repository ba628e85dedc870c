"""Re-authentication of tierproxy's own connections (KIP-368) against the fake broker.

The fake broker keeps SASL sessions as Kafka does with ``connections.max.reauth.ms``: it
closes a connection at the first request it reads after the session expired, and one that
sends anything else in the middle of a SASL exchange. The connection's clock and the broker's
are one fake clock that the tests move, so nothing depends on how busy the machine is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocol.messages import ApiKey
from storage.kafka_client import AuthenticationError, FetchTarget, KafkaClient
from storage.kafka_client import connection as connection_module
from storage.kafka_security import KafkaSecurityConfig
from tests.conditions import wait_for
from tests.fakes.clocks import ManualClock
from tests.fakes.kio_broker import KAFKA_APIS, SASL_APIS, KioBroker, running
from tests.fakes.kio_handlers import fetch_handler, metadata_handler

LIFETIME_MS = 10_000
LOGIN = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock[float]:
    fake = ManualClock(1_000.0)
    monkeypatch.setattr(connection_module, "monotonic", fake)
    return fake


@pytest.fixture
async def broker(clock: ManualClock[float]) -> AsyncIterator[KioBroker]:
    fake = KioBroker(apis={**KAFKA_APIS, **SASL_APIS}, session_lifetime_ms=LIFETIME_MS, clock=clock)
    async with running(fake) as started:
        started.handlers[ApiKey.METADATA] = metadata_handler(started.port)
        started.handlers[ApiKey.FETCH] = fetch_handler(b"")
        yield started


def plain_client(broker: KioBroker) -> KafkaClient:
    security = KafkaSecurityConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="tiering",
        sasl_password="secret",
    )
    return KafkaClient(f"127.0.0.1:{broker.port}", security=security)


def requests_after(broker: KioBroker, count: int) -> list[ApiKey]:
    return [key for key, _ in broker.requests[count:]]


async def test_a_session_is_renewed_on_the_same_connection_before_it_expires(
    broker: KioBroker, clock: ManualClock[float]
) -> None:
    async with plain_client(broker) as client:
        await client.metadata(())
        for _ in range(4):
            clock.advance(0.8 * LIFETIME_MS / 1000)  # before the earliest renewal (85 %)
            seen = len(broker.requests)
            await client.metadata(())
            assert requests_after(broker, seen) == [ApiKey.METADATA]
            clock.advance(0.16 * LIFETIME_MS / 1000)  # past the latest renewal (95 %)
            seen = len(broker.requests)
            await client.metadata(())
            assert requests_after(broker, seen) == [*LOGIN, ApiKey.METADATA]

    assert (broker.accepted, broker.logins, broker.expired) == (1, 5, 0)


async def test_a_connection_idle_past_its_session_renews_it_before_its_next_request(
    broker: KioBroker, clock: ManualClock[float]
) -> None:
    async with plain_client(broker) as client:
        await client.metadata(())
        clock.advance(3 * LIFETIME_MS / 1000)
        seen = len(broker.requests)
        await client.metadata(())

    assert requests_after(broker, seen) == [*LOGIN, ApiKey.METADATA]
    assert (broker.accepted, broker.expired) == (1, 0)


async def test_requests_in_flight_are_answered_and_the_others_wait_for_the_new_login(
    broker: KioBroker, clock: ManualClock[float]
) -> None:
    broker.delay[ApiKey.FETCH] = 0.5
    async with plain_client(broker) as client:
        await client.metadata(())
        target = FetchTarget(topic="t", partition=0, offset=3, max_bytes=1024)
        in_flight = asyncio.ensure_future(client.fetch(1, [target]))
        # The Fetch is with the broker (held there) before the renewal is due.
        await wait_for(lambda: broker.requests[-1][0] == ApiKey.FETCH, timeout_s=30)
        clock.advance(LIFETIME_MS / 1000)
        seen = len(broker.requests)
        after: list[Any] = await asyncio.gather(*(client.metadata(()) for _ in range(3)))
        (fetched,) = await in_flight

    assert fetched.high_watermark == 13
    assert len(after) == 3
    assert requests_after(broker, seen) == [*LOGIN, *[ApiKey.METADATA] * 3]
    assert (broker.accepted, broker.expired) == (1, 0)


async def test_a_refused_renewal_fails_the_request_and_the_next_one_logs_in_afresh(
    broker: KioBroker, clock: ManualClock[float]
) -> None:
    broker.refused_logins.add(2)
    async with plain_client(broker) as client:
        await client.metadata(())
        clock.advance(LIFETIME_MS / 1000)

        with pytest.raises(AuthenticationError, match="refused the SASL/PLAIN login as tiering"):
            await client.metadata(())
        await client.metadata(())

    assert (broker.accepted, broker.logins) == (2, 3)


async def test_a_broker_that_does_not_limit_sessions_is_never_asked_again(
    broker: KioBroker, clock: ManualClock[float]
) -> None:
    broker.session_lifetime_ms = 0
    async with plain_client(broker) as client:
        await client.metadata(())
        clock.advance(100 * LIFETIME_MS / 1000)
        await client.metadata(())

    assert (broker.accepted, broker.logins) == (1, 1)
