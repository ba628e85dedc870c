"""The read path and the pipeline over every backend, stored as is, compressed and encrypted.

For each combination below, a topic of mixed data (compressible records first, then every
codec, committed and aborted transactions, idempotent batches) is tiered by the real
pipeline on Apache Kafka into a fresh bucket, container or directory (the local directory,
SeaweedFS, fake-gcs-server, Azurite), after which the broker deletes the tiered range. Then:

- ``tierproxy serve`` answers a consumer (librdkafka) every record at both isolation levels
  and offsetsForTimes as the broker did before the deletion: the remote tier serves it all;
- the Spark data source reads the whole history, equal to that consumer's read.

Combinations (a representative subset, to keep the suite within minutes; every backend is
read in the most demanding mode, every mode on the cheapest backend):
local x {compressed, encrypted, both}; S3 x both; GCS x {as is, both}; Azure x {as is, both}.
The S3 backend as is is the rest of the tiered suite's.

On the local directory with both, a damaged chunk gives KAFKA_STORAGE_ERROR (never records),
logged with its object key and counted in the proxy's metrics, and reads again once the
object is repaired; a proxy without the segments' key gives KAFKA_STORAGE_ERROR with a log
line naming the key id, counted too. ``tierproxy status`` shows a compressed tier's bytes
in storage below the bytes the broker had. Segments
without a manifest (the earlier format: a local tier stored as is, its manifests removed)
are served as before.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from protocol.errors import KafkaError
from proxy.embedded import BrokerInfo, S3Info, create_bucket, delete_bucket
from proxy.embedded.object_stores import Azurite, FakeGcs
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, write_config
from storage.rsm.manifest import decode_manifest
from storage.spark_source import register
from tests.conditions import wait_until
from tests.conftest import BrokerPool
from tests.integration.spark_source.conftest import comparable, consume_rows
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    by_partition,
    consume_confluent,
    earliest_offsets,
    fetch_once,
    high_watermarks,
    offsets_for_times,
    running,
    status_rows,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 2
KEY_ID = "it-2026"
COMBINATIONS = [
    ("local", "compressed"),
    ("local", "encrypted"),
    ("local", "both"),
    ("s3", "both"),
    ("gcs", "plain"),
    ("gcs", "both"),
    ("azure", "plain"),
    ("azure", "both"),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredTopic:
    """A topic tiered into one backend in one mode, then deleted by the broker below it."""

    topic: str
    storage: dict[str, Any]
    """The remote tier's settings (backend, mode, key file and metadata topic)."""
    local_dir: Path | None
    high_watermarks: dict[int, int]
    broker_log_starts: dict[int, int]
    expected: dict[str, list[Record]]
    offsets_for_times: dict[int, list[tuple[int, int]]]
    rows: list[tuple[Any, ...]]
    """What Spark's data source must give: a direct consumer's read, as rows."""


def produce_compressible(bootstrap: str, topic: str, records: int) -> None:
    """Uncompressed batches of text that zstd shrinks, ahead of the mixed workload."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none"}
    )
    for i in range(records):
        value = (f"order {i % 37} shipped to warehouse {i % 5}; " * 20).encode()
        producer.produce(topic, key=b"k%d" % i, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class StoredTopics:
    """One tiered topic per combination, built on first use, removed at the end."""

    def __init__(self, brokers: BrokerPool, spark: Any, work: pytest.TempPathFactory) -> None:
        self._brokers, self._spark, self._work = brokers, spark, work
        self._built: dict[tuple[str, str], StoredTopic] = {}
        self._cleanups: list[Any] = []
        keys = work.mktemp("keys") / "keys"
        keys.write_text(f"{KEY_ID}:{base64.b64encode(os.urandom(32)).decode()}\n")
        self.keys_file = keys

    def get(self, request: pytest.FixtureRequest, backend: str, mode: str) -> StoredTopic:
        if (backend, mode) not in self._built:
            self._built[backend, mode] = self._build(request, backend, mode)
        return self._built[backend, mode]

    def _backend(
        self, request: pytest.FixtureRequest, backend: str
    ) -> tuple[dict[str, Any], Path | None]:
        name = f"tiered-{uuid.uuid4().hex[:12]}"
        if backend == "local":
            root = self._work.mktemp("remote")
            return {
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(root),
            }, root
        if backend == "gcs":
            gcs: FakeGcs = request.getfixturevalue("_fake_gcs_server")
            gcs.create_bucket(name)
            return gcs.info.settings(name), None
        if backend == "azure":
            azure: Azurite = request.getfixturevalue("_azurite_server")
            azure.create_container(name)
            self._cleanups.append(lambda: azure.delete_container(name))
            return azure.info.settings(name), None
        s3: S3Info = request.getfixturevalue("s3")
        create_bucket(s3, name)
        self._cleanups.append(lambda: delete_bucket(s3, name))
        return {"remote.log.storage.s3.bucket": name}, None

    def _build(self, request: pytest.FixtureRequest, backend: str, mode: str) -> StoredTopic:
        broker: BrokerInfo = self._brokers.get("kafka")
        s3: S3Info = request.getfixturevalue("s3")
        topic = f"backend-{backend}-{mode}-{uuid.uuid4().hex[:6]}"
        place, local_dir = self._backend(request, backend)
        storage = {
            **place,
            "remote.log.storage.chunk.size.bytes": 8 * 1024,
            "remote.log.storage.compression.enable": mode in ("compressed", "both"),
            "remote.log.storage.encryption.enable": mode in ("encrypted", "both"),
            "remote.log.storage.encryption.key.id": KEY_ID,
            "remote.log.storage.encryption.keys.file": str(self.keys_file),
        }
        create_topic(broker.bootstrap, topic, PARTITIONS)
        produce_compressible(broker.bootstrap, topic, 300)
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=200)
        ends = high_watermarks(broker.bootstrap, topic, PARTITIONS)
        expected = {
            isolation: by_partition(
                consume_confluent(broker.bootstrap, topic, ends, isolation=isolation)
            )
            for isolation in (READ_UNCOMMITTED, READ_COMMITTED)
        }
        rows = consume_rows(broker.bootstrap, topic, ends, READ_UNCOMMITTED)
        times = offsets_for_times(broker.bootstrap, topic, ends)
        metadata_topic = f"__rlm-{topic}"
        report = asyncio.run(
            tier_topic(
                broker,
                s3,
                self._spark,
                topic=topic,
                bucket="unused",
                metadata_topic=metadata_topic,
                spill=self._work.mktemp("spill"),
                storage=storage,
                **{"local.retention.ms": 1, "retention.ms": -1},
            )
        )
        assert report.segments_copied >= PARTITIONS * 3, report
        log_starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
        assert all(start > 0 for start in log_starts.values()), log_starts
        settings = {
            **storage,
            "remote.log.metadata.topic.name": metadata_topic,
            "remote.log.metadata.topic.partitions": 3,
        }
        if backend == "s3":
            settings = {**_s3_settings(s3), **settings}
        return StoredTopic(
            topic=topic,
            storage=settings,
            local_dir=local_dir,
            high_watermarks=ends,
            broker_log_starts=log_starts,
            expected=expected,
            offsets_for_times=times,
            rows=[row[:7] for row in rows],
        )

    def close(self) -> None:
        for cleanup in self._cleanups:
            cleanup()


def _s3_settings(s3: S3Info) -> dict[str, Any]:
    return {
        "remote.log.storage.backend": "s3",
        "remote.log.storage.s3.endpoint": s3.endpoint_url,
        "remote.log.storage.s3.region": s3.region,
        "remote.log.storage.s3.access.key.id": s3.access_key,
        "remote.log.storage.s3.secret.access.key": s3.secret_key,
        "remote.log.storage.s3.path.style.access": True,
    }


@pytest.fixture(scope="module")
def stored_topics(
    brokers: BrokerPool, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoredTopics]:
    topics = StoredTopics(brokers, spark, tmp_path_factory)
    try:
        yield topics
    finally:
        topics.close()


def proxy_settings(stored: StoredTopic, **settings: Any) -> dict[str, Any]:
    return {
        **stored.storage,
        "remote.fetch.chunk.size.bytes": 64 * 1024,
        "remote.log.storage.retry.max.attempts": 2,
        **settings,
    }


def a_storage_error_is_logged_and_counted(
    proxy: TierproxyServer,
    topic: str,
    *,
    logged: Callable[[str], bool],
    metric: str,
    what: str,
) -> None:
    """A fetch of ``topic``-0 from offset 0 answers KAFKA_STORAGE_ERROR with no records;
    then the proxy's log holds a line ``logged`` finds and ``metric`` counts the failure."""
    error, _hw, records = asyncio.run(fetch_once(proxy.bootstrap, topic, 0, 0))
    assert error == KafkaError.KAFKA_STORAGE_ERROR and records == b""
    wait_until(
        lambda: logged(proxy.process.log_path.read_text()),
        timeout_s=30,
        what=f"{what} in the proxy's log",
    )
    wait_until(
        lambda: proxy.metric(metric) >= 1,
        timeout_s=30,
        what=f"{what} counted in the proxy's metrics",
    )


@pytest.mark.parametrize(("backend", "mode"), COMBINATIONS)
def test_clients_read_every_record_from_the_remote_tier(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tmp_path: Path,
    backend: str,
    mode: str,
) -> None:
    stored = stored_topics.get(request, backend, mode)
    with running(proxy_process(broker, tmp_path, proxy_settings(stored))) as proxy:
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
            got = consume_confluent(
                proxy.bootstrap, stored.topic, stored.high_watermarks, isolation=isolation
            )
            assert by_partition(got) == stored.expected[isolation], isolation
        assert (
            offsets_for_times(proxy.bootstrap, stored.topic, stored.high_watermarks)
            == stored.offsets_for_times
        )
    if stored.local_dir is not None and mode in ("compressed", "both"):
        manifests = [decode_manifest(p.read_bytes()) for p in stored.local_dir.rglob("*.manifest")]
        assert any(c.compressed for m in manifests for c in m.log.chunks), "nothing compressed"


@pytest.mark.parametrize(("backend", "mode"), COMBINATIONS)
def test_the_spark_source_reads_the_whole_history(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    spark: Any,
    backend: str,
    mode: str,
) -> None:
    stored = stored_topics.get(request, backend, mode)
    register(spark)
    ends = {stored.topic: {str(p): end for p, end in stored.high_watermarks.items()}}
    reader = (
        spark.read.format("tierproxy")
        .option("subscribe", stored.topic)
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("endingOffsets", json.dumps(ends))
    )
    for key, value in stored.storage.items():
        reader = reader.option(
            f"tierproxy.{key}", str(value).lower() if isinstance(value, bool) else str(value)
        )
    actual = [tuple(row) for row in comparable(reader.load()).collect()]
    assert actual == stored.rows


def test_status_shows_the_bytes_in_storage_and_what_compression_saved(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tmp_path: Path,
) -> None:
    stored = stored_topics.get(request, "local", "compressed")
    config = write_config(
        tmp_path / "status.toml", {"bootstrap.servers": broker.bootstrap, **stored.storage}
    )
    rows = status_rows(config, stored.topic)
    assert [row["partition"] for row in rows] == list(range(PARTITIONS))
    for row in rows:
        assert row["error"] is None, row
        assert 0 < row["stored_bytes"] < row["remote_bytes"], row


def test_a_damaged_chunk_is_never_served_and_reads_again_once_repaired(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tmp_path: Path,
) -> None:
    stored = stored_topics.get(request, "local", "both")
    assert stored.local_dir is not None
    first = sorted(stored.local_dir.rglob("*/0/*.log.tpx"))[0]
    original = first.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 3] ^= 0xFF
    with running(proxy_process(broker, tmp_path, proxy_settings(stored))) as proxy:
        try:
            first.write_bytes(bytes(damaged))
            a_storage_error_is_logged_and_counted(
                proxy,
                stored.topic,
                logged=lambda log: "remote.storage.integrity" in log and first.name in log,
                metric="tierproxy_remote_storage_integrity_errors_total",
                what="the integrity failure, with its object key,",
            )
            first.write_bytes(original)
            got = consume_confluent(proxy.bootstrap, stored.topic, stored.high_watermarks)
            assert by_partition(got) == stored.expected[READ_UNCOMMITTED]
        finally:
            first.write_bytes(original)


def test_a_proxy_without_the_key_answers_a_storage_error_naming_the_key(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tmp_path: Path,
) -> None:
    stored = stored_topics.get(request, "local", "both")
    other_keys = tmp_path / "other-keys"
    other_keys.write_text(f"another:{base64.b64encode(os.urandom(32)).decode()}\n")
    settings = proxy_settings(
        stored,
        **{
            "remote.log.storage.encryption.enable": False,
            "remote.log.storage.encryption.keys.file": str(other_keys),
        },
    )
    with running(proxy_process(broker, tmp_path, settings)) as proxy:
        a_storage_error_is_logged_and_counted(
            proxy,
            stored.topic,
            logged=lambda log: f"encryption key '{KEY_ID}' is not loaded" in log,
            metric="tierproxy_remote_storage_key_errors_total",
            what="the missing key",
        )


def test_segments_of_the_earlier_format_are_served_as_before(
    stored_topics: StoredTopics,
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    tmp_path: Path,
) -> None:
    """Segments without a manifest (as earlier versions wrote them) are read as stored."""
    stored = stored_topics.get(request, "local", "plain")
    assert stored.local_dir is not None
    manifests = sorted(stored.local_dir.rglob("*.manifest"))
    assert manifests
    for manifest in manifests:
        manifest.unlink()
    with running(proxy_process(broker, tmp_path, proxy_settings(stored))) as proxy:
        got = consume_confluent(proxy.bootstrap, stored.topic, stored.high_watermarks)
        assert by_partition(got) == stored.expected[READ_UNCOMMITTED]
