"""tierproxy's metadata topic next to Apache Kafka's own native tiered storage.

Kafka's topic-based manager reads ``__remote_log_metadata`` on a broker with
``remote.log.storage.system.enable=true`` and stops at the first record in another format;
tierproxy's records follow KIP-405's text. So tierproxy keeps its own topic
(``__tierproxy_remote_log_metadata``), created with infinite retention as Kafka's is, and
refuses Kafka's name on such a cluster: ``tierproxy serve`` exits 2 with one clear line.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, ensure_jars
from proxy.embedded.tierproxy import write_config
from storage.config import ConfigError
from storage.rlmm.config import DEFAULT_TOPIC_NAME, KAFKA_TOPIC_NAME, RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def native_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    with KafkaBroker(
        ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("native"), native_tiered=True
    ) as server:
        yield server.start()


def metadata_config(name: str) -> RemoteLogMetadataConfig:
    return RemoteLogMetadataConfig(
        topic_name=name, topic_partitions=3, snapshot_dir="", initialization_timeout_ms=60_000
    )


async def test_kafkas_own_topic_is_refused_on_a_native_tiered_cluster(
    native_broker: BrokerInfo,
) -> None:
    manager = TopicBasedRemoteLogMetadataManager(
        metadata_config(KAFKA_TOPIC_NAME), bootstrap_servers=native_broker.bootstrap
    )
    with pytest.raises(ConfigError, match="native tiered storage"):
        await manager.start()


async def test_the_default_topic_is_created_to_be_kept_forever(
    native_broker: BrokerInfo,
) -> None:
    name = f"{DEFAULT_TOPIC_NAME}-{uuid.uuid4().hex[:6]}"
    async with TopicBasedRemoteLogMetadataManager(
        metadata_config(name), bootstrap_servers=native_broker.bootstrap
    ):
        pass
    admin = AdminClient({"bootstrap.servers": native_broker.bootstrap})
    resource = ConfigResource("topic", name)
    (configs,) = (f.result(30) for f in admin.describe_configs([resource]).values())
    assert configs["retention.ms"].value == "-1"


async def test_kafkas_name_is_allowed_without_native_tiered_storage(
    broker: BrokerInfo,
) -> None:
    async with TopicBasedRemoteLogMetadataManager(
        metadata_config(KAFKA_TOPIC_NAME), bootstrap_servers=broker.bootstrap
    ) as manager:
        assert manager.partition_count == 3


def test_serve_exits_2_with_one_line_naming_the_conflict(
    native_broker: BrokerInfo, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "tierproxy.toml",
        {
            "bootstrap.servers": native_broker.bootstrap,
            "remote.log.storage.system.enable": True,
            "remote.log.storage.local.dir": str(tmp_path / "remote"),
            "remote.log.metadata.topic.name": KAFKA_TOPIC_NAME,
            "remote.log.metadata.topic.partitions": 3,
            "listeners": "PLAINTEXT://127.0.0.1:0",
        },
    )
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "tierproxy serve: remote.log.metadata.topic.name is '__remote_log_metadata'" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
