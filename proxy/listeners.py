"""The proxy's client listeners: bind, admit or refuse each connection, hand it on.

A plaintext listener is the loop's own server (libuv accepts); its connections go straight
to their connection pair, or, when ``listeners.allow.cidrs``/``listeners.deny.cidrs`` are
set, first through a check of the client's address. An SSL listener accepts plain sockets
itself and runs each TLS handshake as a task (:mod:`proxy.handshakes`), so that a
connection that never completes its handshake is bounded, logged and counted; the
address check comes first there too, before any TLS work.

A refused connection is closed at once and goes through the bad-connection log
(``bad=client_network_denied``: one line per connection, rate-limited; always counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from typing import Any, Final, Protocol, cast

from proxy import bad_connections as reasons
from proxy.bad_connections import BadConnectionLog
from proxy.client_networks import ClientNetworks
from proxy.config import HostPort
from proxy.handshakes import Handoff, Handshakes, PairFactory
from proxy.logs import event

__all__ = ["Admission", "Listener", "ListenerError", "listen"]

_log = logging.getLogger("tierproxy.server")

# Pending connections per listener: a burst of clients (a consumer group starting, the
# idle-connections benchmark) should queue, not see refused connections.
BACKLOG: Final = 1024

_ACCEPT_PAUSE_S: Final = 0.5
"""How long an SSL listener stops accepting after the process ran out of file descriptors
(or the kernel out of buffers), as asyncio's own servers do; the backlog holds the rest."""
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ListenerError(Exception):
    """A listener could not bind its address (the message says which and why)."""


class Listener(Protocol):
    """A bound listener."""

    @property
    def port(self) -> int:
        """The bound port (useful when 0 asked for any free one)."""
        ...

    def close(self) -> None:
        """Stop accepting; connections already handed on are not touched."""
        ...

    async def wait_closed(self) -> None:
        """Return once no more connections will be accepted."""
        ...


class Admission:
    """What every listener of the proxy checks before a connection gets its pair."""

    def __init__(
        self,
        *,
        networks: ClientNetworks,
        handshakes: Handshakes | None,
        bad_log: BadConnectionLog,
    ) -> None:
        """:param handshakes: where SSL listeners run their handshakes; None: plaintext."""
        self._networks = networks
        self.handshakes = handshakes
        self._bad_log = bad_log

    @property
    def restricted(self) -> bool:
        """Whether any client address can be refused."""
        return self._networks.restricted

    def admits(self, peer: Any, *, node_id: int, local: Any) -> bool:
        """Whether a client at ``peer`` (a socket address) may connect; a refusal is logged
        and counted here, and the caller closes the connection."""
        host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if self._networks.admits(host):
            return True
        self._bad_log.closed(
            logging.WARNING,
            reasons.CLIENT_NETWORK_DENIED,
            client=_address(peer),
            node=node_id,
            listener_port=local[1] if isinstance(local, tuple) else local,
            reason="client network not allowed (listeners.allow.cidrs/listeners.deny.cidrs)",
        )
        return False

    def close(self) -> None:
        """Abort the TLS handshakes in progress (shutdown)."""
        if self.handshakes is not None:
            self.handshakes.close()

    async def wait_closed(self) -> None:
        """Return once every handshake has ended."""
        if self.handshakes is not None:
            await self.handshakes.wait_closed()


async def listen(
    address: HostPort,
    *,
    node_id: int,
    admission: Admission,
    make: PairFactory,
    reuse_port: bool = False,
) -> Listener:
    """Bind a listener for broker ``node_id`` at ``address``.

    ``reuse_port``: bind with ``SO_REUSEPORT``, so that the workers of one ``serve`` share
    the address and the kernel spreads new connections over them (see
    :mod:`proxy.workers`).

    :raises ListenerError: when the address cannot be bound (in use, not this host's).
    """
    try:
        if admission.handshakes is not None:
            return await _TlsListener.bind(
                address, node_id=node_id, admission=admission, make=make, reuse_port=reuse_port
            )
        return await _PlainListener.bind(
            address, node_id=node_id, admission=admission, make=make, reuse_port=reuse_port
        )
    except OSError as err:
        raise ListenerError(f"cannot listen on {address} for broker {node_id}: {err}") from err


class _Checked(asyncio.Protocol):
    """A plaintext connection's first protocol when client networks are restricted."""

    __slots__ = ("_admission", "_make", "_node_id")

    def __init__(self, admission: Admission, node_id: int, make: PairFactory) -> None:
        self._admission = admission
        self._node_id = node_id
        self._make = make

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        if not self._admission.admits(
            transport.get_extra_info("peername"),
            node_id=self._node_id,
            local=transport.get_extra_info("sockname"),
        ):
            transport.abort()
            return
        Handoff(self._make).connection_made(transport)


class _PlainListener:
    """The loop's own server: libuv accepts, the pair is the protocol from the start."""

    def __init__(self, server: asyncio.Server) -> None:
        self._server = server

    @classmethod
    async def bind(
        cls,
        address: HostPort,
        *,
        node_id: int,
        admission: Admission,
        make: PairFactory,
        reuse_port: bool,
    ) -> _PlainListener:
        server = await asyncio.get_running_loop().create_server(
            (lambda: _Checked(admission, node_id, make)) if admission.restricted else make,
            address.host,
            address.port,
            backlog=BACKLOG,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )
        return cls(server)

    @property
    def port(self) -> int:
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        self._server.close()

    async def wait_closed(self) -> None:
        await self._server.wait_closed()


class _TlsListener:
    """Accepts plain sockets and starts each one's TLS handshake (:class:`Handshakes`)."""

    def __init__(
        self,
        sockets: list[socket.socket],
        *,
        node_id: int,
        admission: Admission,
        make: PairFactory,
    ) -> None:
        self._sockets = sockets
        self._node_id = node_id
        self._admission = admission
        self._make = make
        loop = asyncio.get_running_loop()
        self._accepting = [loop.create_task(self._accept(sock)) for sock in sockets]

    @classmethod
    async def bind(
        cls,
        address: HostPort,
        *,
        node_id: int,
        admission: Admission,
        make: PairFactory,
        reuse_port: bool,
    ) -> _TlsListener:
        infos = await asyncio.get_running_loop().getaddrinfo(
            address.host or None,
            address.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                # Port 0 on several addresses: every socket takes the first one's port.
                port = sockets[0].getsockname()[1] if len(sockets) > 1 else sockaddr[1]
                sock.bind((sockaddr[0], port, *sockaddr[2:]))
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return cls(sockets, node_id=node_id, admission=admission, make=make)

    @property
    def port(self) -> int:
        return int(self._sockets[0].getsockname()[1])

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        handshakes = self._admission.handshakes
        assert handshakes is not None
        local = listening.getsockname()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as err:
                pause = _ACCEPT_PAUSE_S if err.errno in _OUT_OF_RESOURCES else 0.0
                event(
                    _log,
                    logging.ERROR,
                    "listener.accept.failed",
                    node=self._node_id,
                    error=str(err),
                    pause_s=pause,
                )
                await asyncio.sleep(pause)
                continue
            if not self._admission.admits(peer, node_id=self._node_id, local=local):
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handshakes.start(sock, client=_address(peer), node_id=self._node_id, make=self._make)

    def close(self) -> None:
        # The sockets close once their accept tasks have let go of them (wait_closed).
        for task in self._accepting:
            task.cancel()

    async def wait_closed(self) -> None:
        for task in self._accepting:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sock in self._sockets:
            sock.close()


def _address(peer: Any) -> str:
    if isinstance(peer, tuple):
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer)
