"""``check_cluster_login``: TLS refusals stop ``serve``, ``tier`` and ``status`` at once.

The broker is the unit tests' TLS fake, presenting certificates from the test CA
(:mod:`tests.certificates`); tierproxy's own client dials it as 127.0.0.1.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.embedded.ports import free_port
from storage.config import ConfigError
from storage.kafka_security import KafkaSecurityConfig
from storage.startup import check_cluster_login
from tests.certificates import KeyPair, Pki
from tests.fakes.wire_broker import WireBroker

LOG = logging.getLogger("tests.startup_login")


async def tls_broker(pair: KeyPair) -> WireBroker:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.certificate, pair.key)
    return await WireBroker().start(tls=context)


@pytest.fixture
async def broker(pki: Pki) -> AsyncIterator[WireBroker]:
    server = await tls_broker(pki.broker)
    yield server
    await server.close()


@pytest.fixture
async def mismatched(pki: Pki) -> AsyncIterator[WireBroker]:
    server = await tls_broker(pki.mismatched)
    yield server
    await server.close()


def tls(ca: Path, **more: str) -> KafkaSecurityConfig:
    return KafkaSecurityConfig(security_protocol="SSL", ssl_ca_location=str(ca), **more)


async def test_a_broker_certificate_from_the_configured_ca_passes_and_says_how(
    broker: WireBroker, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)

    await check_cluster_login(f"127.0.0.1:{broker.port}", tls(pki.ca), log=LOG)

    assert caplog.messages == [f"connected to the cluster at 127.0.0.1:{broker.port}: SSL"]


async def test_a_certificate_for_another_host_is_refused_naming_the_names_to_fix(
    mismatched: WireBroker, pki: Pki
) -> None:
    with pytest.raises(ConfigError) as refused:
        await check_cluster_login(f"127.0.0.1:{mismatched.port}", tls(pki.ca), log=LOG)

    message = str(refused.value)
    assert message.startswith(
        f"TLS to 127.0.0.1:{mismatched.port}: IP address mismatch, certificate is not valid "
        "for '127.0.0.1'"
    )
    assert "subject alternative names" in message
    assert "\n" not in message


async def test_without_endpoint_identification_the_host_is_not_checked(
    mismatched: WireBroker, pki: Pki
) -> None:
    """``upstream.ssl.endpoint.identification.algorithm = ""``, as in Kafka: CA only."""
    config = tls(pki.ca, ssl_endpoint_identification_algorithm="")

    await check_cluster_login(f"127.0.0.1:{mismatched.port}", config, log=LOG)


async def test_a_certificate_from_another_ca_is_refused_naming_the_ca_setting(
    broker: WireBroker, pki: Pki
) -> None:
    with pytest.raises(ConfigError) as refused:
        await check_cluster_login(f"127.0.0.1:{broker.port}", tls(pki.stranger_ca), log=LOG)

    assert str(refused.value) == (
        f"TLS to 127.0.0.1:{broker.port}: self-signed certificate in certificate chain (check "
        "that upstream.ssl.ca.location holds the CA that signed the brokers' certificates)"
    )


async def test_a_cluster_that_does_not_answer_yet_is_left_to_the_retries_after() -> None:
    await check_cluster_login(f"127.0.0.1:{free_port()}", KafkaSecurityConfig(), log=LOG)
