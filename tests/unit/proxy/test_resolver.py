"""proxy.resolver: one lookup per name at a time, known addresses served at once, kept on a
failed refresh, forgotten when no connection took them."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

import pytest

from proxy.resolver import Resolver, SocketAddress, system_lookup
from tests.fakes.clocks import ManualClock

BROKER = SocketAddress(family=socket.AF_INET, host="10.0.0.2", port=9092)
MOVED = SocketAddress(family=socket.AF_INET, host="10.0.0.12", port=9092)


class ScriptedLookup:
    """Answers each lookup with the next scripted answer once the test releases it."""

    def __init__(self, *answers: Sequence[SocketAddress] | OSError) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, host: str, port: int) -> Sequence[SocketAddress]:
        self.asked.append((host, port))
        await self.release.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_connections_asking_at_once_share_one_lookup() -> None:
    lookup = ScriptedLookup([BROKER])
    lookup.release.clear()
    resolver = Resolver(lookup=lookup)
    waiting = [asyncio.create_task(resolver.resolve("kafka", 9092)) for _ in range(20)]
    await _settle()
    lookup.release.set()
    assert await asyncio.gather(*waiting) == [(BROKER,)] * 20
    assert lookup.asked == [("kafka", 9092)]


async def test_known_addresses_serve_without_a_lookup_until_the_ttl() -> None:
    clock = ManualClock(100.0)
    lookup = ScriptedLookup([BROKER], [MOVED])
    resolver = Resolver(lookup=lookup, ttl_s=30.0, clock=clock)
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    clock.now += 29.9
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    assert len(lookup.asked) == 1
    clock.now += 0.1
    # Past the ttl: the known address at once, and one refresh behind it.
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    await _settle()
    assert len(lookup.asked) == 2
    assert await resolver.resolve("kafka", 9092) == (MOVED,)


async def test_a_stalled_refresh_holds_up_no_connection() -> None:
    clock = ManualClock(100.0)
    lookup = ScriptedLookup([BROKER], [MOVED])
    resolver = Resolver(lookup=lookup, ttl_s=30.0, clock=clock)
    await resolver.resolve("kafka", 9092)
    lookup.release.clear()
    clock.now += 60.0
    for _ in range(50):
        async with asyncio.timeout(1.0):
            assert await resolver.resolve("kafka", 9092) == (BROKER,)
        await asyncio.sleep(0)
    assert len(lookup.asked) == 2
    await resolver.close()


async def test_a_failed_refresh_keeps_the_known_addresses() -> None:
    clock = ManualClock(100.0)
    failure = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    lookup = ScriptedLookup([BROKER], failure, [MOVED])
    resolver = Resolver(lookup=lookup, ttl_s=30.0, clock=clock)
    await resolver.resolve("kafka", 9092)
    clock.now += 31.0
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    await _settle()
    # The failed refresh left the address, and the next use tries again.
    assert await resolver.resolve("kafka", 9092) == (BROKER,)
    await _settle()
    assert await resolver.resolve("kafka", 9092) == (MOVED,)
    assert len(lookup.asked) == 3


async def test_forgotten_addresses_are_looked_up_again() -> None:
    lookup = ScriptedLookup([BROKER], [MOVED])
    resolver = Resolver(lookup=lookup)
    addresses = await resolver.resolve("kafka", 9092)
    resolver.forget("kafka", 9092, addresses)
    assert await resolver.resolve("kafka", 9092) == (MOVED,)


async def test_forgetting_addresses_already_replaced_keeps_the_new_ones() -> None:
    lookup = ScriptedLookup([BROKER], [MOVED])
    resolver = Resolver(lookup=lookup)
    old = await resolver.resolve("kafka", 9092)
    resolver.forget("kafka", 9092, old)
    await resolver.resolve("kafka", 9092)
    resolver.forget("kafka", 9092, old)
    assert await resolver.resolve("kafka", 9092) == (MOVED,)
    assert len(lookup.asked) == 2


async def test_a_failed_first_lookup_fails_its_waiters_and_the_next_asks_again() -> None:
    failure = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    lookup = ScriptedLookup(failure, [BROKER])
    resolver = Resolver(lookup=lookup)
    with pytest.raises(OSError, match="not known"):
        await resolver.resolve("kafka", 9092)
    assert await resolver.resolve("kafka", 9092) == (BROKER,)


async def test_a_lookup_without_addresses_is_an_error() -> None:
    resolver = Resolver(lookup=ScriptedLookup([]))
    with pytest.raises(OSError, match="no address"):
        await resolver.resolve("kafka", 9092)


async def test_a_waiter_that_gives_up_leaves_the_lookup_to_the_others() -> None:
    lookup = ScriptedLookup([BROKER])
    lookup.release.clear()
    resolver = Resolver(lookup=lookup)
    impatient = asyncio.create_task(resolver.resolve("kafka", 9092))
    patient = asyncio.create_task(resolver.resolve("kafka", 9092))
    await _settle()
    impatient.cancel()
    lookup.release.set()
    assert await patient == (BROKER,)
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert len(lookup.asked) == 1


async def test_ip_addresses_are_never_looked_up() -> None:
    lookup = ScriptedLookup()
    resolver = Resolver(lookup=lookup)
    assert await resolver.resolve("127.0.0.1", 9092) == (
        SocketAddress(family=socket.AF_INET, host="127.0.0.1", port=9092),
    )
    assert await resolver.resolve("::1", 9092) == (
        SocketAddress(family=socket.AF_INET6, host="::1", port=9092),
    )
    assert lookup.asked == []


async def test_the_system_lookup_finds_localhost_once_per_address() -> None:
    found = await system_lookup("localhost", 9092)
    assert found
    assert len(set(found)) == len(found)
    assert all(address.port == 9092 for address in found)
    assert {address.host for address in found} <= {"127.0.0.1", "::1"}
