"""``tierproxy status`` on Apache Kafka prints every value whole: at 80 columns, in a pipe, wide.

A topic is tiered by the real pipeline to a local-directory remote tier and the broker
deletes the tiered range; then the real command runs as a subprocess, as a user runs it:
with ``--json``; in a pipe with ``COLUMNS=80`` (the table, one whole line a partition); on a
terminal (a pseudo-terminal) 80 columns wide (a block a partition, no line longer than 80);
on one wide enough for the table. Each output, read back, holds exactly the JSON's values.
The same ``status`` loads neither Spark, an object store's client nor rich.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import write_config
from tests.integration.tiered.support import earliest_offsets, status_rows, tier_topic
from tests.integration.tiering.workload import create_topic, produce_mixed
from tests.unit.proxy.cli_modules import NEVER, imported, loaded
from tests.unit.proxy.status_text import expected_cells, read_stacked, read_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3


@pytest.fixture(scope="module")
def tiered(
    brokers: Any, s3: S3Info, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """A config file for ``status`` and the topic it shows, tiered and deleted below."""
    broker: BrokerInfo = brokers.get("kafka")
    work = tmp_path_factory.mktemp("status-output")
    topic = f"status-output-orders-eu-west-{uuid.uuid4().hex[:8]}"
    storage = {
        "remote.log.storage.backend": "local",
        "remote.log.storage.local.dir": str(work / "remote"),
        "remote.log.storage.compression.enable": True,  # stored bytes below remote bytes
        "remote.log.metadata.topic.name": f"__rlm-{topic}",
        "remote.log.metadata.topic.partitions": 3,
    }
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_mixed(broker.bootstrap, topic, PARTITIONS, records=400)
    report = asyncio.run(
        tier_topic(
            broker,
            s3,
            spark,
            topic=topic,
            bucket="unused",  # the local directory above replaces the bucket
            metadata_topic=f"__rlm-{topic}",
            spill=work / "spill",
            storage=storage,
            **{"local.retention.ms": 1, "retention.ms": -1},
        )
    )
    assert report.segments_copied >= PARTITIONS, report
    starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
    assert all(start > 0 for start in starts.values()), starts
    config = write_config(work / "status.toml", {"bootstrap.servers": broker.bootstrap, **storage})
    return config, topic


def command(config: Path, topic: str) -> list[str]:
    return [sys.executable, "-m", "proxy.cli", "status", "--config", str(config), "--topic", topic]


def status(config: Path, topic: str, *, columns: int) -> str:
    """What ``tierproxy status`` prints to a pipe with ``COLUMNS`` set."""
    result = subprocess.run(
        command(config, topic),
        env={**os.environ, "COLUMNS": str(columns)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


def status_on_a_terminal(config: Path, topic: str, *, columns: int) -> str:
    """What ``tierproxy status`` prints to a terminal ``columns`` wide (``COLUMNS`` too)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    attributes = termios.tcgetattr(follower)
    attributes[1] &= ~termios.ONLCR  # no \r before each \n
    termios.tcsetattr(follower, termios.TCSANOW, attributes)
    chunks = []
    with (
        os.fdopen(leader, "rb", buffering=0) as screen,
        subprocess.Popen(
            command(config, topic),
            env={**os.environ, "COLUMNS": str(columns)},
            stdout=follower,
            stderr=subprocess.PIPE,
        ) as process,
    ):
        os.close(follower)
        with contextlib.suppress(OSError):  # EIO once the command closed its end
            while chunk := screen.read(65536):
                chunks.append(chunk)
        assert process.stderr is not None
        errors = process.stderr.read()
        assert (process.wait(timeout=120), errors) == (0, b""), errors
    return b"".join(chunks).decode()


def test_json_pipe_and_terminals_show_the_same_whole_values(
    tiered: tuple[Path, str], tmp_path: Path
) -> None:
    config, topic = tiered
    rows = status_rows(config, topic)
    assert [row["partition"] for row in rows] == list(range(PARTITIONS))
    assert all(row["error"] is None and row["remote_log_end"] > 0 for row in rows), rows
    expected = [expected_cells(row) for row in rows]

    piped = status(config, topic, columns=80).splitlines()
    assert read_table(piped) == expected
    assert max(len(line) for line in piped) > 80  # whole, not cut to COLUMNS

    narrow = status_on_a_terminal(config, topic, columns=80).splitlines()
    assert read_stacked(narrow) == expected
    assert max(len(line) for line in narrow) <= 80

    wide = status_on_a_terminal(config, topic, columns=250).splitlines()
    assert read_table(wide) == expected

    names, result = imported(tmp_path, "status", "--config", str(config), "--topic", topic)
    assert result.returncode == 0, result.stderr
    assert not loaded(names, NEVER)
