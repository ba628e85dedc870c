"""Support for the tests that run ``tierproxy tier`` as the real command: its config file, its
command line, and waiting for what it logs."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from protocol.record_reader import ConsumedRecord
from proxy.embedded import S3Info
from proxy.embedded.process import ManagedProcess
from proxy.embedded.tierproxy import storage_settings, write_config
from storage.kafka_client import READ_UNCOMMITTED, KafkaClient
from storage.kafka_client.consumer import AssignedConsumer

__all__ = [
    "COPIED",
    "local_tier_config",
    "metadata_topic_records",
    "tier_command",
    "tier_config",
    "wait_for_line",
]

COPIED = re.compile(r"topic=(\S+) .*copied_segments=([1-9]\d*)")
"""A cycle's report line for a topic it copied segments of."""


def tier_config(
    path: Path,
    bootstrap: str,
    s3: S3Info,
    bucket: str,
    topic: str,
    *,
    settings: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
) -> Path:
    """Tier ``topic`` every second, with a 2 s start-up bound for the metadata manager, more
    ``settings`` and more of the topic's ``policy``."""
    storage = storage_settings(s3, bucket, f"__rlm-{topic}")
    return _write(path, bootstrap, topic, {**storage, **(settings or {})}, policy)


def local_tier_config(
    path: Path,
    bootstrap: str,
    remote_dir: Path,
    topic: str,
    *,
    settings: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
) -> Path:
    """:func:`tier_config` with the remote tier in the local directory ``remote_dir``."""
    storage = {
        "remote.log.storage.backend": "local",
        "remote.log.storage.local.dir": str(remote_dir),
        "remote.log.metadata.topic.name": f"__rlm-{topic}",
        "remote.log.metadata.topic.partitions": 3,
    }
    return _write(path, bootstrap, topic, {**storage, **(settings or {})}, policy)


def _write(
    path: Path,
    bootstrap: str,
    topic: str,
    settings: Mapping[str, Any],
    policy: Mapping[str, Any] | None,
) -> Path:
    write_config(
        path,
        {
            "bootstrap.servers": bootstrap,
            "remote.log.metadata.initialization.timeout.ms": 2000,
            "remote.log.manager.task.interval.ms": 1000,
            "tiering.spill.dir": str(path.parent / "spill"),
            **settings,
        },
    )
    rule = {
        "pattern": f'"{topic}"',
        "remote.storage.enable": "true",
        "segment.bytes": "32768",
        "segment.ms": "86400000",
        **{key: str(value) for key, value in (policy or {}).items()},
    }
    with path.open("a", encoding="utf-8") as file:
        file.write("[[topics]]\n" + "".join(f"{k} = {v}\n" for k, v in rule.items()))
    return path


def tier_command(config: Path, *flags: str) -> list[str]:
    return [
        *(sys.executable, "-m", "proxy.cli", "tier", "--config", str(config)),
        *("--master", "local[1]", *flags),
    ]


def wait_for_line(
    process: ManagedProcess, pattern: re.Pattern[str], after: int = 0, *, timeout_s: float = 180
) -> str:
    """The first line past character ``after`` of the log that matches ``pattern``."""
    deadline = time.monotonic() + timeout_s
    while True:
        log = process.log_path.read_text(errors="replace")
        found = pattern.search(log, after)
        if found is not None:
            return found.group(0)
        assert process.running, log[-3000:]
        assert time.monotonic() < deadline, f"{pattern.pattern!r} not logged:\n{log[-3000:]}"
        time.sleep(0.5)


async def metadata_topic_records(bootstrap: str, topic: str) -> list[tuple[int, ConsumedRecord]]:
    """Every record of the metadata ``topic`` (three partitions, as the configs here make
    it) up to its end offsets when asked, aborted transactions' too, with its partition."""
    async with KafkaClient(bootstrap) as client:
        consumer = AssignedConsumer(
            client, topic, 3, max_wait_ms=50, isolation_level=READ_UNCOMMITTED
        )
        ends = await consumer.end_offsets()
        found: list[tuple[int, ConsumedRecord]] = []
        while any((consumer.position(p) or 0) < ends[p] for p in ends):
            for partition, records in (await consumer.poll()).items():
                found += [(partition, record) for record in records]
        return found
