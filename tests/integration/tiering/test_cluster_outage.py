"""``tierproxy tier`` when its Kafka cluster is not up, or goes away.

The loop is a service: started before the cluster it logs that no broker answers and keeps
waiting (past ``remote.log.metadata.initialization.timeout.ms``, which bounds a single run)
until the cluster is up or SIGTERM stops it; it logs a cycle that fails while the cluster is
gone, and tiers again when it is back. ``tier --once`` is a job: before it starts Spark it
waits up to that timeout (at most 10 s), then says in one line that no broker answered and
exits 1. All run as the real command, with their own Spark, against a Kafka broker of their
own (the shared ones must not be stopped).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from proxy.embedded import KAFKA_4, KafkaBroker, S3Info, ensure_jars, free_port
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.process import ManagedProcess
from tests.integration.tiering.support import COPIED, tier_command, tier_config, wait_for_line
from tests.integration.tiering.workload import create_topic, produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def nowhere(tmp_path: Path, s3: S3Info, bucket: str) -> tuple[str, Path]:
    """A closed loopback port as the cluster, and a config that points there."""
    bootstrap = f"{LOOPBACK}:{free_port()}"
    return bootstrap, tier_config(tmp_path / "tier.toml", bootstrap, s3, bucket, "never")


def test_the_loop_waits_for_the_cluster_and_outlives_its_restart(
    s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path / "kafka") as server:
        broker = server.start()
        server.stop()  # its port and data stay: the cluster is simply not up yet
        config = tier_config(tmp_path / "tier.toml", broker.bootstrap, s3, s3_bucket, topic)
        tier = ManagedProcess(
            "tierproxy tier",
            tier_command(config),
            log_path=tmp_path / "tier.log",
            stop_grace_s=60,
        )
        tier.start()
        try:
            # Attempt 4 comes after 0.5 + 1 + 2 s of back-off at least: past the 2 s bound.
            wait_for_line(tier, re.compile(r"no broker at \S+ answers yet \(attempt 4\b"))
            server.start()
            create_topic(broker.bootstrap, topic, 1)
            produce_numbered(broker.bootstrap, topic, 200, first=0)
            wait_for_line(tier, COPIED)

            server.stop()
            gone = len(tier.log_path.read_text(errors="replace"))
            wait_for_line(
                tier,
                re.compile(
                    r"level=error logger=storage\.tiering\.job event=tiering\.cycle\.failed "
                    r"msg=\"tiering cycle failed: "
                ),
                gone,
            )
            server.start()
            back = len(tier.log_path.read_text(errors="replace"))
            produce_numbered(broker.bootstrap, topic, 200, first=200)
            wait_for_line(tier, COPIED, back)
        finally:
            tier.stop()
    log = tier.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_the_loop_stops_on_sigterm_while_it_waits_for_the_cluster(
    s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    _bootstrap, config = nowhere(tmp_path, s3, s3_bucket)
    tier = ManagedProcess(
        "tierproxy tier", tier_command(config), log_path=tmp_path / "tier.log", stop_grace_s=60
    )
    tier.start()
    try:
        wait_for_line(tier, re.compile(r"no broker at \S+ answers yet"))
    finally:
        tier.stop()  # SIGTERM; killed only after the grace period
    log = tier.log_path.read_text(errors="replace")
    assert "stopped while waiting for the cluster" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_once_against_a_cluster_that_is_not_up_is_one_line_and_exit_1(
    s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap, config = nowhere(tmp_path, s3, s3_bucket)
    result = subprocess.run(
        tier_command(config, "--once"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.endswith(
        f"tierproxy tier: no broker at {bootstrap} answered within 2 s; --once does not wait "
        "for the cluster (without --once, tier waits as long as it takes)\n"
    ), result.stderr[-3000:]
    assert "Spark" not in result.stderr, result.stderr[-3000:]  # it fails before Spark starts
