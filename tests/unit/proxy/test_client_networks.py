"""Client network allow/deny lists: parsing, precedence, IPv4-mapped IPv6, against a
brute-force model."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.client_networks import ClientNetworks
from proxy.config import ProxyConfig
from storage.config import ConfigError


def test_no_lists_admit_everyone() -> None:
    networks = ClientNetworks.parse(allow="", deny="")
    assert not networks.restricted
    assert networks.admits("203.0.113.9")
    assert networks.admits("not an address")


def test_deny_wins_over_allow() -> None:
    networks = ClientNetworks.parse(allow="127.0.0.0/8", deny="127.0.0.2")
    assert networks.admits("127.0.0.1")
    assert not networks.admits("127.0.0.2")
    assert not networks.admits("10.0.0.1")


def test_ipv4_mapped_ipv6_clients_match_ipv4_networks() -> None:
    networks = ClientNetworks.parse(allow="10.0.0.0/8", deny="")
    assert networks.admits("::ffff:10.1.2.3")
    assert not networks.admits("::ffff:192.0.2.1")
    assert ClientNetworks.parse(allow="::1/128", deny="").admits("::1")


def test_a_scoped_ipv6_address_is_matched_without_its_zone() -> None:
    assert ClientNetworks.parse(allow="fe80::/10", deny="").admits("fe80::1%eth0")


def test_a_non_ip_peer_is_refused_once_lists_are_set() -> None:
    assert not ClientNetworks.parse(allow="", deny="10.0.0.0/8").admits("/run/socket")


def test_a_malformed_entry_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=re.escape("'10.0.0.0/33' is not a network")):
        ProxyConfig(listeners_allow_cidrs="127.0.0.1/32, 10.0.0.0/33")


NETWORKS = st.builds(
    lambda address, prefix: ipaddress.ip_network(f"{address}/{prefix}", strict=False),
    st.ip_addresses(v=4),
    st.integers(min_value=0, max_value=32),
)


@given(
    allow=st.lists(NETWORKS, max_size=3),
    deny=st.lists(NETWORKS, max_size=3),
    client=st.ip_addresses(v=4),
)
def test_admission_matches_the_rule(
    allow: list[ipaddress.IPv4Network],
    deny: list[ipaddress.IPv4Network],
    client: ipaddress.IPv4Address,
) -> None:
    networks = ClientNetworks.parse(allow=",".join(map(str, allow)), deny=", ".join(map(str, deny)))
    denied = any(client in network for network in deny)
    allowed = not allow or any(client in network for network in allow)
    assert networks.admits(str(client)) == (allowed and not denied)
    assert networks.admits(f"::ffff:{client}") == (allowed and not denied)
