"""The state of one ``tierproxy demo`` run: what the user asked for and what the steps found.

The steps (:mod:`proxy.commands.demo_steps`) fill a :class:`DemoRun` in as they go; the report
(:mod:`proxy.commands.demo_report`) reads it at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from proxy.embedded import BrokerChoice, BrokerInfo

__all__ = ["DemoOptions", "DemoRun", "TieredPartition"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """What the user asked for on the command line."""

    records: int
    topic: str
    partitions: int
    value_bytes: int
    work_dir: Path | None
    broker: BrokerChoice


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredPartition:
    """What ``tierproxy status`` reports for one partition after the pipeline ran."""

    partition: int
    remote_log_end: int | None
    segments: int
    remote_bytes: int


@dataclass(slots=True, kw_only=True)
class DemoRun:
    """State shared by the steps of one run (filled in as the steps go)."""

    options: DemoOptions
    broker: BrokerInfo | None = None
    produced_bytes: int = 0
    produce_seconds: float = 0.0
    consumed: int = 0
    consume_seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    config_path: Path | None = None
    remote_dir: Path | None = None
    tiered: list[TieredPartition] = field(default_factory=list)
    proxy_bootstrap: str = ""
    remote_fetch_bytes: float = 0.0
    remote_fetch_requests: float = 0.0
    records_by_offset: dict[int, list[int]] = field(default_factory=dict)
    """Offsets read per partition, to tell remote-tier records from broker records."""
    log_start_before: dict[int, int] = field(default_factory=dict)
    """The broker's log start per partition before tiering."""
    log_start_after: dict[int, int] = field(default_factory=dict)
    """... and after the pipeline let it drop the tiered range."""
    spark_count: int | None = None
    """Records ``format("tierproxy")`` counted in the topic (the last step)."""

    @property
    def deletes(self) -> bool:
        """Whether the broker drops tiered data (Apache Kafka) or keeps it all (Tansu)."""
        return self.broker is not None and self.broker.supports_delete_records
