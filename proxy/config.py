"""Settings of ``tierproxy serve``: where to listen, which broker to front, TLS, limits.

Settings use Kafka's names where Kafka has one (``bootstrap.servers``, ``listeners``,
``advertised.listeners``, ``socket.request.max.bytes``, ``ssl.*``, ``security.protocol``) so an
operator can read the file like a ``server.properties``. TLS and SASL towards the broker take
the client-side names with an ``upstream.`` prefix (:mod:`storage.kafka_security`), as the proxy
is the broker's client there, and so are the pipeline and ``status``, which read the same ones.

An explicit broker address map is an array of tables::

    [[broker.map]]
    node.id = 1
    listener = "0.0.0.0:19092"
    advertised.listener = "proxy-1.example.com:19092"

Brokers without an entry get ``listener base port + index`` (index in order of appearance).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from typing import Any

from proxy.client_networks import ClientNetworks
from storage.config import ConfigError, setting

__all__ = [
    "BrokerMapEntry",
    "HostPort",
    "Listener",
    "ProxyConfig",
    "parse_host_port",
    "parse_listener",
]

# Kafka's default for socket.request.max.bytes: a request larger than this is refused before
# it is buffered, so one client cannot make the proxy hold an arbitrary amount of memory.
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024

# Write-buffer watermarks of each side of a connection pair. 1 MiB lets a whole default-sized
# Fetch response (max.partition.fetch.bytes = 1 MiB) sit in the buffer without pausing the
# broker side, while 200 idle connections still cost nothing (buffers are empty when idle).
DEFAULT_HIGH_WATER_BYTES = 1024 * 1024
DEFAULT_LOW_WATER_BYTES = 256 * 1024

# What intercepted requests in flight may hold until their responses (a Fetch's plan is
# about 300 bytes per partition of its fetch session): room for about a hundred Fetches of
# 1,000-partition sessions at once, more than a handful of consumers per broker ask.
DEFAULT_REQUEST_PLANS_MAX_BYTES = 64 * 1024 * 1024

_SCHEMES = {"PLAINTEXT": False, "SASL_PLAINTEXT": False, "SSL": True, "SASL_SSL": True}
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_LOG_FORMATS = ("logfmt", "json")
_CLIENT_AUTH = ("none", "requested", "required")
METRICS_PASSWORD_ENV = "TIERPROXY_METRICS_BASIC_AUTH_PASSWORD"
"""Read when neither ``metrics.basic.auth.password`` nor its ``.file`` is set."""
METRICS_TOKEN_ENV = "TIERPROXY_METRICS_BEARER_TOKEN"
"""Read when neither ``metrics.bearer.token`` nor its ``.file`` is set."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HostPort:
    """A TCP address as written in Kafka settings."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Listener:
    """A listener address with its Kafka security protocol (``SSL://host:port``)."""

    security_protocol: str
    address: HostPort

    @property
    def tls(self) -> bool:
        """Whether the transport is TLS; SASL is end to end between client and broker."""
        return _SCHEMES[self.security_protocol]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerMapEntry:
    """An explicit proxy address for one broker, overriding port-per-broker."""

    node_id: int
    listener: HostPort
    advertised: HostPort


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    """Settings of the pass-through proxy: listeners, the broker, TLS, limits, logs."""

    bootstrap_servers: str = setting(
        "bootstrap.servers",
        "127.0.0.1:9092",
        "Comma-separated host:port list of the broker(s) the proxy fronts; the proxy asks "
        "them for the cluster's brokers at start and gives each a listener.",
        kafka="bootstrap.servers",
    )
    listeners: str = setting(
        "listeners",
        "PLAINTEXT://127.0.0.1:9192",
        "Where clients connect: [PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL://]host:port. The port "
        "is the base port: broker number i (in order of appearance) gets port + i.",
        kafka="listeners",
    )
    advertised_listeners: str = setting(
        "advertised.listeners",
        "",
        "host[:port] clients are told to connect to (the port is the advertised base port). "
        "Empty: the listener's host (this machine's name when it listens on all addresses).",
        kafka="advertised.listeners",
    )
    broker_map: tuple[Mapping[str, Any], ...] = setting(
        "broker.map",
        (),
        "Explicit addresses per broker: [[broker.map]] tables with node.id, listener and "
        "advertised.listener; other brokers get port-per-broker addresses.",
    )
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes",
        DEFAULT_SOCKET_REQUEST_MAX_BYTES,
        "Largest request frame accepted from a client; a larger one closes that connection.",
        kafka="socket.request.max.bytes",
    )
    connection_setup_timeout_ms: int = setting(
        "socket.connection.setup.timeout.ms",
        10_000,
        "How long to wait for the broker to accept the upstream connection of a client.",
        kafka="socket.connection.setup.timeout.ms",
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms",
        600_000,
        "Close a client connection that has sent and been sent nothing for this long, with "
        "no request outstanding (Kafka's broker setting and default). -1 turns it off.",
        kafka="connections.max.idle.ms",
    )
    request_receive_timeout_ms: int = setting(
        "request.receive.timeout.ms",
        30_000,
        "Close a client connection that started a request frame and has not finished it "
        "within this (a client that trickles or stalls mid-frame); the clock stops while the "
        "proxy holds reading for back-pressure. The default is Kafka clients' "
        "request.timeout.ms, after which they give up on the request anyway. -1 turns it off.",
    )
    buffer_high_water_bytes: int = setting(
        "connection.buffer.high.water.bytes",
        DEFAULT_HIGH_WATER_BYTES,
        "Stop reading one side of a connection pair while the other side has this many "
        "bytes waiting to be written (back-pressure).",
    )
    buffer_low_water_bytes: int = setting(
        "connection.buffer.low.water.bytes",
        DEFAULT_LOW_WATER_BYTES,
        "Resume reading once the other side's write buffer is back below this.",
    )
    splice_enable: bool = setting(
        "connection.splice.enable",
        True,
        "Forward response bytes the proxy need not read (raw responses, the records of a "
        "streamed Fetch) from the broker's socket to the client's with Linux splice(2), "
        "without copying them through Python. Only where both sides are plain TCP (a TLS "
        "side is always copied) and the platform has os.splice; at most "
        "connection.buffer.high.water.bytes (capped by the kernel's fs.pipe-max-size) "
        "wait in the pipe of each connection.",
    )
    request_plans_max_bytes: int = setting(
        "request.plans.max.bytes",
        DEFAULT_REQUEST_PLANS_MAX_BYTES,
        "Memory for what the proxy keeps about intercepted requests until their responses "
        "(a Fetch's plan: about 300 bytes per partition of its fetch session). Above it, no "
        "client's next request is read until responses free some, as a broker stops reading "
        "requests once queued.max.request.bytes is used up; a request in flight is never "
        "forgotten. 0: read a request only when none is held.",
    )
    shutdown_timeout_ms: int = setting(
        "shutdown.timeout.ms",
        10_000,
        "On SIGTERM/SIGINT: how long in-flight requests may take to finish before the "
        "remaining connections are cut.",
    )
    metrics_port: int = setting(
        "metrics.port",
        0,
        "Port of the HTTP endpoint of Prometheus /metrics and the /livez and /readyz health "
        "checks; 0 turns it off.",
    )
    metrics_host: str = setting(
        "metrics.host",
        "127.0.0.1",
        "Address the metrics and health endpoint binds to. /metrics names topics, users and "
        "client ids: bind it to all addresses (0.0.0.0) only with metrics.ssl.* and "
        "metrics.basic.auth.* or metrics.bearer.token.",
    )
    log_level: str = setting("log.level", "INFO", "DEBUG, INFO, WARNING or ERROR.")
    log_format: str = setting(
        "log.format", "logfmt", "logfmt or json: one event per line, with connection ids."
    )
    ssl_certificate_location: str = setting(
        "ssl.certificate.location",
        "",
        "PEM certificate chain the proxy presents to clients on SSL listeners.",
        kafka="ssl.certificate.location",
    )
    ssl_key_location: str = setting(
        "ssl.key.location",
        "",
        "PEM private key of that certificate (may be the same file).",
        kafka="ssl.key.location",
    )
    ssl_key_password: str = setting(
        "ssl.key.password", "", "Password of the private key, if any.", kafka="ssl.key.password"
    )
    ssl_ca_location: str = setting(
        "ssl.ca.location",
        "",
        "PEM CA bundle to verify client certificates with (see ssl.client.auth).",
        kafka="ssl.ca.location",
    )
    ssl_client_auth: str = setting(
        "ssl.client.auth",
        "none",
        "Client certificates on SSL listeners: none, requested or required.",
        kafka="ssl.client.auth",
    )

    ssl_handshake_timeout_ms: int = setting(
        "ssl.handshake.timeout.ms",
        10_000,
        "On SSL listeners: close a client connection whose TLS handshake has not finished "
        "within this (a port scan, a health check that only opens TCP, a plaintext client, a "
        "client that stalls mid-handshake); it is logged and counted as a bad connection. "
        "Kafka clients give up on a connection after socket.connection.setup.timeout.ms, "
        "also 10 s.",
    )
    ssl_handshake_max_pending: int = setting(
        "ssl.handshake.max.pending",
        1000,
        "On SSL listeners: most client connections in their TLS handshake at once. Beyond it "
        "the oldest is closed (logged and counted), so a flood of stalled handshakes costs "
        "bounded memory and file descriptors, and a real client, which finishes its "
        "handshake in milliseconds, still gets through.",
    )
    listeners_allow_cidrs: str = setting(
        "listeners.allow.cidrs",
        "",
        "Comma-separated client networks (CIDR, IPv4 or IPv6, e.g. 10.0.0.0/8,::1/128) that "
        "may connect to the proxy's listeners; empty: every network. The broker sees every "
        "client as coming from the proxy, so host-based ACLs must be enforced here.",
    )
    listeners_deny_cidrs: str = setting(
        "listeners.deny.cidrs",
        "",
        "Comma-separated client networks (CIDR) refused even when listeners.allow.cidrs "
        "admits them. A refused connection is closed at accept, before any TLS handshake, "
        "and logged (rate-limited) and counted as a bad connection.",
    )
    metrics_ssl_certificate_location: str = setting(
        "metrics.ssl.certificate.location",
        "",
        "PEM certificate chain of the metrics and health endpoint; set: it serves HTTPS only.",
    )
    metrics_ssl_key_location: str = setting(
        "metrics.ssl.key.location", "", "PEM private key of metrics.ssl.certificate.location."
    )
    metrics_ssl_key_password: str = setting(
        "metrics.ssl.key.password", "", "Password of that private key, if any.", secret=True
    )
    metrics_ssl_ca_location: str = setting(
        "metrics.ssl.ca.location",
        "",
        "PEM CA bundle to verify the scraper's client certificate with (metrics.ssl.client.auth).",
    )
    metrics_ssl_client_auth: str = setting(
        "metrics.ssl.client.auth",
        "none",
        "Client certificates on the HTTPS metrics endpoint: none, requested or required.",
    )
    metrics_basic_auth_username: str = setting(
        "metrics.basic.auth.username",
        "",
        "User a scraper must send with HTTP basic authentication for /metrics; empty: none.",
    )
    metrics_basic_auth_password: str = setting(
        "metrics.basic.auth.password",
        "",
        f"Password of metrics.basic.auth.username. Better kept out of the file: see "
        f"metrics.basic.auth.password.file, or set ${METRICS_PASSWORD_ENV}.",
        secret=True,
    )
    metrics_basic_auth_password_file: str = setting(
        "metrics.basic.auth.password.file",
        "",
        "File whose content (trailing newline removed) is that password, e.g. a mounted secret.",
    )
    metrics_bearer_token: str = setting(
        "metrics.bearer.token",
        "",
        f"Token a scraper may send as 'Authorization: Bearer TOKEN' for /metrics; empty: none. "
        f"Better kept out of the file: see metrics.bearer.token.file, or set "
        f"${METRICS_TOKEN_ENV}.",
        secret=True,
    )
    metrics_bearer_token_file: str = setting(
        "metrics.bearer.token.file",
        "",
        "File whose content (trailing newline removed) is that token.",
    )
    health_check_interval_ms: int = setting(
        "health.check.interval.ms",
        10_000,
        "How often /readyz's background checks ask the broker, the metadata topic and the "
        "remote storage; a check whose last success is older than three intervals fails.",
    )

    workers: int = setting(
        "workers",
        0,
        "Worker processes that serve clients, each with its own event loop, sharing the "
        "listeners' ports (SO_REUSEPORT); the host-wide budgets (remote reader threads and "
        "queue, chunk, read-ahead and index cache bytes, S3 connections, the remote fetch "
        "quota, TLS handshakes, fetch session slots) are divided among them. 0: one per "
        "core this process may use (CPU affinity and the cgroup's CPU quota). 1: a single "
        "process, no supervisor. A listener on port 0 needs one worker.",
    )

    def __post_init__(self) -> None:
        bootstrap_addresses(self)
        parse_listener(self.listeners)
        if self.advertised_listeners.strip():
            self.advertised_base()
        self.explicit_brokers()
        _require(self.socket_request_max_bytes > 0, "socket.request.max.bytes must be > 0")
        _require(
            0 < self.buffer_low_water_bytes <= self.buffer_high_water_bytes,
            "connection.buffer.low.water.bytes must be > 0 and <= the high water mark",
        )
        _require(self.connection_setup_timeout_ms > 0, "socket.connection.setup.timeout.ms > 0")
        _require(
            self.connections_max_idle_ms > 0 or self.connections_max_idle_ms == -1,
            "connections.max.idle.ms must be > 0, or -1 for no limit",
        )
        _require(
            self.request_receive_timeout_ms > 0 or self.request_receive_timeout_ms == -1,
            "request.receive.timeout.ms must be > 0, or -1 for no limit",
        )
        _require(self.shutdown_timeout_ms >= 0, "shutdown.timeout.ms must be >= 0")
        _require(self.request_plans_max_bytes >= 0, "request.plans.max.bytes must be >= 0")
        _require(0 <= self.metrics_port < 65536, "metrics.port must be 0..65535")
        _require(self.log_level.upper() in _LOG_LEVELS, f"log.level must be one of {_LOG_LEVELS}")
        _require(self.log_format in _LOG_FORMATS, f"log.format must be one of {_LOG_FORMATS}")
        _require(
            self.ssl_client_auth in _CLIENT_AUTH, f"ssl.client.auth must be one of {_CLIENT_AUTH}"
        )
        if self.listener.tls:
            _require(
                bool(self.ssl_certificate_location),
                "an SSL listener needs ssl.certificate.location",
            )
        _require(self.ssl_handshake_timeout_ms > 0, "ssl.handshake.timeout.ms must be > 0")
        _require(self.ssl_handshake_max_pending > 0, "ssl.handshake.max.pending must be > 0")
        self.client_networks()
        _require(
            self.metrics_ssl_client_auth in _CLIENT_AUTH,
            f"metrics.ssl.client.auth must be one of {_CLIENT_AUTH}",
        )
        _require(
            not self.metrics_ssl_key_location or bool(self.metrics_ssl_certificate_location),
            "metrics.ssl.key.location needs metrics.ssl.certificate.location",
        )
        _require(self.health_check_interval_ms > 0, "health.check.interval.ms must be > 0")
        _require(self.workers >= 0, "workers must be >= 0 (0: one per core)")

    def client_networks(self) -> ClientNetworks:
        """Who may connect, from ``listeners.allow.cidrs`` and ``listeners.deny.cidrs``.

        :raises ConfigError: for an entry that is not a network.
        """
        try:
            return ClientNetworks.parse(
                allow=self.listeners_allow_cidrs, deny=self.listeners_deny_cidrs
            )
        except ValueError as err:
            raise ConfigError(f"listeners.allow.cidrs / listeners.deny.cidrs: {err}") from err

    @property
    def listener(self) -> Listener:
        """The client-facing listener (its port is the base port)."""
        return parse_listener(self.listeners)

    def advertised_base(self) -> HostPort:
        """The address advertised for the base port; other brokers add their index to it.

        Without ``advertised.listeners``, a listener on all addresses advertises this
        machine's fully qualified name (looked up here, not when the settings are read).

        :raises ConfigError: when ``advertised.listeners`` cannot be parsed.
        """
        listen = self.listener.address
        text = self.advertised_listeners.strip()
        if not text:
            host = listen.host if listen.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
            return HostPort(host=host, port=listen.port)
        if "://" in text:
            text = text.split("://", 1)[1]
        if ":" not in text.rsplit("]", 1)[-1]:
            return HostPort(host=text.strip("[]"), port=listen.port)
        return parse_host_port(text)

    def explicit_brokers(self) -> tuple[BrokerMapEntry, ...]:
        """The ``[[broker.map]]`` entries, validated.

        :raises ConfigError: for a malformed entry or a node id given twice.
        """
        entries: list[BrokerMapEntry] = []
        for raw in self.broker_map:
            unknown = set(raw) - {"node.id", "listener", "advertised.listener"}
            _require(not unknown, f"broker.map: unknown keys {sorted(unknown)}")
            _require(
                isinstance(raw.get("node.id"), int) and "listener" in raw,
                "broker.map entries need node.id (integer) and listener",
            )
            listener = parse_host_port(str(raw["listener"]))
            advertised = raw.get("advertised.listener")
            entries.append(
                BrokerMapEntry(
                    node_id=int(raw["node.id"]),
                    listener=listener,
                    advertised=parse_host_port(str(advertised)) if advertised else listener,
                )
            )
        ids = [entry.node_id for entry in entries]
        _require(len(ids) == len(set(ids)), "broker.map: a node.id appears twice")
        return tuple(entries)


def bootstrap_addresses(config: ProxyConfig) -> tuple[HostPort, ...]:
    """The ``bootstrap.servers`` addresses.

    :raises ConfigError: when the list is empty or an entry is not host:port.
    """
    parts = [part.strip() for part in config.bootstrap_servers.split(",") if part.strip()]
    _require(bool(parts), "bootstrap.servers must name at least one broker")
    return tuple(parse_host_port(part.split("://", 1)[-1]) for part in parts)


def parse_listener(text: str) -> Listener:
    """Parse ``[SCHEME://]host:port`` as Kafka's ``listeners`` setting writes it.

    :raises ConfigError: for an unknown scheme or a malformed address.
    """
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        scheme, rest = "PLAINTEXT", text.strip()
    scheme = scheme.upper()
    _require(scheme in _SCHEMES, f"listener {text!r}: scheme must be one of {tuple(_SCHEMES)}")
    return Listener(security_protocol=scheme, address=parse_host_port(rest))


def parse_host_port(text: str) -> HostPort:
    """Parse ``host:port`` or ``[v6-host]:port``.

    :raises ConfigError: when the port is missing or not a port number.
    """
    host, sep, port_text = text.strip().rpartition(":")
    _require(bool(sep) and port_text.isdigit(), f"{text!r} is not host:port")
    port = int(port_text)
    _require(0 <= port < 65536, f"{text!r}: port out of range")
    return HostPort(host=host.strip("[]"), port=port)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
