"""The storage, metadata and cluster settings of the source, from the same ``tierproxy.toml``
as ``tierproxy serve`` and ``tierproxy tier`` (keys the source does not read are left alone:
the file is shared with the proxy's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.spark_source.options import SourceOptions

__all__ = ["SourceSettings", "load_source_settings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSettings:
    """Plain values: shipped to the executors with every task."""

    storage: RemoteStorageConfig
    metadata: RemoteLogMetadataConfig
    security: KafkaSecurityConfig
    """With its secrets resolved once, on the driver."""
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int


def load_source_settings(options: SourceOptions) -> SourceSettings:
    """Read ``options.config_path`` (if any) with ``options.settings`` over it.

    :raises ConfigError: for an unreadable file or an invalid setting.
    """
    # The pipeline's module (rich, its Spark stages) loads on the driver only.
    from storage.tiering.job import load_tiering_settings  # noqa: PLC0415

    path = Path(options.config_path) if options.config_path else None
    loaded = load_tiering_settings(path, dict(options.settings))
    return SourceSettings(
        storage=loaded.storage,
        metadata=loaded.metadata,
        security=loaded.security.with_secrets_resolved(),
        bootstrap_servers=loaded.tiering.bootstrap_servers,
        client_id=f"{loaded.tiering.client_id}-spark-source",
        request_timeout_ms=loaded.tiering.request_timeout_ms,
    )
