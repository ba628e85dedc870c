"""The Fetches between their request and their response, per connection, bounded in memory.

The Fetch interceptor plans a Fetch when its request passes (which partitions the remote
tier serves, the reads started at once) and needs that plan again when the broker's answer
comes back. Plans are kept by (connection, correlation id) in an LRU bounded by an estimate
of the bytes they hold; a closed connection's plans go at once, and an evicted or dropped
plan's queued reads are cancelled (its response then passes as the broker sent it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from cachetools import Cache, LRUCache

from protocol.fetch_bodies import FetchRequestView, PartitionKey
from proxy.remote.fetch_plan import TieredPartition
from proxy.remote.reads import Started
from proxy.remote.sessions import SessionView

__all__ = ["FetchInFlight", "FetchesInFlight", "estimated_size"]

_PLAN_BYTES_KEPT: Final = 64 * 1024 * 1024
"""Memory for the plans of Fetches between request and response (an estimate, see
:func:`estimated_size`): a closed connection's plans are dropped at once, so this bound only
bites with very many Fetches in flight; the oldest plans then go, their queued reads
cancelled, and their responses pass as the broker sent them."""
_PLAN_BYTES: Final = 512
_PARTITION_PLAN_BYTES: Final = 300


@dataclass(slots=True, kw_only=True)
class FetchInFlight:
    """One Fetch between its request and its response."""

    view: SessionView
    request: FetchRequestView
    tiered: dict[PartitionKey, TieredPartition]
    started: float
    """Event-loop time when the request went to the broker."""
    early: dict[PartitionKey, Started] = field(default_factory=dict)
    """Reads of remote-served partitions started with the request."""
    alone: bool = False
    """Answered without the broker (see :mod:`proxy.remote.broker_checks`)."""


def estimated_size(plan: FetchInFlight) -> int:
    """About how many bytes a plan holds (its views, positions and read handles)."""
    return _PLAN_BYTES + _PARTITION_PLAN_BYTES * (len(plan.view.client) + len(plan.tiered))


def _cancel_early_reads(plan: FetchInFlight) -> None:
    for started in plan.early.values():
        if isinstance(started, asyncio.Future):
            started.cancel()  # a read still queued never starts; a running one finishes


class _PlanCache(LRUCache[tuple[int, int], FetchInFlight]):
    """Plans by (connection, correlation id), bounded in bytes; evicted plans' queued
    reads are cancelled."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=estimated_size)

    def popitem(self) -> tuple[tuple[int, int], FetchInFlight]:
        key, plan = super().popitem()
        _cancel_early_reads(plan)
        return key, plan

    def peek(self, key: tuple[int, int]) -> FetchInFlight | None:
        """The plan under ``key``, without making it the most recently used."""
        if key not in self:
            return None
        plan: FetchInFlight = Cache.__getitem__(self, key)
        return plan


class FetchesInFlight:
    """The plans of Fetches in flight, with each connection's correlation ids."""

    def __init__(self, *, max_bytes: int = _PLAN_BYTES_KEPT) -> None:
        """:param max_bytes: bound on :func:`estimated_size` of the plans kept."""
        self._plans = _PlanCache(max_bytes)
        self._by_connection: dict[int, set[int]] = {}

    def add(self, connection_id: int, correlation_id: int, plan: FetchInFlight) -> None:
        """Keep ``plan`` until its response comes back (or memory runs short)."""
        self._plans[(connection_id, correlation_id)] = plan
        self._by_connection.setdefault(connection_id, set()).add(correlation_id)

    def get(self, connection_id: int, correlation_id: int) -> FetchInFlight | None:
        """The plan of a Fetch still in flight, left in place and untouched (predicates
        ask this: it changes not even the eviction order)."""
        return self._plans.peek((connection_id, correlation_id))

    def pop(self, connection_id: int, correlation_id: int) -> FetchInFlight | None:
        """The plan of a Fetch whose response came back, forgotten."""
        ids = self._by_connection.get(connection_id)
        if ids is not None:
            ids.discard(correlation_id)
            if not ids:
                del self._by_connection[connection_id]
        return self._plans.pop((connection_id, correlation_id), None)

    def release(self, connection_id: int) -> None:
        """Drop a closed connection's plans and cancel their queued reads."""
        for correlation_id in self._by_connection.pop(connection_id, ()):
            plan = self._plans.pop((connection_id, correlation_id), None)
            if plan is not None:
                _cancel_early_reads(plan)
