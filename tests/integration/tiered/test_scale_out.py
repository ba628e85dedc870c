"""Several proxies behind one bootstrap, against Apache Kafka, on the tiered topic (its start
served from the remote tier, the rest by the broker):

- two ``tierproxy serve`` instances, each advertising its own address; a Java
  ``KafkaConsumer`` and a librdkafka consumer bootstrap to both. The instance a consumer
  reads through is SIGKILLed (with its workers) in the middle of the read: the consumer
  re-bootstraps through the other (Kafka's ``metadata.recovery.strategy=rebootstrap``, the
  default of Kafka 4's Java client and of librdkafka) and every record arrives, none
  skipped;
- rolling restart: while a Java producer (Kafka's defaults: acks=all, retries, idempotence)
  and four librdkafka consumers run through both instances, each instance in turn gets
  SIGTERM (it drains: readiness false, listeners closed, in-flight requests answered, each
  connection half-closed after its last response) and is started again. The producer sees
  no error, and every consumer reads every record exactly once;
- an instance with two workers serves the tiered topic like one process.
"""

from __future__ import annotations

import hashlib
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.tierproxy import TierproxyServer, proxy_process
from tests.conditions import wait_until
from tests.integration.tiered.conftest import MakeProxy, proxy_settings
from tests.integration.tiered.support import (
    READ_UNCOMMITTED,
    Record,
    TieredTopic,
    by_partition,
    consume_confluent,
    running,
)
from tests.integration.tiering.workload import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JAVA = Path(__file__).parents[2] / "java"
PRODUCER_PARTITIONS = 4
CONSUMERS = 4


def java_digest(key: bytes | None, value: bytes | None) -> str:
    """The digest ``RecordDigest.java`` prints for a record without headers."""
    sha = hashlib.sha256()
    for field in (key, value):
        sha.update(struct.pack(">i", -1 if field is None else len(field)))
        sha.update(field or b"")
    return sha.hexdigest()


class JavaProgram:
    """A single-file Java program of ``tests/java`` run on the broker's jars, its output
    lines collected as they come."""

    def __init__(self, distribution: KafkaDistribution, source: str, *args: str) -> None:
        self.lines: list[str] = []
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the program
        self._process = subprocess.Popen(
            distribution.java(str(JAVA / source), *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))

    def kill(self) -> None:
        """Kill it and close its pipes (a test that failed before :meth:`finish`)."""
        self._process.kill()
        self._process.wait()
        self._reader.join(10)
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()
        self._stderr.close()

    def stderr_tail(self, size: int = 4000) -> str:
        """The last ``size`` bytes the program wrote to its stderr (Kafka's client log)."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-size:]

    def finish(self, timeout_s: float = 180) -> list[str]:
        """Close its stdin (a producer's signal to stop), wait for it, and return its lines."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout_s)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._reader.join(10)
            assert self._process.stdout is not None
            self._process.stdout.close()
            self._stderr.close()
        return list(self.lines)


def fetches(proxy: TierproxyServer) -> float:
    return proxy.metric("tierproxy_requests_total", api="fetch")


def in_use(proxies: Sequence[TierproxyServer], before: Sequence[float]) -> TierproxyServer:
    """The instance that served the most Fetches since ``before``."""
    grown = [fetches(proxy) - base for proxy, base in zip(proxies, before, strict=True)]
    assert max(grown) > 0, grown
    return proxies[grown.index(max(grown))]


@pytest.fixture
def pair(make_proxy: MakeProxy) -> tuple[TierproxyServer, TierproxyServer]:
    return make_proxy(), make_proxy()


def test_consumers_survive_the_sigkill_of_their_proxy_through_the_other(
    pair: tuple[TierproxyServer, TierproxyServer],
    tiered_topic: TieredTopic,
    kafka_distribution: KafkaDistribution,
) -> None:
    bootstrap = ",".join(proxy.bootstrap for proxy in pair)
    expected = tiered_topic.expected[READ_UNCOMMITTED]
    assert any(offset < tiered_topic.broker_log_starts[p] for p, offset, _k, _v in expected)

    # Kafka's Java consumer, slowed down (1 KiB fetches, a pause after each poll).
    before = [fetches(proxy) for proxy in pair]
    java = JavaProgram(
        kafka_distribution,
        "RecordDigest.java",
        bootstrap,
        tiered_topic.topic,
        "0",
        READ_UNCOMMITTED,
        "assign",
        "1024",
        "300",
    )
    try:
        wait_until(lambda: len(java.lines) >= 50, timeout_s=120, what="the Java consumer reads")
        victim = in_use(pair, before)
        read_before_kill = len(java.lines)
        victim.kill()
    except BaseException as err:
        err.add_note(f"the Java consumer's log:\n{java.stderr_tail()}")
        for proxy in pair:
            err.add_note(f"proxy {proxy.bootstrap}:\n{proxy.process.log_tail()}")
        java.kill()
        raise
    lines = java.finish()
    records = [line.split() for line in lines if len(line.split()) == 3]
    assert read_before_kill < len(records), "the Java consumer finished before the kill"
    assert sorted((int(p), int(o), d) for p, o, d in records) == [
        (p, o, java_digest(k, v)) for p, o, k, v in expected
    ]
    victim.start()

    # librdkafka: read a third, kill the instance it reads through, read the rest.
    before = [fetches(proxy) for proxy in pair]
    victims: list[TierproxyServer] = []

    def kill_after_a_third(records: list[Record]) -> None:
        if not victims and len(records) >= len(expected) // 3:
            victims.append(in_use(pair, before))
            victims[0].kill()

    read = consume_confluent(
        bootstrap,
        tiered_topic.topic,
        tiered_topic.high_watermarks,
        timeout_s=180,
        extra={
            # small fetches, and little read ahead of the application
            "max.partition.fetch.bytes": 1024,
            "fetch.max.bytes": 4096,
            "message.max.bytes": 4096,
            "queued.min.messages": 1,
            "queued.max.messages.kbytes": 1,
        },
        on_record=kill_after_a_third,
    )
    assert victims, "the librdkafka consumer finished before the kill"
    assert by_partition(read) == expected


def test_rolling_restart_under_producer_and_consumers(
    pair: tuple[TierproxyServer, TierproxyServer],
    broker: BrokerInfo,
    kafka_distribution: KafkaDistribution,
) -> None:
    topic = f"rolling-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PRODUCER_PARTITIONS)
    bootstrap = ",".join(proxy.bootstrap for proxy in pair)
    producer = JavaProgram(
        kafka_distribution, "SteadyProducer.java", bootstrap, topic, str(PRODUCER_PARTITIONS), "200"
    )
    readers = [TailReader(bootstrap, topic) for _ in range(CONSUMERS)]
    try:
        wait_until(
            lambda: all(reader.count >= 200 for reader in readers),
            timeout_s=120,
            what="every consumer reads",
        )
        for proxy in pair:
            proxy.stop()  # SIGTERM: a drain
            proxy.start()
            wait_until(reading_on(readers, 200), timeout_s=120, what="every consumer reads on")
        lines = producer.finish()
    except BaseException:
        producer.kill()
        for reader in readers:
            reader.stop_at(None)
        raise
    summary = lines[-1] if lines else ""
    assert summary.startswith("sent ") and summary.endswith(" errors 0"), lines[-6:]
    sent = int(summary.split()[1])
    assert int(summary.split()[3]) == sent, summary
    for reader in readers:
        reader.stop_at(sent)
    for reader in readers:
        values = reader.join()
        assert sorted(values) == list(range(sent)), f"{len(values)} read of {sent}"
        assert len(values) == sent  # no record twice


def reading_on(readers: Sequence[TailReader], more: int) -> Callable[[], bool]:
    """Whether every reader has read ``more`` values since this was called."""
    before = [reader.count for reader in readers]
    return lambda: all(r.count >= b + more for r, b in zip(readers, before, strict=True))


class TailReader:
    """A librdkafka consumer in a thread reading every partition from the start, keeping
    every value it reads, until it has read the values below ``stop_at``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self.values: list[int] = []
        self._target: int | None = -1
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        return len(self.values)

    def stop_at(self, target: int | None) -> None:
        """Read until ``target`` values are in (None: stop now)."""
        with self._lock:
            self._target = target

    def join(self, timeout_s: float = 180) -> list[int]:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the consumer did not finish"
        if self._error is not None:
            raise self._error
        return self.values

    def _done(self) -> bool:
        with self._lock:
            target = self._target
        return target is None or (target >= 0 and len(set(self.values)) >= target)

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": f"tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 0,
                "fetch.error.backoff.ms": 100,
            }
        )
        try:
            consumer.assign(
                [
                    TopicPartition(self._topic, p, OFFSET_BEGINNING)
                    for p in range(PRODUCER_PARTITIONS)
                ]
            )
            deadline = time.monotonic() + 600
            while not self._done() and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    assert error.retriable(), error
                    continue
                self.values.append(int(message.value() or b"-1"))
        except BaseException as err:  # reported by join
            self._error = err
        finally:
            consumer.close()


def test_an_instance_with_two_workers_serves_the_tiered_topic(
    broker: BrokerInfo, s3: S3Info, tiered_topic: TieredTopic, tmp_path: Path
) -> None:
    proxy = proxy_process(broker, tmp_path, proxy_settings(s3, tiered_topic), workers=2)
    with running(proxy):
        wait_until(
            lambda: proxy.health("/readyz")[0] == 200, timeout_s=120, what="both workers ready"
        )
        checks = proxy.health("/readyz")[1]["workers"]["1"]["checks"]
        assert {"remote_metadata", "remote_storage"} <= set(checks)
        for _ in range(2):  # two consumers: most likely one on each worker
            read = consume_confluent(
                proxy.bootstrap, tiered_topic.topic, tiered_topic.high_watermarks
            )
            assert by_partition(read) == tiered_topic.expected[READ_UNCOMMITTED]
        log = proxy.process.log_path.read_text(encoding="utf-8")
        assert "worker=0" in log and "worker=1" in log
