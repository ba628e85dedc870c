"""Settings of the tiering pipeline itself (the per-topic policy is in :mod:`.policy`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.cluster_config import ClusterClientConfig
from storage.config import ConfigError, setting
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.policy import TopicPolicy

__all__ = ["AUTO_TRANSACTIONAL_ID", "TieringConfig"]

AUTO_TRANSACTIONAL_ID = "auto"

_MIB = 1024 * 1024
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TieringConfig(ClusterClientConfig):
    """How ``tierproxy tier`` reaches the broker (``ClusterClientConfig``) and divides
    the work.

    :raises ConfigError: for sizes or intervals out of range.
    """

    broker_kind: str = setting(
        "tiering.broker.kind",
        "auto",
        'What the broker is: "auto" (detect from ApiVersions), "kafka", "tansu" or "other". '
        "Tansu never receives DeleteRecords (it drops the connection).",
    )
    task_interval_ms: int = setting(
        "remote.log.manager.task.interval.ms",
        30_000,
        "Pause between two cycles of `tierproxy tier` without --once.",
        kafka="remote.log.manager.task.interval.ms",
    )
    copy_max_bytes_per_second: int = setting(
        "remote.log.manager.copy.max.bytes.per.second",
        _LONG_MAX,
        "Cap on the bytes per second that copy tasks read from the broker, shared by all "
        "tasks of a cycle (KIP-956).",
        kafka="remote.log.manager.copy.max.bytes.per.second",
    )
    upload_max_bytes_per_second: int = setting(
        "tiering.upload.max.bytes.per.second",
        _LONG_MAX,
        "Cap on the bytes per second (as stored: after compression) that the copy tasks of "
        "a cycle upload to remote storage together, split evenly between the tasks that run "
        "at once; remote.log.storage.upload.rate.limit.bytes.per.second caps each task.",
    )
    fetch_max_bytes: int = setting(
        "tiering.fetch.max.bytes",
        8 * _MIB,
        "Largest Fetch response a copy task asks the broker for.",
    )
    task_max_bytes: int = setting(
        "tiering.task.max.bytes",
        128 * _MIB,
        "About how many bytes one fetch task reads; larger backlogs of a partition are split "
        "into several tasks so that every core works.",
    )
    topics: tuple[Mapping[str, Any], ...] = setting(
        "topics",
        (),
        "Per-topic policy: [[topics]] tables, each a pattern (regular expression matched "
        "against the whole topic name) and topic settings (remote.storage.enable, "
        "segment.bytes, retention.ms, ...) for the topics it matches; the first match wins.",
    )
    transactional_id: str = setting(
        "transactional.id",
        AUTO_TRANSACTIONAL_ID,
        "The transactional id that fences the pipeline: one pipeline at a time per cluster "
        "holds it (a waiting one takes over when the holder stops), and a fenced one can "
        "write no metadata. auto: tierproxy-tiering.<remote.log.metadata.topic.name>; every "
        "pipeline of one metadata topic must use the same. Empty: no fencing (only for "
        "brokers without transactions; never run two pipelines then).",
        kafka="transactional.id",
    )
    transaction_timeout_ms: int = setting(
        "transaction.timeout.ms",
        60_000,
        "How long the pipeline's hold lasts without renewal (it renews every third of it): "
        "a holder that stops is fenced by the broker's transaction coordinator after it, and "
        "a waiting pipeline takes over. At most the broker's transaction.max.timeout.ms; "
        "every pipeline of one metadata topic must use the same.",
        kafka="transaction.timeout.ms",
    )
    copy_timeout_ms: int = setting(
        "tiering.copy.timeout.ms",
        900_000,
        "How long a cycle's copy tasks may announce and upload segments, from the cycle's "
        "start; what is left is copied next cycle. A pipeline that takes over leaves another "
        "holder's unfinished copies alone until this (plus a minute for clocks) has passed; "
        "every pipeline of one metadata topic must use the same.",
    )
    spill_dir: str = setting(
        "tiering.spill.dir",
        "",
        "Directory where fetch tasks keep the ranges they read until the segments are "
        "uploaded; empty: a tierproxy directory under the system's temporary directory.",
    )

    metrics_port: int = setting(
        "tiering.metrics.port",
        0,
        "Port of the pipeline's Prometheus /metrics endpoint (copy lag, cycles, whether it "
        "holds the cluster's tiering) while `tierproxy tier` runs without --once; 0 turns it "
        "off. Not metrics.port: serve and tier may read one file on one host.",
    )
    metrics_host: str = setting(
        "tiering.metrics.host",
        "127.0.0.1",
        "Address the pipeline's /metrics endpoint binds to (its series name topics).",
    )

    def __post_init__(self) -> None:
        ClusterClientConfig.__post_init__(self)
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"tiering.metrics.port must be 0..65535, not {self.metrics_port}")
        if self.broker_kind not in ("auto", "kafka", "tansu", "other"):
            raise ConfigError(
                'tiering.broker.kind must be "auto", "kafka", "tansu" or "other", '
                f"not {self.broker_kind!r}"
            )
        for key, value in (
            ("remote.log.manager.task.interval.ms", self.task_interval_ms),
            ("remote.log.manager.copy.max.bytes.per.second", self.copy_max_bytes_per_second),
            ("tiering.upload.max.bytes.per.second", self.upload_max_bytes_per_second),
            ("tiering.fetch.max.bytes", self.fetch_max_bytes),
            ("tiering.task.max.bytes", self.task_max_bytes),
            ("transaction.timeout.ms", self.transaction_timeout_ms),
            ("tiering.copy.timeout.ms", self.copy_timeout_ms),
        ):
            if value < 1:
                raise ConfigError(f"{key} must be at least 1, not {value}")

    def fencing_id(self, metadata_topic: str) -> str:
        """The transactional id that fences the pipeline of ``metadata_topic`` (empty: none)."""
        if self.transactional_id == AUTO_TRANSACTIONAL_ID:
            return f"tierproxy-tiering.{metadata_topic}"
        return self.transactional_id

    @property
    def spill_root(self) -> Path:
        """Where fetch tasks keep what they read (on each executor's own disk)."""
        if self.spill_dir:
            return Path(self.spill_dir)
        return Path(tempfile.gettempdir()) / "tierproxy-tiering"


TIERING_CONFIG_CLASSES: tuple[type[Any], ...] = (
    TieringConfig,
    TopicPolicy,
    RemoteStorageConfig,
    RemoteLogMetadataConfig,
    KafkaSecurityConfig,
)
"""The settings classes the pipeline reads (``tierproxy status`` reads the same)."""
