"""SASL/PLAIN end to end through the proxy, against Apache Kafka with a SASL_PLAINTEXT listener.

A second Kafka from the same jars, with a PLAINTEXT listener (for the harness's readiness
probe) and a SASL_PLAINTEXT one that the proxy fronts. The proxy logs in itself only to
discover the brokers; clients log in through it with their own users, and a wrong password is
refused by the broker, not by the proxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from proxy.embedded import KAFKA_4, KafkaBroker, ensure_jars
from proxy.embedded.tierproxy import TierproxyServer
from tests.integration.proxy.conftest import start_proxy

pytestmark = [pytest.mark.integration]

USERS = {"tierproxy": "tierproxy-secret", "alice": "alice-secret"}


def sasl_properties() -> dict[str, str]:
    users = " ".join(f'user_{name}="{secret}"' for name, secret in USERS.items())
    return {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="tierproxy" password="tierproxy-secret" {users};'
        ),
    }


@pytest.fixture(scope="module")
def sasl_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TierproxyServer]:
    work = tmp_path_factory.mktemp("sasl-kafka")
    with KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=work / "kafka",
        properties=sasl_properties(),
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
    ) as server:
        info = server.start()
        config = work / "sasl.toml"
        config.write_text(
            'upstream.security.protocol = "SASL_PLAINTEXT"\n'
            'upstream.sasl.mechanism = "PLAIN"\n'
            'upstream.sasl.username = "tierproxy"\n'
            'upstream.sasl.password = "tierproxy-secret"\n',
            encoding="utf-8",
        )
        sasl_bootstrap = server.listener_bootstrap("SASL_PLAINTEXT")
        _host, port = sasl_bootstrap.rsplit(":", 1)
        sasl_broker = dataclasses.replace(info, bootstrap=sasl_bootstrap, port=int(port))
        proxy = start_proxy(sasl_broker, work, "--config", str(config))
        try:
            yield proxy
        finally:
            proxy.process.stop()


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


def authentication_errors(bootstrap: str, user: str, password: str) -> list[str]:
    """What librdkafka reports through ``error_cb`` when a client logs in with these.

    librdkafka hands a SASL refusal to the application as an ``_AUTHENTICATION`` error with
    the broker's own message; the request that was waiting (here Metadata) then fails with a
    generic transport error, through the proxy and directly alike.
    """
    errors: list[str] = []

    def on_error(error: confluent_kafka.KafkaError) -> None:
        if error.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            errors.append(error.str())

    config: dict[str, Any] = {**sasl_config(bootstrap, user, password), "error_cb": on_error}
    admin = AdminClient(config)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=10)
    for _ in range(20):  # callbacks are served by poll()
        if errors:
            break
        admin.poll(0.5)
    return errors


def test_a_wrong_password_is_refused_by_the_broker(sasl_proxy: TierproxyServer) -> None:
    errors = authentication_errors(sasl_proxy.bootstrap, "alice", "wrong")
    assert errors, "no authentication error reached the client"
    assert all("Invalid username or password" in text for text in errors), errors


def test_the_audit_log_names_the_principal_behind_each_client(
    sasl_proxy: TierproxyServer,
) -> None:
    """The broker logs every client as the proxy; the proxy's audit line says who it was."""
    round_trip(sasl_proxy.bootstrap, "alice", "alice-secret")
    log = sasl_proxy.process.log_path.read_text(encoding="utf-8")
    lines = [
        line
        for line in log.splitlines()
        if "event=connection.principal" in line and "principal=User:alice" in line
    ]
    assert lines, log[-3000:]
    connection = re.search(r"conn=(\d+) client=(127\.0\.0\.1:\d+)", lines[0])
    assert connection is not None, lines[0]
    conn, client = connection.groups()
    opened = [
        line
        for line in log.splitlines()
        if "event=connection.audit" in line and f"conn={conn} " in line
    ]
    assert opened and f"client={client}" in opened[0], opened
    assert "upstream_local=127.0.0.1:" in opened[0]
