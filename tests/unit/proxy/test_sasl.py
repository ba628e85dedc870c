"""SASL through the proxy: clients authenticate end to end, byte for byte; the proxy's own
discovery logs in with its configured PLAIN credentials. The broker is the scripted fake in
its SASL_PLAINTEXT mode (the integration test with Apache Kafka is in tests/integration)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator

import pytest

from protocol.frames import encode_frame
from protocol.headers import encode_request_header
from protocol.messages import ApiKey, decode_response, encode_request, request_class
from proxy.config import ProxyConfig
from proxy.discovery import DiscoveryError
from proxy.server import ProxyServer
from storage.kafka_security import KafkaSecurityConfig
from tests.fakes.frame_client import FrameClient
from tests.fakes.wire_broker import WireBroker, raw_request, raw_response_body
from tests.unit.proxy.conftest import ProxyFactory

USERS = {"proxy": "proxy-secret", "alice": "alice-secret"}


@pytest.fixture
async def sasl_broker() -> AsyncIterator[WireBroker]:
    broker = await WireBroker(sasl_users=USERS).start()
    yield broker
    await broker.close()


PROXY_LOGIN = KafkaSecurityConfig(
    security_protocol="SASL_PLAINTEXT",
    sasl_mechanism="PLAIN",
    sasl_username="proxy",
    sasl_password="proxy-secret",
)


def login_frames(user: str, password: str) -> tuple[bytes, bytes]:
    handshake = encode_request_header(ApiKey.SASL_HANDSHAKE, 1, 1, "c") + encode_request(
        request_class(ApiKey.SASL_HANDSHAKE, 1)(mechanism="PLAIN")
    )
    message = b"\0" + user.encode() + b"\0" + password.encode()
    authenticate = encode_request_header(ApiKey.SASL_AUTHENTICATE, 1, 2, "c") + encode_request(
        request_class(ApiKey.SASL_AUTHENTICATE, 1)(auth_bytes=message)
    )
    return encode_frame(handshake), encode_frame(authenticate)


async def test_clients_log_in_end_to_end_through_the_proxy(
    sasl_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(
        sasl_broker,
        security=PROXY_LOGIN,
    )
    assert sasl_broker.logins == ["proxy"]  # discovery's own login
    client = await FrameClient.connect(proxy)
    handshake, authenticate = login_frames("alice", "alice-secret")
    await client.send(handshake + authenticate + raw_request(3, b"as alice"))
    handshaken = decode_response(ApiKey.SASL_HANDSHAKE, 1, (await client.receive())[4:])
    assert handshaken.mechanisms == ("PLAIN",)
    logged_in = decode_response(ApiKey.SASL_AUTHENTICATE, 1, (await client.receive())[4:])
    assert logged_in.error_code == 0
    assert raw_response_body(await client.receive()) == (3, b"echo:as alice")
    # The broker saw alice's own login on the client's upstream connection, not the proxy's.
    assert sasl_broker.logins == ["proxy", "alice"]
    await client.close()


async def test_a_client_that_skips_sasl_is_closed_by_the_broker_and_the_proxy(
    sasl_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(
        sasl_broker,
        security=PROXY_LOGIN,
    )
    client = await FrameClient.connect(proxy)
    await client.send(raw_request(1, b"no login"))
    assert await client.closed()


async def test_a_wrong_password_is_the_clients_answer_to_read(
    sasl_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(
        sasl_broker,
        security=PROXY_LOGIN,
    )
    client = await FrameClient.connect(proxy)
    handshake, authenticate = login_frames("alice", "wrong")
    await client.send(handshake + authenticate)
    await client.receive()
    answer = await client.receive()
    assert struct.unpack_from(">i", answer)[0] == 2
    assert decode_response(ApiKey.SASL_AUTHENTICATE, 1, answer[4:]).error_code != 0
    await client.close()


async def test_discovery_needs_credentials_on_a_sasl_listener(sasl_broker: WireBroker) -> None:
    config = ProxyConfig(bootstrap_servers=f"127.0.0.1:{sasl_broker.port}", listeners="127.0.0.1:0")
    with pytest.raises(DiscoveryError):
        await ProxyServer(config).start()
    wrong = dataclasses.replace(PROXY_LOGIN, sasl_password="nope")
    with pytest.raises(DiscoveryError, match="refused the SASL/PLAIN login as proxy"):
        await ProxyServer(config, security=wrong).start()
