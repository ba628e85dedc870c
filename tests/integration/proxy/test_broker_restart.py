"""A broker restart behind a running proxy: the proxy closes the affected client connections
with a log line, stays up, and serves clients again as soon as the broker is back.

Uses a broker of its own (the shared ones must not be restarted under other tests): Apache
Kafka restarts on the same port with its data, so the records from before are still there;
Tansu keeps records in memory, so its topic is created again after the restart.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from proxy.embedded import (
    KAFKA_3,
    KAFKA_4,
    BrokerChoice,
    KafkaBroker,
    TansuBroker,
    create_topic,
    ensure_jars,
    free_port,
)
from tests.conditions import GENEROUS_S
from tests.integration.proxy.conftest import start_proxy

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka", "kafka3", "tansu")]

_TOPIC = "restart-me"


async def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(_TOPIC, value, partition=0)
    finally:
        await producer.stop()


async def _consume(bootstrap: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(_TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        values: list[bytes] = []
        while len(values) < count:
            batches = await consumer.getmany(partition, timeout_ms=10_000)
            assert batches, f"only {len(values)} of {count} records came back"
            values += [m.value for m in batches[partition] if m.value is not None]
        return values
    finally:
        await consumer.stop()


def _wait_for_log(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n{path.read_text()[-2000:]}")


def own_broker(kind: BrokerChoice, work_dir: Path) -> KafkaBroker | TansuBroker:
    if kind == "tansu":
        return TansuBroker(port=free_port(), work_dir=work_dir)
    return KafkaBroker(ensure_jars(KAFKA_4 if kind == "kafka" else KAFKA_3), work_dir=work_dir)


async def test_the_proxy_outlives_a_broker_restart(
    broker_kind: BrokerChoice, tmp_path: Path
) -> None:
    broker = own_broker(broker_kind, tmp_path / "broker")
    info = broker.start()
    proxy = start_proxy(info, tmp_path)
    try:
        await create_topic(info.bootstrap, _TOPIC, partitions=1)
        before = [f"before-{i}".encode() for i in range(50)]
        await _produce(proxy.bootstrap, before)
        assert await _consume(proxy.bootstrap, 50) == before

        # A client connected through the proxy while the broker goes away.
        idle = AIOKafkaConsumer(bootstrap_servers=proxy.bootstrap)
        await idle.start()
        try:
            broker.stop()
            _wait_for_log(proxy.process.log_path, "broker closed", timeout_s=GENEROUS_S)
            assert proxy.process.running

            broker.start()
            kept = before if isinstance(broker, KafkaBroker) else []
            if not kept:
                await create_topic(info.bootstrap, _TOPIC, partitions=1)
            after = [f"after-{i}".encode() for i in range(50)]
            await _produce(proxy.bootstrap, after)
            assert await _consume(proxy.bootstrap, len(kept) + 50) == kept + after
            assert proxy.process.running
        finally:
            await idle.stop()
    finally:
        proxy.stop()
        broker.close()
