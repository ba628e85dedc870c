"""Data for the pipeline's integration tests, produced with confluent-kafka (librdkafka).

Every codec, idempotent batches, and transactions of two producers interleaved in the same
partitions, some committed and some aborted (flushed before the abort, so the aborted
batches really are in the log).
"""

from __future__ import annotations

import os
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
NUMBERED_VALUE = bytes(1000)
"""The value of every record :func:`produce_numbered` writes."""


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if topic in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} did not appear")


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if topic not in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} was not deleted")


def produce_numbered(bootstrap: str, topic: str, count: int, first: int) -> None:
    """``count`` plain records to partition 0, keyed by their number counted from ``first``
    (on an empty partition, each record's offset), so a reader can tell which it got."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, key=str(i).encode(), value=NUMBERED_VALUE, partition=0)
    assert producer.flush(60) == 0


def _producer(bootstrap: str, **extra: object) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 2,
        "batch.size": 8192,
        "enable.idempotence": False,
        **extra,
    }
    return Producer(config)


def produce_mixed(bootstrap: str, topic: str, partitions: int, *, records: int = 400) -> None:
    """Plain batches in every codec, idempotent batches, and interleaved transactions, with
    enough data after the transactions that they end up in closed segments."""
    _produce_plain(bootstrap, topic, partitions, records, CODECS[:2])
    _produce_transactions(bootstrap, topic, partitions)
    _produce_plain(bootstrap, topic, partitions, records, CODECS[2:])
    idempotent = _producer(bootstrap, **{"enable.idempotence": True, "compression.type": "lz4"})
    for i in range(records):
        idempotent.produce(topic, value=os.urandom(200), partition=i % partitions)
    idempotent.flush(30)
    tail = _producer(bootstrap)
    for i in range(partitions * 5):
        tail.produce(topic, value=b"tail", partition=i % partitions)
    tail.flush(30)


def _produce_plain(
    bootstrap: str, topic: str, partitions: int, records: int, codecs: tuple[str, ...]
) -> None:
    for codec in codecs:
        producer = _producer(bootstrap, **{"compression.type": codec})
        for i in range(records):
            value = os.urandom(200) + bytes([i % 256]) * 100
            producer.produce(topic, value=value, key=str(i).encode(), partition=i % partitions)
        producer.flush(30)


def _produce_transactions(bootstrap: str, topic: str, partitions: int) -> None:
    """Two transactional producers writing to the same partitions at once; in each round one
    commits and the other aborts."""
    first = _producer(
        bootstrap, **{"transactional.id": f"{topic}-tx-a", "enable.idempotence": True}
    )
    second = _producer(
        bootstrap,
        **{
            "transactional.id": f"{topic}-tx-b",
            "enable.idempotence": True,
            "compression.type": "zstd",
        },
    )
    first.init_transactions(30)
    second.init_transactions(30)
    for round_number in range(4):
        first.begin_transaction()
        second.begin_transaction()
        for i in range(40):
            first.produce(topic, value=b"a" * 150, partition=i % partitions)
            second.produce(topic, value=b"b" * 150, partition=(i + 1) % partitions)
            if i % 10 == 9:
                first.flush(30)
                second.flush(30)
        first.flush(30)
        second.flush(30)
        if round_number % 2:
            first.abort_transaction(30)
            second.commit_transaction(30)
        else:
            first.commit_transaction(30)
            second.abort_transaction(30)


def produce_timed(
    bootstrap: str, topic: str, *, groups: int, per_group: int, hours_ago: int
) -> list[int]:
    """``groups`` runs of records to partition 0, run ``k`` stamped ``hours_ago - k`` hours ago;
    returns the timestamps used."""
    now = int(time.time() * 1000)
    producer = _producer(bootstrap)
    stamps = []
    for group in range(groups):
        stamp = now - (hours_ago - group) * 3_600_000
        stamps.append(stamp)
        for _ in range(per_group):
            producer.produce(topic, value=os.urandom(100), partition=0, timestamp=stamp)
        producer.flush(30)
    return stamps
