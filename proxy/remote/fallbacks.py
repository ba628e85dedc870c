"""Offsets the remote tier failed to serve although the broker still holds them.

Under the offload policy the remote tier serves ranges the broker still has. When such a
read misses — the transaction's outcome is not tiered yet (READ_COMMITTED), the object was
deleted or damaged, the store is down — the broker can serve it, so it does: the Fetch
answers that partition with no records and no error (the client asks again at once), and
from then on the planner leaves it to the broker from that offset:

- until more is tiered (the remote end moves) for misses that stay misses until then
  (an unresolved transaction, a missing or damaged object);
- for ``STORE_OUTAGE_SECONDS`` after a storage error, which may pass.

A partition the broker does not hold any more keeps its remote error (there is no one else
to serve it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from proxy.remote.offsets import RemoteRange
from storage.model import TopicIdPartition

__all__ = ["STORE_OUTAGE_SECONDS", "BrokerFallbacks"]

STORE_OUTAGE_SECONDS: Final = 30.0
_PARTITIONS_KEPT: Final = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fallback:
    remote_end: int
    offset: int
    read_committed_only: bool
    until: float | None


class BrokerFallbacks:
    """Per partition, from which offset offloaded reads go back to the broker."""

    def __init__(
        self, *, capacity: int = _PARTITIONS_KEPT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fallbacks: LRUCache[TopicIdPartition, _Fallback] = LRUCache(capacity)
        self._clock = clock

    def remember(
        self,
        tp: TopicIdPartition,
        remote: RemoteRange,
        offset: int,
        *,
        read_committed_only: bool = False,
        for_seconds: float | None = None,
    ) -> None:
        """Reads of ``tp`` from ``offset`` go to the broker (see the module docstring)."""
        until = None if for_seconds is None else self._clock() + for_seconds
        self._fallbacks[tp] = _Fallback(
            remote_end=remote.end,
            offset=offset,
            read_committed_only=read_committed_only,
            until=until,
        )

    def applies(
        self, tp: TopicIdPartition, remote: RemoteRange, offset: int, *, read_committed: bool
    ) -> bool:
        """Whether a read of ``tp`` at ``offset`` should go to the broker."""
        found = self._fallbacks.get(tp)
        if found is None or found.remote_end != remote.end or offset < found.offset:
            return False
        if found.until is not None and self._clock() >= found.until:
            del self._fallbacks[tp]
            return False
        return read_committed or not found.read_committed_only
