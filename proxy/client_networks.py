"""Which client networks may connect to the proxy's listeners (``listeners.allow.cidrs``,
``listeners.deny.cidrs``).

The broker sees every connection through the proxy as coming from the proxy's own address,
so its host-based ACLs (``--allow-host``/``--deny-host``), its per-IP connection quotas and
its audit log cannot tell clients apart by network. This is where the proxy does it itself.

Rules: a client address is refused when a deny network contains it; otherwise admitted when
the allow list is empty or one of its networks contains it. An IPv4 client reaching an IPv6
socket (``::ffff:10.1.2.3``) is matched as the IPv4 address it is. Pure: no sockets.
"""

from __future__ import annotations

import dataclasses
import ipaddress

__all__ = ["ClientNetworks", "Network"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientNetworks:
    """The allow and deny lists; both empty admits everyone."""

    allow: tuple[Network, ...] = ()
    deny: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, *, allow: str, deny: str) -> ClientNetworks:
        """Both lists from comma-separated CIDR text (``10.0.0.0/8, 2001:db8::/32``); a bare
        address is a network of one.

        :raises ValueError: for an entry that is not a network, naming it.
        """
        return cls(allow=_networks(allow), deny=_networks(deny))

    @property
    def restricted(self) -> bool:
        """Whether any address can be refused at all."""
        return bool(self.allow or self.deny)

    def admits(self, host: str) -> bool:
        """Whether a client at ``host`` (an IP address as a socket reports it) may connect.

        A ``host`` that is not an IP address (a Unix socket path) is refused when any list
        is set: it cannot be matched against networks.
        """
        if not self.restricted:
            return True
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.deny):
            return False
        return not self.allow or any(address in network for network in self.allow)


def _networks(text: str) -> tuple[Network, ...]:
    networks: list[Network] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as err:
            raise ValueError(f"{entry!r} is not a network (CIDR such as 10.0.0.0/8)") from err
    return tuple(networks)
