"""How tierproxy's batch tools reach the cluster: the tiering pipeline, ``tierproxy status``
and the Spark data source read these (the pipeline's settings extend them,
:class:`storage.tiering.config.TieringConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from storage.config import ConfigError, setting

__all__ = ["ClusterClientConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterClientConfig:
    """Where the cluster is, and how tierproxy's batch clients present themselves to it.

    :raises ConfigError: for no broker, or a request timeout below 1 ms.
    """

    bootstrap_servers: str = setting(
        "bootstrap.servers",
        "127.0.0.1:9092",
        "The broker(s) whose topics are tiered: comma-separated host:port.",
        kafka="bootstrap.servers",
    )
    client_id: str = setting(
        "tiering.client.id",
        "tierproxy-tiering",
        "Client id of the pipeline's connections to the broker (shows in broker logs and quotas).",
    )
    request_timeout_ms: int = setting(
        "tiering.request.timeout.ms",
        30_000,
        "Time allowed for one request to the broker.",
    )

    def __post_init__(self) -> None:
        if self.request_timeout_ms < 1:
            raise ConfigError(
                f"tiering.request.timeout.ms must be at least 1, not {self.request_timeout_ms}"
            )
        if not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap.servers must name at least one broker")
