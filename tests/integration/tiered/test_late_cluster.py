"""``tierproxy serve`` with the remote tier on, started before its Kafka cluster or losing it.

Operators start services in any order: the proxy must log that no broker answers yet and
retry (Kafka's exponential back-off), then serve once the cluster is up, instead of dying
with a traceback. A cluster that goes away under a running proxy must not stop it either:
once the broker is back, the proxy serves the remote tier again, including segments tiered
after the restart (its metadata consumer reconnected). Each test uses a broker of its own:
the shared ones must not be stopped under other tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import KAFKA_4, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.probe import api_versions
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings
from tests.integration.tiered.conftest import build_tiered_topic, proxy_settings
from tests.integration.tiered.support import (
    READ_UNCOMMITTED,
    Record,
    by_partition,
    consume_confluent,
    earliest_offsets,
    running,
    tier_topic,
)
from tests.integration.tiering.workload import NUMBERED_VALUE, produce_numbered

pytestmark = [pytest.mark.integration]


def test_serve_waits_for_a_cluster_that_starts_later(
    s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path / "kafka") as server:
        broker = server.start()
        server.stop()  # its port and data stay: the cluster is simply not up yet
        metadata_topic = f"__rlm-late-{uuid.uuid4().hex[:8]}"
        proxy = proxy_process(broker, tmp_path, storage_settings(s3, s3_bucket, metadata_topic))
        proxy.process.start()
        try:
            deadline = time.monotonic() + 60
            while "no broker at" not in proxy.process.log_path.read_text():
                assert proxy.process.running, proxy.process.log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, "the proxy never said it was waiting"
                time.sleep(0.2)
            server.start()
            proxy.process.wait_ready(
                lambda: bool(api_versions(proxy.host, proxy.port)), timeout_s=90
            )
            log = proxy.process.log_path.read_text()
            assert "Traceback" not in log, log[-3000:]
        finally:
            proxy.stop()


@pytest.mark.spark
def test_serve_outlives_a_broker_restart_and_serves_what_is_tiered_after_it(
    s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path / "kafka") as server:
        broker = server.start()
        tiered = build_tiered_topic(broker, s3, spark, s3_bucket, tmp_path / "spill")
        proxy = proxy_process(broker, tmp_path, proxy_settings(s3, tiered))
        with running(proxy):
            everything = tiered.expected[READ_UNCOMMITTED]
            ends = tiered.high_watermarks
            assert read_all(proxy.bootstrap, tiered.topic, ends) == everything

            with connected(proxy.bootstrap):
                server.stop()
                wait_for_log(proxy, 'reason="broker closed"')
            server.start()
            # Records the proxy can only serve once its metadata consumer has read their
            # segments: tiered, then deleted by the broker, after the restart.
            first = ends[0]
            produce_numbered(broker.bootstrap, tiered.topic, 100, first=first)
            asyncio.run(
                tier_topic(
                    broker,
                    s3,
                    spark,
                    topic=tiered.topic,
                    bucket=s3_bucket,
                    metadata_topic=tiered.metadata_topic,
                    spill=tmp_path / "spill",
                    **{"local.retention.ms": 1, "retention.ms": -1},
                )
            )
            assert earliest_offsets(broker.bootstrap, tiered.topic, 1)[0] > first
            more: list[Record] = [
                (0, first + i, str(first + i).encode(), NUMBERED_VALUE) for i in range(100)
            ]
            ends = {**ends, 0: first + 100}
            assert read_all(proxy.bootstrap, tiered.topic, ends) == by_partition(everything + more)
            assert proxy.process.running
        log = proxy.process.log_path.read_text()
        assert "Traceback" not in log, log[-3000:]


@contextlib.contextmanager
def connected(bootstrap: str) -> Iterator[None]:
    """A client connected through the proxy (librdkafka keeps its broker connections)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)
    yield
    del admin


def read_all(bootstrap: str, topic: str, ends: dict[int, int]) -> list[Record]:
    return by_partition(consume_confluent(bootstrap, topic, ends, timeout_s=90))


def wait_for_log(proxy: TierproxyServer, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in (log := proxy.process.log_path.read_text()):
        assert proxy.process.running, log[-2000:]
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{log[-2000:]}"
        time.sleep(0.2)
