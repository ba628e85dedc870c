"""Settings of the tiered read path: purgatory, reader pool, quota, chunk cache, offload.

Kafka's names and defaults where Kafka has the setting (``remote.fetch.max.wait.ms``,
KIP-1018; ``remote.log.reader.*``, KIP-405; ``remote.log.manager.fetch.*``, KIP-956); the
rest are tierproxy's own, under ``remote.fetch.*``. The chunk cache follows the settings of
Aiven's tiered-storage plugin (4 MiB chunks, read-ahead), which Kafka itself does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.chunk_cache import DEFAULT_READ_AHEAD_MAX_BYTES
from storage.config import ConfigError, setting

__all__ = ["RemoteFetchConfig"]

_MIB = 1024 * 1024
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteFetchConfig:
    """How the proxy serves reads from the remote tier.

    :raises ConfigError: for values out of range.
    """

    enabled: bool = setting(
        "remote.log.storage.system.enable",
        False,
        "Serve reads from the remote tier: start the remote storage manager, the metadata "
        "manager (a consumer of the metadata topic) and the caches, and intercept Fetch, "
        "ListOffsets and OffsetForLeaderEpoch. Off: a plain pass-through proxy.",
        kafka="remote.log.storage.system.enable",
    )
    max_wait_ms: int = setting(
        "remote.fetch.max.wait.ms",
        500,
        "Longest a Fetch waits for its remote reads; the request's own max wait applies if "
        "shorter. Reads still running then keep filling the cache for the next Fetch.",
        kafka="remote.fetch.max.wait.ms",
    )
    reader_threads: int = setting(
        "remote.log.reader.threads",
        5,
        "Remote reads running at once (asyncio tasks, not OS threads).",
        kafka="remote.log.reader.threads",
    )
    reader_max_pending_tasks: int = setting(
        "remote.log.reader.max.pending.tasks",
        100,
        "Remote reads that may wait for a reader; beyond it, partitions get a retriable "
        "error (KAFKA_STORAGE_ERROR) instead of queueing without bound.",
        kafka="remote.log.reader.max.pending.tasks",
    )
    fetch_max_bytes_per_second: int = setting(
        "remote.log.manager.fetch.max.bytes.per.second",
        _LONG_MAX,
        "Bytes per second the proxy reads from the remote tier for Fetches; above it, "
        "remote partitions answer with no records and no error until the rate drops (KIP-956).",
        kafka="remote.log.manager.fetch.max.bytes.per.second",
    )
    fetch_quota_window_num: int = setting(
        "remote.log.manager.fetch.quota.window.num",
        11,
        "Number of windows over which the fetch rate is measured (KIP-956).",
        kafka="remote.log.manager.fetch.quota.window.num",
    )
    fetch_quota_window_size_seconds: int = setting(
        "remote.log.manager.fetch.quota.window.size.seconds",
        1,
        "Length of one fetch-rate window in seconds (KIP-956).",
        kafka="remote.log.manager.fetch.quota.window.size.seconds",
    )
    chunk_cache_size_bytes: int = setting(
        "remote.fetch.chunk.cache.size.bytes",
        256 * _MIB,
        "Bytes of remote segment data held in memory once read (aligned chunks, least "
        "recently used evicted first); chunks read ahead and not read yet are apart, "
        "bounded by remote.fetch.chunk.read.ahead.max.bytes.",
    )
    chunk_size_bytes: int = setting(
        "remote.fetch.chunk.size.bytes",
        4 * _MIB,
        "Size of one cached range of a remote segment: one GET reads a whole chunk.",
    )
    chunk_prefetch_chunks: int = setting(
        "remote.fetch.chunk.prefetch.chunks",
        2,
        "Chunks read ahead of a sequential (catch-up) reader at least, in parallel GETs; more "
        "when GETs take longer than the reader needs for that many (twice the GETs' measured "
        "time at the reader's rate, up to 64 MiB and remote.fetch.chunk.read.ahead.max.bytes). "
        "0 turns read-ahead off.",
    )
    chunk_read_ahead_max_bytes: int = setting(
        "remote.fetch.chunk.read.ahead.max.bytes",
        DEFAULT_READ_AHEAD_MAX_BYTES,
        "Bytes of chunks read ahead and not read yet, with the read-ahead GETs in flight, "
        "across all readers; memory apart from remote.fetch.chunk.cache.size.bytes, so "
        "read-ahead evicts no cached chunk. When full, only chunks of readers that stopped "
        "(not wanted for 5 s) make room; a read-ahead that does not fit otherwise waits for "
        "its reader's next read, so readers never drop each other's chunks. 64 MiB keeps "
        "twice the data a reader "
        "at 500 MiB/s needs behind 50 ms to the first byte in flight (at least "
        "remote.fetch.chunk.prefetch.chunks chunks).",
    )
    chunk_cache_dir: str = setting(
        "remote.fetch.chunk.cache.dir",
        "",
        "Directory of an optional disk tier of the chunk cache; empty keeps chunks in memory.",
    )
    chunk_cache_disk_size_bytes: int = setting(
        "remote.fetch.chunk.cache.disk.size.bytes",
        4096 * _MIB,
        "Bytes the disk tier of the chunk cache may hold (with remote.fetch.chunk.cache.dir).",
    )
    offload_enable: bool = setting(
        "remote.fetch.offload.enable",
        False,
        "Serve ranges that are already tiered from the remote tier even while the broker "
        "still holds them, for consumers lagging by at least the thresholds below; keeps "
        "catch-up reads off the broker's disks.",
    )
    offload_min_lag_records: int = setting(
        "remote.fetch.offload.min.lag.records",
        0,
        "Offload only consumers at least this many records behind the high watermark.",
    )
    offload_min_lag_bytes: int = setting(
        "remote.fetch.offload.min.lag.bytes",
        0,
        "Offload only consumers at least this many bytes behind the high watermark "
        "(estimated from the remote segments' bytes per record).",
    )
    broker_check_reuse_ms: int = setting(
        "remote.fetch.broker.check.reuse.ms",
        100,
        "How long the broker's answer for a remote-served partition stands on one client "
        "connection: a sessionless Fetch, or an incremental one in step with its fetch "
        "session, whose every partition is served from the remote tier, each answered by "
        "the broker on that connection without error this recently and at the same leader "
        "epoch, is answered without asking the broker. An ACL "
        "revocation, leader move or topic deletion then reaches that connection's remote "
        "reads up to this much later (Kafka's own Fetches read up to fetch.max.wait.ms, "
        "500 ms, after their one authorisation). 0: every Fetch asks the broker.",
    )
    session_cache_slots: int = setting(
        "remote.fetch.session.cache.slots",
        10_000,
        "Fetch sessions (KIP-227) whose partitions the proxy tracks; a client whose session "
        "was forgotten is asked to start a new one (FETCH_SESSION_ID_NOT_FOUND).",
    )
    client_quota_bytes_per_second: int = setting(
        "remote.fetch.client.quota.bytes.per.second",
        _LONG_MAX,
        "Bytes per second each client (user and client id) may fetch from the remote tier; "
        "above it, its Fetches get no remote records and a throttle time, as Kafka's fetch "
        "quotas do. The broker's own quota never sees these bytes.",
    )
    client_quotas: tuple[Mapping[str, Any], ...] = setting(
        "remote.fetch.client.quotas",
        (),
        "Bounds for particular clients, as an array of tables with `user` (the principal's "
        "name), `client.id`, or both, and `bytes.per.second`; the most specific entry applies "
        "(both, then user, then client id).",
    )
    quota_window_num: int = setting(
        "quota.window.num",
        11,
        "Windows over which client quotas measure the fetch rate.",
        kafka="quota.window.num",
    )
    quota_window_size_seconds: int = setting(
        "quota.window.size.seconds",
        1,
        "Length of one client-quota window in seconds.",
        kafka="quota.window.size.seconds",
    )
    list_offsets_kip405_minus_3: bool = setting(
        "remote.list.offsets.kip405.sentinels",
        False,
        "Answer ListOffsets timestamp -3 as EARLIEST_LOCAL (KIP-405's text) in request "
        "versions 7+ too, where Kafka means MAX_TIMESTAMP; for clients built on the KIP.",
    )

    def __post_init__(self) -> None:
        positive = {
            "remote.log.reader.threads": self.reader_threads,
            "remote.log.manager.fetch.max.bytes.per.second": self.fetch_max_bytes_per_second,
            "remote.log.manager.fetch.quota.window.num": self.fetch_quota_window_num,
            "remote.log.manager.fetch.quota.window.size.seconds": (
                self.fetch_quota_window_size_seconds
            ),
            "remote.fetch.chunk.size.bytes": self.chunk_size_bytes,
            "remote.fetch.session.cache.slots": self.session_cache_slots,
            "remote.fetch.client.quota.bytes.per.second": self.client_quota_bytes_per_second,
            "quota.window.num": self.quota_window_num,
            "quota.window.size.seconds": self.quota_window_size_seconds,
        }
        for key, value in positive.items():
            if value < 1:
                raise ConfigError(f"{key} must be at least 1, not {value}")
        not_negative = {
            "remote.fetch.max.wait.ms": self.max_wait_ms,
            "remote.fetch.broker.check.reuse.ms": self.broker_check_reuse_ms,
            "remote.log.reader.max.pending.tasks": self.reader_max_pending_tasks,
            "remote.fetch.chunk.cache.size.bytes": self.chunk_cache_size_bytes,
            "remote.fetch.chunk.prefetch.chunks": self.chunk_prefetch_chunks,
            "remote.fetch.chunk.read.ahead.max.bytes": self.chunk_read_ahead_max_bytes,
            "remote.fetch.chunk.cache.disk.size.bytes": self.chunk_cache_disk_size_bytes,
            "remote.fetch.offload.min.lag.records": self.offload_min_lag_records,
            "remote.fetch.offload.min.lag.bytes": self.offload_min_lag_bytes,
        }
        for key, value in not_negative.items():
            if value < 0:
                raise ConfigError(f"{key} must not be negative, not {value}")
        self.client_quota_bounds()

    def client_quota_bounds(self) -> dict[tuple[str | None, str | None], int]:
        """``remote.fetch.client.quotas`` as (principal, client id) -> bytes per second.

        :raises ConfigError: for an entry without a bound, or naming neither user nor client.
        """
        bounds: dict[tuple[str | None, str | None], int] = {}
        for entry in self.client_quotas:
            unknown = set(entry) - {"user", "client.id", "bytes.per.second"}
            user, client_id = entry.get("user"), entry.get("client.id")
            bound = entry.get("bytes.per.second")
            if unknown or (user is None and client_id is None):
                raise ConfigError(
                    "each remote.fetch.client.quotas entry has `user`, `client.id` or both, "
                    f"and `bytes.per.second`; not {dict(entry)!r}"
                )
            if not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
                raise ConfigError(
                    f"remote.fetch.client.quotas: bytes.per.second must be a positive "
                    f"integer, not {bound!r}"
                )
            principal = None if user is None else f"User:{user}"
            bounds[(principal, None if client_id is None else str(client_id))] = bound
        return bounds
