"""Fixtures of the tiered-read tests: one topic of mixed data (every codec, committed and
aborted transactions, idempotent batches) per Apache Kafka line, tiered by the real pipeline to
SeaweedFS, after which the broker really deletes the tiered range (the pipeline's
DeleteRecords: ``local.retention.ms`` 1). Reads below the broker's new log start get
OFFSET_OUT_OF_RANGE from the broker and must be served by ``tierproxy serve`` from the remote
tier: the product's true read path, with no offload policy.

What every reader must get is read from the broker *before* the deletion and kept on the
:class:`TieredTopic`: the records at both isolation levels and the broker's offsetsForTimes
answers.

The topics and their remote tiers are made once per broker kind and only read afterwards;
tests that need a proxy of their own (fault injection, restarts) start one with
``make_proxy``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerChoice, BrokerInfo, S3Info, create_bucket, delete_bucket
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings
from tests.conftest import BrokerPool
from tests.integration.tiered.secured import SecuredKafka, secured_kafka
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TieredTopic,
    by_partition,
    consume_confluent,
    earliest_offsets,
    high_watermarks,
    offsets_for_times,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

PARTITIONS = 2

MakeProxy = Callable[..., TierproxyServer]


def build_tiered_topic(
    broker: BrokerInfo, s3: S3Info, spark: Any, bucket: str, spill: Path
) -> TieredTopic:
    """Produce, read what readers must get, tier, and let the pipeline delete locally."""
    topic = f"tiered-reads-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_mixed(broker.bootstrap, topic, PARTITIONS, records=300)
    ends = high_watermarks(broker.bootstrap, topic, PARTITIONS)
    expected = {
        isolation: by_partition(
            consume_confluent(broker.bootstrap, topic, ends, isolation=isolation)
        )
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED)
    }
    assert len(expected[READ_COMMITTED]) < len(expected[READ_UNCOMMITTED]), "no aborted data"
    times = offsets_for_times(broker.bootstrap, topic, ends)
    report = asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket=bucket,
            metadata_topic=metadata_topic,
            spill=spill,
            **{"local.retention.ms": 1, "retention.ms": -1},
        )
    )
    assert report.segments_copied >= PARTITIONS * 3, report
    assert report.topics[topic].log_starts_advanced == PARTITIONS, report
    log_starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
    assert all(start > 0 for start in log_starts.values()), log_starts
    return TieredTopic(
        topic=topic,
        partitions=PARTITIONS,
        metadata_topic=metadata_topic,
        bucket=bucket,
        high_watermarks=ends,
        broker_log_starts=log_starts,
        expected=expected,
        offsets_for_times=times,
    )


class TieredTopics:
    """One tiered topic per broker kind, built on first use."""

    def __init__(
        self, brokers: BrokerPool, s3: S3Info, spark: Any, work: pytest.TempPathFactory
    ) -> None:
        self._brokers, self._s3, self._spark, self._work = brokers, s3, spark, work
        self._built: dict[BrokerChoice, TieredTopic] = {}

    def get(self, kind: BrokerChoice) -> TieredTopic:
        if kind not in self._built:
            bucket = f"tiered-{uuid.uuid4().hex[:12]}"
            create_bucket(self._s3, bucket)
            self._built[kind] = build_tiered_topic(
                self._brokers.get(kind), self._s3, self._spark, bucket, self._work.mktemp("spill")
            )
        return self._built[kind]

    def close(self) -> None:
        for tiered in self._built.values():
            delete_bucket(self._s3, tiered.bucket)


@pytest.fixture(scope="session")
def tiered_topics(
    brokers: BrokerPool, s3: S3Info, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TieredTopics]:
    topics = TieredTopics(brokers, s3, spark, tmp_path_factory)
    try:
        yield topics
    finally:
        topics.close()


@pytest.fixture
def tiered_topic(tiered_topics: TieredTopics, broker_kind: BrokerChoice) -> TieredTopic:
    return tiered_topics.get(broker_kind)


def proxy_settings(s3: S3Info, tiered: TieredTopic, **settings: Any) -> dict[str, Any]:
    """The remote tier of ``tiered``, small chunks (reads reach storage often), no offload."""
    return {
        **storage_settings(s3, tiered.bucket, tiered.metadata_topic),
        "remote.fetch.chunk.size.bytes": 64 * 1024,
        **{key.replace("_", "."): value for key, value in settings.items()},
    }


@pytest.fixture
def make_proxy(
    broker: BrokerInfo, s3: S3Info, tiered_topic: TieredTopic, tmp_path: Path
) -> Iterator[MakeProxy]:
    """Start ``tierproxy serve`` processes over the tiered topic; stopped after the test."""
    made: list[TierproxyServer] = []

    def make(*, port: int | None = None, **settings: Any) -> TierproxyServer:
        proxy = proxy_process(
            broker, tmp_path, proxy_settings(s3, tiered_topic, **settings), port=port
        )
        proxy.start()
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.stop()


@pytest.fixture(scope="session")
def shared_proxies(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[BrokerChoice, TierproxyServer]]:
    started: dict[BrokerChoice, TierproxyServer] = {}
    try:
        yield started
    finally:
        for proxy in started.values():
            proxy.stop()


@pytest.fixture
def shared_proxy(
    shared_proxies: dict[BrokerChoice, TierproxyServer],
    broker: BrokerInfo,
    broker_kind: BrokerChoice,
    s3: S3Info,
    tiered_topic: TieredTopic,
    tmp_path_factory: pytest.TempPathFactory,
) -> TierproxyServer:
    """One proxy per broker kind for the tests that only read."""
    if broker_kind not in shared_proxies:
        proxy = proxy_process(
            broker,
            tmp_path_factory.mktemp(f"proxy-{broker_kind}"),
            proxy_settings(s3, tiered_topic),
        )
        proxy.start()
        shared_proxies[broker_kind] = proxy
    return shared_proxies[broker_kind]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    """A broker with SCRAM users and ``StandardAuthorizer`` (see
    :mod:`tests.integration.tiered.secured`)."""
    with secured_kafka(tmp_path_factory.mktemp("secured-kafka")) as kafka:
        yield kafka
