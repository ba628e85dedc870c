"""Which proxy address fronts which broker.

Every broker gets its own proxy listener, so a client that connects to broker N's proxy
address reaches broker N (Kafka clients pick brokers themselves: partition leaders, group
coordinators). Addresses come from an explicit ``[[broker.map]]`` entry or, by default, from
port-per-broker: the i-th broker seen (first response sorted by node id, later ones as they
appear) listens on ``base port + i`` and is advertised as ``advertised base port + i``. An
index is never reused or moved, so addresses stay stable while the proxy runs.

With base port 0 every listener takes a free port from the OS and :meth:`BrokerMap.bound`
records it; tests and benchmarks use this to avoid port clashes.

Pure bookkeeping: no sockets here (the server starts listeners for new routes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from proxy.config import BrokerMapEntry, HostPort

__all__ = ["BrokerMap", "BrokerMapError", "BrokerRoute"]

_MAX_PORT = 65535


class BrokerMapError(ValueError):
    """A broker cannot be given a proxy address (port range exhausted)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRoute:
    """One broker: where the proxy listens for it, what clients are told, where it is."""

    node_id: int
    listener: HostPort
    advertised: HostPort
    upstream: HostPort


class BrokerMap:
    """Node id → :class:`BrokerRoute`, assigned once per node id."""

    def __init__(
        self, *, listen: HostPort, advertised: HostPort, explicit: Sequence[BrokerMapEntry] = ()
    ) -> None:
        self._listen = listen
        self._advertised = advertised
        self._explicit = {entry.node_id: entry for entry in explicit}
        self._routes: dict[int, BrokerRoute] = {}
        self._next_index = 0

    def get(self, node_id: int) -> BrokerRoute | None:
        """The route of a broker seen before, or ``None``."""
        return self._routes.get(node_id)

    def routes(self) -> tuple[BrokerRoute, ...]:
        """Every route, in the order the brokers were first seen."""
        return tuple(self._routes.values())

    def observe_all(self, brokers: Iterable[tuple[int, HostPort]]) -> list[BrokerRoute]:
        """Record brokers of a first response in node id order; return the new routes.

        :raises BrokerMapError: when port-per-broker runs past port 65535.
        """
        new: list[BrokerRoute] = []
        for node_id, upstream in sorted(brokers, key=lambda broker: broker[0]):
            route, is_new = self.observe(node_id, upstream)
            if is_new:
                new.append(route)
        return new

    def observe(self, node_id: int, upstream: HostPort) -> tuple[BrokerRoute, bool]:
        """Record that broker ``node_id`` is at ``upstream``; return its route and whether it
        is new (and so needs a listener).

        A known broker that moved keeps its proxy address and gets the new upstream.

        :raises BrokerMapError: when port-per-broker runs past port 65535.
        """
        route = self._routes.get(node_id)
        if route is not None:
            if route.upstream != upstream:
                route = dataclasses.replace(route, upstream=upstream)
                self._routes[node_id] = route
            return route, False
        entry = self._explicit.get(node_id)
        if entry is not None:
            route = BrokerRoute(
                node_id=node_id,
                listener=entry.listener,
                advertised=entry.advertised,
                upstream=upstream,
            )
        else:
            route = self._port_per_broker(node_id, upstream)
        self._routes[node_id] = route
        return route, True

    def bound(self, node_id: int, port: int) -> BrokerRoute:
        """Record the port the OS gave a listener asked to bind port 0; return the route.

        :raises KeyError: for a node id never observed.
        """
        route = self._routes[node_id]
        if route.listener.port == 0:
            route = dataclasses.replace(
                route,
                listener=dataclasses.replace(route.listener, port=port),
                advertised=dataclasses.replace(route.advertised, port=port),
            )
            self._routes[node_id] = route
        return route

    def _port_per_broker(self, node_id: int, upstream: HostPort) -> BrokerRoute:
        index = self._next_index
        self._next_index += 1
        if self._listen.port == 0:
            listen_port = advertised_port = 0
        else:
            listen_port = self._listen.port + index
            advertised_port = self._advertised.port + index
        if max(listen_port, advertised_port) > _MAX_PORT:
            raise BrokerMapError(
                f"broker {node_id} would need port {max(listen_port, advertised_port)}: "
                "lower the listener base port or map it in [[broker.map]]"
            )
        return BrokerRoute(
            node_id=node_id,
            listener=HostPort(host=self._listen.host, port=listen_port),
            advertised=HostPort(host=self._advertised.host, port=advertised_port),
            upstream=upstream,
        )
