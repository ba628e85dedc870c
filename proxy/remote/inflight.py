"""The plan of one Fetch between its request and its response.

The Fetch interceptor plans a Fetch when its request passes (which partitions the remote
tier serves, the reads started at once) and needs that plan again when the broker's answer
comes back. The plan lives in the Fetch's exchange (:mod:`proxy.interceptors.fetch`), which
the connection keeps until the response is written or the connection closes: it is never
dropped while its Fetch is outstanding. Its :func:`estimated_size` counts against the bound
on what requests in flight may hold (:mod:`proxy.exchange_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from protocol.fetch_bodies import FetchRequestView, PartitionKey
from proxy.remote.fetch_plan import TieredPartition
from proxy.remote.reads import Started
from proxy.remote.sessions import SessionView

__all__ = ["FetchInFlight", "estimated_size"]

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
