"""Free TCP ports on the loopback interface for the embedded servers.

Ports are drawn at random from a band *below* Linux's default ephemeral range (32768 to 60999):
ports returned by ``bind(0)`` come from that range, which is also where the kernel picks the
local port of every outgoing connection, so a port picked there can be taken by some client
socket between the check and the server's own ``bind``. Drawing from 12000 to 31999 (checked free
by binding it) leaves only the much smaller race with other servers started at the same moment,
which the server classes absorb by retrying with fresh ports when a start fails early.

SeaweedFS opens a gRPC port at each service's HTTP port + 10000; :func:`free_ports` with
``grpc_offset=10000`` returns base ports whose +10000 twins are free too, all below 55000.
"""

from __future__ import annotations

import random
import socket

__all__ = ["LOOPBACK", "free_port", "free_ports"]

LOOPBACK = "127.0.0.1"

_LOW = 12_000
_HIGH = 32_000  # exclusive; below the ephemeral range, see the module docstring
_ATTEMPTS = 2_000

_rng = random.Random()
# Ports this process has handed out already: two servers started back to back in one process
# must not both receive a port that neither has bound yet.
_handed_out: set[int] = set()


class NoFreePortError(RuntimeError):
    """No free port could be found in the band (the machine is very busy)."""


def _is_free(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """One free port on ``host``.

    :raises NoFreePortError: after many random draws all turned out to be in use.
    """
    return free_ports(1, host=host)[0]


def free_ports(count: int, *, host: str = LOOPBACK, grpc_offset: int | None = None) -> list[int]:
    """``count`` distinct free ports on ``host``.

    :param grpc_offset: also require ``port + grpc_offset`` to be free for every returned port
        (and below the band's ceiling), for servers that derive a second port from the first.
    :raises NoFreePortError: after many random draws did not yield enough free ports.
    """
    high = _HIGH - grpc_offset if grpc_offset else _HIGH
    chosen: list[int] = []
    for _ in range(_ATTEMPTS):
        if len(chosen) == count:
            break
        port = _rng.randrange(_LOW, high)
        wanted = [port] if grpc_offset is None else [port, port + grpc_offset]
        taken = _handed_out.union(chosen)
        if grpc_offset is not None:
            taken |= {p + grpc_offset for p in chosen}
        if any(p in taken for p in wanted) or not all(_is_free(p, host) for p in wanted):
            continue
        chosen.append(port)
    if len(chosen) < count:
        raise NoFreePortError(f"found only {len(chosen)} of {count} free ports on {host}")
    _handed_out.update(chosen)
    if grpc_offset is not None:
        _handed_out.update(p + grpc_offset for p in chosen)
    return chosen
