"""Settings of the topic-based remote log metadata manager (``remote.log.metadata.*``).

Names and defaults follow KIP-405's "Configs" section where it has them (50 partitions).
Some differ on purpose:

- ``remote.log.metadata.topic.name`` is ``__tierproxy_remote_log_metadata``, never Kafka's
  ``__remote_log_metadata``: tierproxy's records follow the KIP text, Kafka's shipped
  manager another framing and partitioner, and a Kafka 3.6+ broker with native tiered
  storage on stops consuming its metadata topic at the first record it cannot read. The
  name can be chosen, so that several deployments (or tests) can share one cluster; Kafka's
  own name is refused when the broker has native tiered storage on.
- ``remote.log.metadata.topic.retention.ms`` is -1 (keep forever), as in Kafka as shipped
  (the KIP's year would drop the metadata of segments older than a year, which then could
  never be read or deleted again after a restart).
- ``remote.log.metadata.topic.replication.factor`` defaults to ``-1``: Kafka's 3, or as many
  as the cluster has brokers when it has fewer (a single-broker demo refuses three
  replicas); with three or more replicas the topic gets ``min.insync.replicas=2``, so a
  COPY_SEGMENT_FINISHED acknowledged with ``acks=all`` is on two brokers at least. Kafka's
  own manager fails to start on a cluster smaller than its replication factor instead.
- ``remote.log.metadata.snapshot.dir`` is on by default (``auto``): snapshots under
  ``./tierproxy-state/<command>`` (or ``$TIERPROXY_STATE_DIR/<command>``), so a restart reads
  only the tail of the topic; each command keeps its own, as they run as separate processes,
  and each process a slot of its own in it (:mod:`storage.rlmm.slots`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from storage.config import ConfigError, setting

__all__ = [
    "AUTO_REPLICATION_FACTOR",
    "AUTO_SNAPSHOT_DIR",
    "DEFAULT_TOPIC_NAME",
    "DURABLE_MIN_INSYNC_REPLICAS",
    "KAFKA_REPLICATION_FACTOR",
    "KAFKA_TOPIC_NAME",
    "RemoteLogMetadataConfig",
    "snapshot_dir_for",
]

DEFAULT_TOPIC_NAME = "__tierproxy_remote_log_metadata"
KAFKA_TOPIC_NAME = "__remote_log_metadata"
"""The name Kafka's own topic-based manager uses: its records are not tierproxy's."""
AUTO_SNAPSHOT_DIR = "auto"
AUTO_REPLICATION_FACTOR = -1
"""Kafka's 3 replicas, or every broker of a smaller cluster."""
KAFKA_REPLICATION_FACTOR = 3
"""Kafka's ``remote.log.metadata.topic.replication.factor``."""
DURABLE_MIN_INSYNC_REPLICAS = 2
"""``min.insync.replicas`` of a metadata topic with three or more replicas."""
_KEEP_FOREVER = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogMetadataConfig:
    """Where the metadata topic is, how it is created, and how the local cache persists.

    :raises ConfigError: for a non-positive partition count, replication factor or timeout.
    """

    topic_name: str = setting(
        "remote.log.metadata.topic.name",
        DEFAULT_TOPIC_NAME,
        "Name of the metadata topic. Never Kafka's own __remote_log_metadata on a cluster "
        "with native tiered storage (refused at start): the record formats differ.",
    )
    topic_partitions: int = setting(
        "remote.log.metadata.topic.partitions",
        50,
        "Partitions of the metadata topic when tierproxy creates it. Every writer and reader "
        "must agree: a user partition's records go to murmur2('topic-partition') mod this.",
        kafka="remote.log.metadata.topic.num.partitions",
    )
    topic_replication_factor: int = setting(
        "remote.log.metadata.topic.replication.factor",
        AUTO_REPLICATION_FACTOR,
        "Replication factor of the metadata topic when tierproxy creates it. -1: Kafka's 3, "
        "or every broker of a smaller cluster. With 3 or more, the topic also gets "
        "min.insync.replicas=2; an existing topic with fewer replicas (or min.insync.replicas "
        "below 2) on a multi-broker cluster is warned about at start.",
        kafka="remote.log.metadata.topic.replication.factor",
    )
    topic_retention_ms: int = setting(
        "remote.log.metadata.topic.retention.ms",
        _KEEP_FOREVER,
        "retention.ms of the metadata topic when tierproxy creates it: -1 keeps it forever, "
        "as Kafka does; a finite value loses the metadata of older segments.",
        kafka="remote.log.metadata.topic.retention.ms",
    )
    snapshot_dir: str = setting(
        "remote.log.metadata.snapshot.dir",
        AUTO_SNAPSHOT_DIR,
        "Directory for the per-partition flat-file snapshots and _rlmm_committed_offsets, "
        "so a restart reads only the tail of the topic. auto: ./tierproxy-state/<command> "
        "(or $TIERPROXY_STATE_DIR/<command>); empty: none, every start replays the topic. "
        "Each process locks a slot of its own in it (DIR/0, DIR/1, ...), so processes "
        "may share it (on one host: the locks are local); snapshots of another cluster, "
        "metadata topic or remote tier are set aside and the topic replayed.",
    )
    snapshot_interval_ms: int = setting(
        "remote.log.metadata.snapshot.interval.ms",
        60_000,
        "How often changed partitions are written to the snapshot directory (and always on close).",
    )
    consume_wait_ms: int = setting(
        "remote.log.metadata.consume.wait.ms",
        120_000,
        "How long a publish waits for its record to come back through the consumer (read "
        "your writes) before it fails.",
        kafka="remote.log.metadata.consume.wait.ms",
    )
    initialization_timeout_ms: int = setting(
        "remote.log.metadata.initialization.timeout.ms",
        120_000,
        "How long start() may take to create the topic and catch up with it.",
        kafka="remote.log.metadata.initialization.retry.max.timeout.ms",
    )

    def replication_for(self, brokers: int) -> int:
        """The replication factor to create the topic with on a cluster of ``brokers``."""
        if self.topic_replication_factor == AUTO_REPLICATION_FACTOR:
            return max(1, min(KAFKA_REPLICATION_FACTOR, brokers))
        return self.topic_replication_factor

    def __post_init__(self) -> None:
        if self.topic_replication_factor <= 0 and (
            self.topic_replication_factor != AUTO_REPLICATION_FACTOR
        ):
            raise ConfigError(
                "remote.log.metadata.topic.replication.factor must be positive or -1, "
                f"not {self.topic_replication_factor}"
            )
        for key, value in (
            ("remote.log.metadata.topic.partitions", self.topic_partitions),
            ("remote.log.metadata.snapshot.interval.ms", self.snapshot_interval_ms),
            ("remote.log.metadata.consume.wait.ms", self.consume_wait_ms),
            ("remote.log.metadata.initialization.timeout.ms", self.initialization_timeout_ms),
        ):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        if self.topic_retention_ms <= 0 and self.topic_retention_ms != -1:
            raise ConfigError(
                f"remote.log.metadata.topic.retention.ms must be positive or -1, "
                f"not {self.topic_retention_ms}"
            )
        if not self.topic_name:
            raise ConfigError("remote.log.metadata.topic.name must not be empty")


def snapshot_dir_for(config: RemoteLogMetadataConfig, command: str | None) -> Path | None:
    """Where ``command`` (``serve``, ``tier``, ...) keeps its snapshots, or ``None`` (no
    snapshots: none configured, or ``auto`` for a process that names no command)."""
    if not config.snapshot_dir:
        return None
    if config.snapshot_dir != AUTO_SNAPSHOT_DIR:
        return Path(config.snapshot_dir)
    if command is None:
        return None
    root = Path(os.environ.get("TIERPROXY_STATE_DIR") or "tierproxy-state")
    return root / command / config.topic_name
