"""The storage, metadata and cluster settings of the source, from the same ``tierproxy.toml``
as ``tierproxy serve`` and ``tierproxy tier`` (keys the source does not read are left alone:
the file is shared with the proxy and the pipeline, whose commands check it whole)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.cluster_config import ClusterClientConfig
from storage.config import describe, from_settings, read_settings
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.spark_source.options import SourceOptions

__all__ = ["SOURCE_CONFIG_CLASSES", "SourceSettings", "load_source_settings"]

SOURCE_CONFIG_CLASSES: tuple[type[Any], ...] = (
    ClusterClientConfig,
    RemoteStorageConfig,
    RemoteLogMetadataConfig,
    KafkaSecurityConfig,
)
"""The settings the source reads; the file's other keys are the other commands' to check."""


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


def typed_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """Spark's option values are strings: a setting declared ``str`` keeps the text (a bucket
    or prefix may look like a number), any other is read as TOML reads it (``3``, ``true``,
    ``["a"]``)."""
    textual = {
        info.key
        for config_class in SOURCE_CONFIG_CLASSES
        for info in describe(config_class)
        if info.type_name in ("str", "str | None")
    }
    return {key: value if key in textual else _toml_value(value) for key, value in options.items()}


def _toml_value(text: str) -> Any:
    """``"2"`` as 2, ``"true"`` as True; what TOML cannot read stays the text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def load_source_settings(options: SourceOptions) -> SourceSettings:
    """Read ``options.config_path`` (if any) with ``options.settings`` over it.

    :raises ConfigError: for an unreadable file or an invalid setting.
    """
    path = Path(options.config_path) if options.config_path else None
    flat = read_settings(path, typed_settings(options.settings), None)
    cluster = from_settings(ClusterClientConfig, flat)
    return SourceSettings(
        storage=from_settings(RemoteStorageConfig, flat),
        metadata=from_settings(RemoteLogMetadataConfig, flat),
        security=from_settings(KafkaSecurityConfig, flat).with_secrets_resolved(),
        bootstrap_servers=cluster.bootstrap_servers,
        client_id=f"{cluster.client_id}-spark-source",
        request_timeout_ms=cluster.request_timeout_ms,
    )
