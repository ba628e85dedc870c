"""Settings of the topic-based remote log metadata manager (``remote.log.metadata.*``).

Names and defaults follow KIP-405's "Configs" section where it has them (partitions 50,
retention one year). Two differ on purpose:

- ``remote.log.metadata.topic.name``: Kafka hard-codes ``__remote_log_metadata``; tierproxy
  lets it be chosen so that several proxy deployments (or tests) can share one cluster.
- ``remote.log.metadata.topic.replication.factor`` defaults to 1, not Kafka's 3: the embedded
  demo and the tests run a single broker, which refuses a topic replicated three times.
  Production clusters should set 3.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config import ConfigError, setting

__all__ = ["DEFAULT_TOPIC_NAME", "RemoteLogMetadataConfig"]

DEFAULT_TOPIC_NAME = "__remote_log_metadata"
_ONE_YEAR_MS = 365 * 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogMetadataConfig:
    """Where the metadata topic is, how it is created, and how the local cache persists.

    :raises ConfigError: for a non-positive partition count, replication factor or timeout.
    """

    topic_name: str = setting(
        "remote.log.metadata.topic.name",
        DEFAULT_TOPIC_NAME,
        "Name of the metadata topic (Kafka's fixed name by default).",
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
        1,
        "Replication factor of the metadata topic when tierproxy creates it (Kafka's default "
        "is 3; 1 suits the single-broker demo and tests).",
        kafka="remote.log.metadata.topic.replication.factor",
    )
    topic_retention_ms: int = setting(
        "remote.log.metadata.topic.retention.ms",
        _ONE_YEAR_MS,
        "retention.ms of the metadata topic when tierproxy creates it (-1 keeps forever).",
        kafka="remote.log.metadata.topic.retention.ms",
    )
    snapshot_dir: str = setting(
        "remote.log.metadata.snapshot.dir",
        "",
        "Directory for the per-partition flat-file snapshots and _rlmm_committed_offsets, "
        "so a restart reads only the tail of the topic; empty replays the whole topic.",
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

    def __post_init__(self) -> None:
        for key, value in (
            ("remote.log.metadata.topic.partitions", self.topic_partitions),
            ("remote.log.metadata.topic.replication.factor", self.topic_replication_factor),
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
