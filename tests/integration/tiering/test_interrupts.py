"""Ctrl-C during ``tierproxy tier --once`` is acknowledged, as the real command against Apache
Kafka and SeaweedFS:

- the first SIGINT says ``interrupted: finishing the current copy (Ctrl-C again to abort)``,
  the cycle under way finishes (its segments are copied) and the command exits 130;
- a second SIGINT aborts the cycle: one line, exit 130, no traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import BrokerInfo, S3Info
from tests.conditions import wait_until
from tests.integration.tiering.support import COPIED, tier_command, tier_config
from tests.integration.tiering.workload import create_topic, produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HOLDING = re.compile(r"holding transactional id .* this pipeline tiers the cluster")
"""Logged when the cycle is about to start (after Spark and the metadata manager)."""


@pytest.fixture
def once(
    broker: BrokerInfo, s3: S3Info, s3_bucket: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``tier --once`` over a topic with closed segments to copy, started; its log."""
    topic = f"interrupted-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 400, first=0)
    config = tier_config(tmp_path / "tier.toml", broker.bootstrap, s3, s3_bucket, topic)
    log_path = tmp_path / "tier.log"
    with (
        log_path.open("wb") as log,
        subprocess.Popen(
            tier_command(config, "--once"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as tier,
    ):
        try:
            yield tier, log_path
        finally:
            if tier.poll() is None:
                tier.kill()
            tier.wait()


def logged(log_path: Path, pattern: re.Pattern[str]) -> bool:
    return pattern.search(log_path.read_text(errors="replace")) is not None


def test_ctrl_c_finishes_the_copy_says_so_and_exits_130(
    once: tuple[subprocess.Popen[bytes], Path],
) -> None:
    tier, log_path = once
    wait_until(lambda: logged(log_path, HOLDING) or tier.poll() is not None, timeout_s=300)
    os.kill(tier.pid, signal.SIGINT)
    code = tier.wait(timeout=300)
    log = log_path.read_text(errors="replace")
    assert code == 130, log[-3000:]
    assert "interrupted: finishing the current copy (Ctrl-C again to abort)" in log, log[-3000:]
    assert COPIED.search(log), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_a_second_ctrl_c_aborts_with_one_line_and_exits_130(
    once: tuple[subprocess.Popen[bytes], Path],
) -> None:
    tier, log_path = once
    wait_until(lambda: logged(log_path, HOLDING) or tier.poll() is not None, timeout_s=300)
    os.kill(tier.pid, signal.SIGINT)
    wait_until(lambda: logged(log_path, re.compile("Ctrl-C again to abort")), timeout_s=60)
    os.kill(tier.pid, signal.SIGINT)
    code = tier.wait(timeout=300)
    log = log_path.read_text(errors="replace")
    assert code == 130, log[-3000:]
    assert "SIGINT again: aborting" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
