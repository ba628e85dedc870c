"""Proxy settings: TOML with Kafka names, flags on top, validation with clear messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.config import (
    BrokerMapEntry,
    HostPort,
    ProxyConfig,
    bootstrap_addresses,
    parse_host_port,
    parse_listener,
)
from proxy.settings import load_settings
from storage.config import ConfigError, from_settings


def test_defaults_are_kafkas() -> None:
    config = ProxyConfig()
    assert config.socket_request_max_bytes == 104857600
    assert config.connections_max_idle_ms == 600_000
    assert config.listener.security_protocol == "PLAINTEXT"
    assert not config.listener.tls


def test_timeouts_turn_off_with_minus_one_as_in_kafka() -> None:
    config = ProxyConfig(connections_max_idle_ms=-1, request_receive_timeout_ms=-1)
    assert (config.connections_max_idle_ms, config.request_receive_timeout_ms) == (-1, -1)


def test_toml_file_with_kafka_names_and_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "tierproxy.toml"
    path.write_text(
        """
bootstrap.servers = "kafka-1:9092,kafka-2:9092"
listeners = "SSL://0.0.0.0:9192"
advertised.listeners = "proxy.example.com:19192"
socket.request.max.bytes = 1048576
ssl.certificate.location = "/etc/proxy.pem"

[[broker.map]]
node.id = 7
listener = "0.0.0.0:29092"
advertised.listener = "proxy-7.example.com:29092"
""",
        encoding="utf-8",
    )
    config = load_settings(path, {"metrics.port": 9400}).proxy
    assert bootstrap_addresses(config) == (
        HostPort(host="kafka-1", port=9092),
        HostPort(host="kafka-2", port=9092),
    )
    assert config.listener.tls
    assert config.advertised_base() == HostPort(host="proxy.example.com", port=19192)
    assert config.socket_request_max_bytes == 1048576
    assert config.metrics_port == 9400
    assert config.explicit_brokers() == (
        BrokerMapEntry(
            node_id=7,
            listener=HostPort(host="0.0.0.0", port=29092),
            advertised=HostPort(host="proxy-7.example.com", port=29092),
        ),
    )


def test_unknown_keys_are_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("socket.request.max.byte = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape("did you mean 'socket.request.max.bytes'")):
        load_settings(path)


def test_unreadable_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("listeners = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(path)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"socket_request_max_bytes": 0}, "socket.request.max.bytes"),
        ({"buffer_low_water_bytes": 10, "buffer_high_water_bytes": 5}, "low.water"),
        ({"log_format": "xml"}, "log.format"),
        ({"connections_max_idle_ms": 0}, "connections.max.idle.ms"),
        ({"request_receive_timeout_ms": -5}, "request.receive.timeout.ms"),
        ({"listeners": "HTTP://h:1"}, "scheme"),
        ({"listeners": "SSL://h:1"}, "ssl.certificate.location"),
        ({"bootstrap_servers": " , "}, "at least one broker"),
        ({"broker_map": ({"node.id": 1},)}, "need node.id"),
        (
            {"broker_map": ({"node.id": 1, "listener": "a:1"}, {"node.id": 1, "listener": "a:2"})},
            "appears twice",
        ),
    ],
)
def test_invalid_settings_say_which(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ProxyConfig(**settings)  # type: ignore[arg-type]


def test_wrong_types_are_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("metrics.port")):
        from_settings(ProxyConfig, {"metrics.port": "9400"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("h:1", ("PLAINTEXT", "h", 1)),
        ("sasl_ssl://h:2", ("SASL_SSL", "h", 2)),
        ("PLAINTEXT://[::1]:3", ("PLAINTEXT", "::1", 3)),
    ],
)
def test_listeners_parse_like_kafkas(text: str, expected: tuple[str, str, int]) -> None:
    listener = parse_listener(text)
    assert (listener.security_protocol, listener.address.host, listener.address.port) == expected


def test_host_port_round_trips_ipv6() -> None:
    assert str(parse_host_port("[::1]:9092")) == "[::1]:9092"
    with pytest.raises(ConfigError):
        parse_host_port("no-port")
    with pytest.raises(ConfigError):
        parse_host_port("h:70000")


def test_advertised_host_defaults_to_the_listener_or_this_machine() -> None:
    assert ProxyConfig(listeners="10.0.0.1:9192").advertised_base() == HostPort(
        host="10.0.0.1", port=9192
    )
    assert ProxyConfig(listeners="0.0.0.0:9192").advertised_base().host not in ("", "0.0.0.0")
    assert ProxyConfig(
        listeners="0.0.0.0:9192", advertised_listeners="proxy"
    ).advertised_base() == HostPort(host="proxy", port=9192)
