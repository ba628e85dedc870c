"""``tierproxy serve`` with the remote tier on, started before its Kafka cluster.

Operators start services in any order: the proxy must log that no broker answers yet and
retry (Kafka's exponential back-off), then serve once the cluster is up, instead of dying
with a traceback.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from proxy.embedded import KAFKA_4, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.probe import api_versions
from proxy.embedded.tierproxy import proxy_process, storage_settings

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
