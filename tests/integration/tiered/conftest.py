"""Fixtures of the tiered-read tests: one topic of mixed data (every codec, committed and
aborted transactions, idempotent batches) tiered by the real pipeline to SeaweedFS, and
``tierproxy serve`` processes in front of the broker with the remote tier on.

The topic and its remote tier are made once per session and only read afterwards; tests that
need a proxy of their own (fault injection, restarts) start one with :func:`proxy_process`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerInfo, S3Info, create_bucket, delete_bucket
from proxy.embedded.tierproxy import TierproxyServer
from tests.integration.tiered.support import (
    TieredTopic,
    high_watermarks,
    proxy_process,
    storage_settings,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

PARTITIONS = 2

MakeProxy = Callable[..., TierproxyServer]


@pytest.fixture(scope="session")
def tiered_topic(
    broker: BrokerInfo, s3: S3Info, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TieredTopic]:
    topic = f"tiered-reads-{uuid.uuid4().hex[:8]}"
    bucket = f"tiered-{uuid.uuid4().hex[:12]}"
    metadata_topic = f"__rlm-{topic}"
    create_bucket(s3, bucket)
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=300)
        report = asyncio.run(
            tier_topic(
                broker,
                s3,
                spark,
                topic=topic,
                bucket=bucket,
                metadata_topic=metadata_topic,
                spill=tmp_path_factory.mktemp("spill"),
            )
        )
        assert report.segments_copied >= PARTITIONS * 3, report
        yield TieredTopic(
            topic=topic,
            partitions=PARTITIONS,
            metadata_topic=metadata_topic,
            bucket=bucket,
            high_watermarks=high_watermarks(broker.bootstrap, topic, PARTITIONS),
            tiered_end={},
        )
    finally:
        delete_bucket(s3, bucket)


@pytest.fixture
def make_proxy(
    broker: BrokerInfo, s3: S3Info, tiered_topic: TieredTopic, tmp_path: Path
) -> Iterator[MakeProxy]:
    """Start ``tierproxy serve`` processes over the tiered topic; stopped after the test."""
    made: list[TierproxyServer] = []

    def make(*, port: int | None = None, **settings: Any) -> TierproxyServer:
        proxy = proxy_process(
            broker,
            tmp_path,
            {
                **storage_settings(s3, tiered_topic.bucket, tiered_topic.metadata_topic),
                "remote.fetch.offload.enable": True,
                "remote.fetch.chunk.size.bytes": 64 * 1024,
                **{key.replace("_", "."): value for key, value in settings.items()},
            },
            port=port,
        )
        proxy.start()
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.stop()


@pytest.fixture(scope="session")
def shared_proxy(
    broker: BrokerInfo,
    s3: S3Info,
    tiered_topic: TieredTopic,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TierproxyServer]:
    """One proxy for the tests that only read."""
    proxy = proxy_process(
        broker,
        tmp_path_factory.mktemp("proxy"),
        {
            **storage_settings(s3, tiered_topic.bucket, tiered_topic.metadata_topic),
            "remote.fetch.offload.enable": True,
            "remote.fetch.chunk.size.bytes": 64 * 1024,
        },
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
