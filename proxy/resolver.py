"""Broker host names resolved for the connection pairs: once per name at a time, kept a while.

A pair's connection to its broker needs the broker's addresses. Asking the system resolver
on every connection ties every new client to the DNS server's health: the event loop runs
``getaddrinfo`` on a small pool of threads (libuv's four, under uvloop), a lookup the
resolver cannot answer holds its thread for the resolver's whole retry schedule (5 s per try
and server, the search domains each asked in turn: tens of seconds), a timed-out connection
leaves its lookup running, and the lookups of the retrying clients queue behind it. One
stall of the DNS server then times out every new connection for as long as clients keep
retrying, broker up or not. The rules here keep a stall to, at most, the connections that
arrive before the name's first answer:

- A name's addresses are kept for ``ttl_s`` after they were learned: 30 s, the JVM's
  ``networkaddress.cache.ttl`` that Kafka's own clients and brokers resolve with.
- One lookup per name at a time: connections that need the name while it is being looked up
  wait for that same lookup (nothing else goes to the pool).
- Past ``ttl_s`` the last addresses keep serving at once, while one lookup refreshes them in
  the background; a refresh that fails or finds nothing keeps them (a DNS server that does
  not answer never takes known brokers away), and is tried again on the next use.
- :meth:`Resolver.forget` drops a name's addresses: the pair calls it when none of them took
  a connection (the broker moved, as a restarted container does), so the next connection
  asks again.
- An IP address is its own answer, never looked up.

Addresses keep the order the resolver gave; the pair tries them in turn, as Kafka's
``client.dns.lookup=use_all_dns_ips`` does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

__all__ = ["DEFAULT_TTL_S", "Lookup", "Resolver", "SocketAddress"]

DEFAULT_TTL_S: Final = 30.0
"""How long learned addresses count as fresh: the JVM's default positive DNS cache."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SocketAddress:
    """One address of a name: what ``create_connection`` takes (``host`` an IP literal)."""

    family: int
    host: str
    port: int


Lookup = Callable[[str, int], Awaitable[Sequence[SocketAddress]]]
"""Asks the system resolver for a name's stream addresses (``loop.getaddrinfo`` by default)."""

_Answer = asyncio.Task[tuple[SocketAddress, ...]]


async def system_lookup(host: str, port: int) -> list[SocketAddress]:
    """The running loop's ``getaddrinfo`` for TCP, in the resolver's order, without repeats.

    :raises OSError: the name does not resolve (``socket.gaierror``).
    """
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: list[SocketAddress] = []
    for family, _type, _proto, _canonname, sockaddr in infos:
        address = SocketAddress(family=family, host=str(sockaddr[0]), port=int(sockaddr[1]))
        if address not in found:
            found.append(address)
    return found


@dataclasses.dataclass(slots=True, kw_only=True)
class _Entry:
    addresses: tuple[SocketAddress, ...] = ()
    learned_at: float = 0.0
    lookup: _Answer | None = None


class Resolver:
    """Addresses of broker names, shared by every pair of one event loop."""

    def __init__(
        self,
        *,
        lookup: Lookup = system_lookup,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[tuple[str, int], _Entry] = {}

    async def resolve(self, host: str, port: int) -> tuple[SocketAddress, ...]:
        """``host``'s addresses for ``port``: known ones at once, else the one lookup's.

        :raises OSError: the name's first lookup failed or found nothing.
        """
        literal = _literal(host, port)
        if literal is not None:
            return (literal,)
        entry = self._entries.setdefault((host, port), _Entry())
        if entry.addresses:
            if self._clock() - entry.learned_at >= self._ttl_s and entry.lookup is None:
                entry.lookup = self._start(host, port, entry)
            return entry.addresses
        if entry.lookup is None:
            entry.lookup = self._start(host, port, entry)
        # A caller that gives up (its connection timed out) leaves the lookup running for the
        # others: it is shared. Its shield's failure is retrieved even when the caller was
        # cancelled just as the lookup failed.
        answer = asyncio.shield(entry.lookup)
        answer.add_done_callback(_retrieve)
        return await answer

    def forget(self, host: str, port: int, addresses: Sequence[SocketAddress]) -> None:
        """Drop ``host``'s addresses if they are still ``addresses`` (none of them took a
        connection); a lookup under way is left to finish."""
        entry = self._entries.get((host, port))
        if entry is not None and entry.addresses == tuple(addresses):
            entry.addresses = ()

    async def close(self) -> None:
        """Cancel the lookups under way (the threads that run them finish on their own)."""
        lookups = [entry.lookup for entry in self._entries.values() if entry.lookup is not None]
        for lookup in lookups:
            lookup.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        self._entries.clear()

    def _start(self, host: str, port: int, entry: _Entry) -> _Answer:
        task = asyncio.get_running_loop().create_task(self._ask(host, port, entry))
        # A background refresh nobody awaits must not log "exception never retrieved".
        task.add_done_callback(_retrieve)
        return task

    async def _ask(self, host: str, port: int, entry: _Entry) -> tuple[SocketAddress, ...]:
        try:
            found = tuple(await self._lookup(host, port))
            if not found:
                raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
            entry.addresses, entry.learned_at = found, self._clock()
            return found
        finally:
            entry.lookup = None


def _literal(host: str, port: int) -> SocketAddress | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return SocketAddress(family=family, host=host, port=port)


def _retrieve(future: asyncio.Future[tuple[SocketAddress, ...]]) -> None:
    if not future.cancelled():
        future.exception()
