"""RemoteFetchConfig from settings, and the remote tier's Prometheus series."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from proxy.app import build_read_path, running
from proxy.remote.config import RemoteFetchConfig
from proxy.remote.metrics import RemoteMetrics
from proxy.settings import settings_from_flat
from storage.config import ConfigError, from_settings
from storage.rsm.segments import StorageCounters
from tests.fakes.record_batches import data_batch
from tests.fakes.tiered_log import TP, TieredLog


def test_kafka_names_and_defaults() -> None:
    config = from_settings(
        RemoteFetchConfig,
        {"remote.fetch.max.wait.ms": 200, "remote.log.reader.threads": 2},
    )
    assert (config.max_wait_ms, config.reader_threads) == (200, 2)
    assert config.reader_max_pending_tasks == 100
    assert config.fetch_max_bytes_per_second == 2**63 - 1
    assert not config.enabled
    assert not config.offload_enable


@pytest.mark.parametrize(
    "settings",
    [
        {"remote.log.reader.threads": 0},
        {"remote.fetch.chunk.size.bytes": 0},
        {"remote.fetch.max.wait.ms": -1},
        {"remote.fetch.offload.min.lag.records": -5},
    ],
)
def test_out_of_range_values_are_refused(settings: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        from_settings(RemoteFetchConfig, settings)


@pytest.mark.parametrize("enabled", [True, False])
def test_remote_settings_are_checked_whether_the_tier_is_on_or_not(enabled: bool) -> None:
    """The whole file is checked, so a mistake shows before the day the tier is turned on."""
    with pytest.raises(ConfigError, match=re.escape("remote.log.storage.backend")):
        settings_from_flat(
            {"remote.log.storage.system.enable": enabled, "remote.log.storage.backend": "nfs"}
        )


async def test_the_series_carry_kafkas_names(tmp_path: Path) -> None:
    log = TieredLog.create(tmp_path)
    await log.copy([data_batch(0, 3)])
    registry = CollectorRegistry()
    metrics = RemoteMetrics(registry)
    path = build_read_path(
        RemoteFetchConfig(),
        metadata=log.metadata,
        indexes=log.indexes,
        chunks=log.chunks,
        counters=metrics,
    )
    metrics.watch(path.gauges())
    try:
        async with running(path):
            await path.reader.read(TP, 0, 100)
            metrics.bytes.labels(TP.topic).inc(10)
            text = generate_latest(registry).decode()
            for name in (
                'tierproxy_remote_fetch_bytes_total{topic="tiered"} 10.0',
                "tierproxy_remote_log_reader_task_queue_size 0.0",
                "tierproxy_remote_log_reader_idle_ratio",
                "tierproxy_remote_fetch_purgatory_size 0.0",
                "tierproxy_remote_fetch_expires_total 0.0",
                "tierproxy_remote_index_cache_misses_total 1.0",
                "tierproxy_remote_chunk_cache_misses_total 1.0",
                "tierproxy_remote_chunk_cache_gets_total 1.0",
                "tierproxy_remote_chunk_cache_disk_hits_total 0.0",
                "tierproxy_remote_index_cache_expirations_total 0.0",
            ):
                assert name in text, name
    finally:
        metrics.unwatch()
        await log.close()
    assert "tierproxy_remote_log_reader_task_queue_size" not in generate_latest(registry).decode()


def test_the_metadata_consumers_skipped_records_are_exported() -> None:
    registry = CollectorRegistry()
    metrics = RemoteMetrics(registry)
    metrics.watch_metadata(_Consumer(applied_records=5, skipped_records=2))
    text = generate_latest(registry).decode()
    assert "tierproxy_remote_log_metadata_records_applied_total 5.0" in text
    assert "tierproxy_remote_log_metadata_records_skipped_total 2.0" in text
    metrics.unwatch()
    assert "tierproxy_remote_log_metadata" not in generate_latest(registry).decode()


def test_the_segment_layers_counts_are_exported() -> None:
    registry = CollectorRegistry()
    metrics = RemoteMetrics(registry)
    counters = StorageCounters()
    metrics.watch_storage(counters)
    counters.integrity_failures += 1
    counters.key_failures += 2
    counters.manifest_gets += 3
    counters.stored_bytes_read += 40
    counters.original_bytes_read += 100
    text = generate_latest(registry).decode()
    assert "tierproxy_remote_storage_integrity_errors_total 1.0" in text
    assert "tierproxy_remote_storage_key_errors_total 2.0" in text
    assert "tierproxy_remote_storage_manifest_gets_total 3.0" in text
    assert 'tierproxy_remote_storage_read_bytes_total{form="stored"} 40.0' in text
    assert 'tierproxy_remote_storage_read_bytes_total{form="original"} 100.0' in text
    metrics.unwatch()
    assert "tierproxy_remote_storage" not in generate_latest(registry).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Consumer:
    applied_records: int
    skipped_records: int
