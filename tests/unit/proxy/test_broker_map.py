"""Broker map: port-per-broker, explicit entries, stability, ports chosen by the OS."""

from __future__ import annotations

import pytest

from proxy.broker_map import BrokerMap, BrokerMapError
from proxy.config import BrokerMapEntry, HostPort

LISTEN = HostPort(host="0.0.0.0", port=9192)
ADVERTISED = HostPort(host="proxy", port=19192)


def upstream(port: int) -> HostPort:
    return HostPort(host="kafka", port=port)


def test_first_response_is_assigned_by_node_id_and_later_brokers_append() -> None:
    brokers = BrokerMap(listen=LISTEN, advertised=ADVERTISED)
    new = brokers.observe_all([(3, upstream(3)), (1, upstream(1)), (2, upstream(2))])
    assert [(r.node_id, r.listener.port, r.advertised.port) for r in new] == [
        (1, 9192, 19192),
        (2, 9193, 19193),
        (3, 9194, 19194),
    ]
    route, is_new = brokers.observe(0, upstream(0))
    assert is_new
    assert (route.listener.port, route.advertised) == (9195, HostPort(host="proxy", port=19195))


def test_known_brokers_keep_their_address_and_follow_a_moved_upstream() -> None:
    brokers = BrokerMap(listen=LISTEN, advertised=ADVERTISED)
    brokers.observe_all([(1, upstream(1))])
    route, is_new = brokers.observe(1, upstream(99))
    assert not is_new
    assert route.upstream == upstream(99)
    assert route.listener.port == 9192
    assert brokers.get(1) == route


def test_explicit_entries_win() -> None:
    entry = BrokerMapEntry(
        node_id=2,
        listener=HostPort(host="0.0.0.0", port=30000),
        advertised=HostPort(host="b2.proxy", port=30000),
    )
    brokers = BrokerMap(listen=LISTEN, advertised=ADVERTISED, explicit=[entry])
    routes = brokers.observe_all([(1, upstream(1)), (2, upstream(2)), (3, upstream(3))])
    assert [(r.node_id, str(r.advertised)) for r in routes] == [
        (1, "proxy:19192"),
        (2, "b2.proxy:30000"),
        (3, "proxy:19193"),
    ]


def test_port_zero_takes_the_port_the_os_gave() -> None:
    brokers = BrokerMap(listen=HostPort(host="127.0.0.1", port=0), advertised=ADVERTISED)
    (route,) = brokers.observe_all([(5, upstream(5))])
    assert route.listener.port == 0
    bound = brokers.bound(5, 41234)
    assert (bound.listener.port, bound.advertised) == (41234, HostPort(host="proxy", port=41234))
    assert brokers.routes() == (bound,)


def test_running_out_of_ports_is_an_error() -> None:
    brokers = BrokerMap(listen=HostPort(host="h", port=65535), advertised=ADVERTISED)
    brokers.observe(1, upstream(1))
    with pytest.raises(BrokerMapError, match="broker 2"):
        brokers.observe(2, upstream(2))
