"""Remote-fetch quotas by user for clients that authenticate with a TLS certificate.

``tierproxy serve`` listens on SSL with ``ssl.client.auth = required`` in front of Apache
Kafka, over a topic whose older data only the remote tier holds. Two clients (librdkafka)
read it with certificates from the tests' CA: ``CN=Alice,OU=eng,O=Example``, which the
``ssl.principal.mapping.rules`` map to ``alice``, and ``CN=bob,O=Other``, which only
``DEFAULT`` maps (the whole DN). Each user has a quota of 1000 bytes per second in
``remote.fetch.client.quotas``, so each is throttled under its own principal, as the proxy's
metrics show (per user and client id).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import TierproxyServer, write_config
from tests.certificates import Pki
from tests.conditions import wait_until
from tests.integration.tiered.conftest import proxy_settings
from tests.integration.tiered.support import TieredTopic, client_throttle_seconds

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # the tiered topic is made on Spark

QUOTA = 1000
"""Bytes per second of each user's remote fetches."""
RULES = "RULE:^CN=([^,]*),OU=eng,.*$/$1/L,DEFAULT"
PRINCIPALS = {"alice": "User:alice", "bob": "User:CN=bob,O=Other"}


@pytest.fixture
def proxy(
    broker: BrokerInfo, s3: S3Info, tiered_topic: TieredTopic, pki: Pki, tmp_path: Path
) -> Iterator[TierproxyServer]:
    config = write_config(
        tmp_path / "serve.toml",
        {
            **proxy_settings(s3, tiered_topic),
            "remote.log.storage.system.enable": True,
            "shutdown.timeout.ms": 2000,
            "ssl.certificate.location": str(pki.proxy.certificate),
            "ssl.key.location": str(pki.proxy.key),
            "ssl.client.auth": "required",
            "ssl.ca.location": str(pki.ca),
            "ssl.principal.mapping.rules": RULES,
            "remote.fetch.client.quotas": [
                {"user": principal.removeprefix("User:"), "bytes.per.second": QUOTA}
                for principal in PRINCIPALS.values()
            ],
        },
    )
    probe = ssl.create_default_context(cafile=str(pki.ca))
    alice = pki.clients["alice"]
    probe.load_cert_chain(str(alice.certificate), str(alice.key))
    server = TierproxyServer(
        config=config,
        log_path=tmp_path / "serve.log",
        bootstrap=broker.bootstrap,
        listener="SSL",
        client_tls=probe,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def read_until_throttled(proxy: TierproxyServer, pki: Pki, name: str, topic: str) -> None:
    """Read ``topic`` from its first offset with ``name``'s certificate until the proxy has
    throttled that client's principal."""
    client = pki.clients[name]
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(client.certificate),
            "ssl.key.location": str(client.key),
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "client.id": f"{name}-app",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def throttled() -> bool:
            consumer.poll(0.2)
            return client_throttle_seconds(proxy).get(PRINCIPALS[name], 0.0) > 0

        wait_until(throttled, timeout_s=120, what=f"a throttle of {PRINCIPALS[name]}")
    finally:
        consumer.close()


def test_certificate_users_are_throttled_under_their_mapped_principals(
    proxy: TierproxyServer, pki: Pki, tiered_topic: TieredTopic
) -> None:
    read_until_throttled(proxy, pki, "alice", tiered_topic.topic)
    read_until_throttled(proxy, pki, "bob", tiered_topic.topic)

    throttled = client_throttle_seconds(proxy)
    assert set(throttled) == set(PRINCIPALS.values()), throttled
