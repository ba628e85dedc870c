"""SASL/PLAIN end to end through the proxy, against Apache Kafka with a SASL_PLAINTEXT listener.

Tansu has no SASL/PLAIN, so this runs only where the harness broker is Apache Kafka
(``KAFKA_HOME``): it starts a second Kafka from the same installation with a PLAINTEXT
listener (for the harness's readiness probe) and a SASL_PLAINTEXT one that the proxy fronts.
The proxy logs in itself only to discover the brokers; clients log in through it with their
own users, and a wrong password is refused by the broker, not by the proxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from proxy.embedded import BrokerInfo, KafkaBroker, free_port
from proxy.embedded.tierproxy import TierproxyServer
from tests.integration.proxy.conftest import start_proxy

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

USERS = {"tierproxy": "tierproxy-secret", "alice": "alice-secret"}


class SaslKafka(KafkaBroker):
    """The harness's KRaft broker plus a SASL_PLAINTEXT listener with the PLAIN mechanism."""

    sasl_port = 0

    @staticmethod
    def _properties(port: int, controller_port: int, data_dir: Path) -> str:
        settings = dict(
            line.split("=", 1)
            for line in KafkaBroker._properties(port, controller_port, data_dir).splitlines()
        )
        SaslKafka.sasl_port = free_port()
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{SaslKafka.sasl_port}"
        users = " ".join(f'user_{name}="{secret}"' for name, secret in USERS.items())
        settings.update(
            {
                "listeners": f"{settings['listeners']},{sasl}",
                "advertised.listeners": f"{settings['advertised.listeners']},{sasl}",
                "listener.security.protocol.map": (
                    f"{settings['listener.security.protocol.map']},SASL_PLAINTEXT:SASL_PLAINTEXT"
                ),
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="tierproxy" password="tierproxy-secret" {users};'
                ),
            }
        )
        return "".join(f"{key}={value}\n" for key, value in settings.items())


@pytest.fixture(scope="module")
def sasl_proxy(
    broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TierproxyServer]:
    if broker.kind != "kafka":
        pytest.skip("SASL/PLAIN needs Apache Kafka (KAFKA_HOME); Tansu has no SASL/PLAIN")
    kafka_home = Path(os.environ["KAFKA_HOME"])
    work = tmp_path_factory.mktemp("sasl-kafka")
    server = SaslKafka(kafka_home, work_dir=work)
    server.start()
    try:
        config = work / "sasl.toml"
        config.write_text(
            'upstream.sasl.mechanism = "PLAIN"\n'
            'upstream.sasl.username = "tierproxy"\n'
            'upstream.sasl.password = "tierproxy-secret"\n',
            encoding="utf-8",
        )
        sasl_broker = dataclasses.replace(
            server.info, bootstrap=f"127.0.0.1:{SaslKafka.sasl_port}", port=SaslKafka.sasl_port
        )
        info = start_proxy(sasl_broker, work, "--config", str(config))
        try:
            yield info
        finally:
            info.process.stop()
    finally:
        server.close()


def sasl_config(bootstrap: str, user: str, password: str) -> dict[str, str | int | float | bool]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def round_trip(bootstrap: str, user: str, password: str) -> list[bytes]:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer(sasl_config(bootstrap, user, password))
    for i in range(10):
        producer.produce(topic, value=b"secret %d" % i)
    if producer.flush(30):
        raise AssertionError("produce through the proxy with SASL did not finish")
    consumer = confluent_kafka.Consumer(
        {
            **sasl_config(bootstrap, user, password),
            "group.id": "sasl",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        values: list[bytes] = []
        for _ in range(60):
            for message in consumer.consume(num_messages=100, timeout=0.5):
                value = message.value()
                assert message.error() is None and isinstance(value, bytes)
                values.append(value)
            if len(values) >= 10:
                break
        return values
    finally:
        consumer.close()


async def test_sasl_plain_passes_through(sasl_proxy: TierproxyServer) -> None:
    values = await asyncio.to_thread(round_trip, sasl_proxy.bootstrap, "alice", "alice-secret")
    assert values == [b"secret %d" % i for i in range(10)]


def test_a_wrong_password_is_refused_by_the_broker(sasl_proxy: TierproxyServer) -> None:
    admin = AdminClient(sasl_config(sasl_proxy.bootstrap, "alice", "wrong"))
    with pytest.raises(confluent_kafka.KafkaException, match=r"(?i)auth"):
        admin.list_topics(timeout=10)
