"""Host-wide budgets divided among the workers, so that a host's total stays as configured.

Each worker is a whole proxy: without this, N workers would run N times the configured
reader threads, cache bytes and S3 connections. What is divided (each share rounded down,
never below its minimum):

- ``remote.log.reader.threads`` and ``remote.log.reader.max.pending.tasks`` (reads at once
  and queued), ``remote.log.storage.s3.max.connections``;
- memory: ``remote.fetch.chunk.cache.size.bytes``, ``remote.fetch.chunk.read.ahead.max.bytes``,
  ``remote.log.index.file.cache.total.size.mb``, ``remote.fetch.session.cache.slots``;
- disk: ``remote.fetch.chunk.cache.disk.size.bytes``; the disk tiers' directories
  (``remote.fetch.chunk.cache.dir``, ``remote.log.index.file.cache.dir``) get a
  ``worker-<i>`` subdirectory each, since neither cache coordinates writers across
  processes;
- ``remote.log.manager.fetch.max.bytes.per.second`` (the host's remote read rate, unless
  unlimited) and ``ssl.handshake.max.pending``.

Not divided: per-client quotas (``remote.fetch.client.quota.*``), which bound each client as
Kafka's quotas bound it per broker, timeouts, the connections to Google Cloud Storage or
Azure Blob Storage (a constant of :mod:`storage.rsm.http_objects`, not a setting: each
worker keeps its own), and the metadata view: each worker consumes the metadata topic
itself into its own snapshot slot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from proxy.config import ProxyConfig
from proxy.remote.config import RemoteFetchConfig
from storage.config import describe
from storage.index_cache import IndexCacheConfig
from storage.rsm.config import RemoteStorageConfig

__all__ = ["DIVIDED", "PER_WORKER_DIRS", "worker_settings"]

_LONG_MAX: Final = 2**63 - 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Budget:
    key: str
    minimum: int
    unlimited: int | None = None
    """A value that means "no limit": kept as it is."""


DIVIDED: Final = (
    _Budget(key="remote.log.reader.threads", minimum=1),
    _Budget(key="remote.log.reader.max.pending.tasks", minimum=1),
    _Budget(key="remote.log.storage.s3.max.connections", minimum=2),
    _Budget(key="remote.fetch.chunk.cache.size.bytes", minimum=0),
    _Budget(key="remote.fetch.chunk.read.ahead.max.bytes", minimum=0),
    _Budget(key="remote.log.index.file.cache.total.size.mb", minimum=1),
    _Budget(key="remote.fetch.session.cache.slots", minimum=1),
    _Budget(key="remote.fetch.chunk.cache.disk.size.bytes", minimum=0),
    _Budget(key="remote.log.manager.fetch.max.bytes.per.second", minimum=1, unlimited=_LONG_MAX),
    _Budget(key="ssl.handshake.max.pending", minimum=1),
)
"""The budgets divided among workers."""

PER_WORKER_DIRS: Final = ("remote.fetch.chunk.cache.dir", "remote.log.index.file.cache.dir")
"""Directories each worker gets a subdirectory of."""

_DEFAULTS: Final = {
    info.key: info.default
    for config_class in (ProxyConfig, RemoteFetchConfig, IndexCacheConfig, RemoteStorageConfig)
    for info in describe(config_class)
}


def worker_settings(settings: Mapping[str, Any], *, index: int, count: int) -> dict[str, Any]:
    """The settings of worker ``index`` (from 0) of ``count``: ``settings`` with every
    budget of :data:`DIVIDED` divided by ``count`` and the disk tiers in subdirectories.
    One worker gets ``settings`` unchanged."""
    mine = dict(settings)
    if count <= 1:
        return mine
    for budget in DIVIDED:
        value = mine.get(budget.key, _DEFAULTS[budget.key])
        if not isinstance(value, int) or isinstance(value, bool) or value == budget.unlimited:
            continue  # a wrong type is the config classes' to report
        mine[budget.key] = max(budget.minimum, value // count)
    for key in PER_WORKER_DIRS:
        directory = str(mine.get(key, _DEFAULTS[key]))
        if directory:
            mine[key] = str(Path(directory) / f"worker-{index}")
    return mine
