"""Fetch quotas per client for the bytes the remote tier serves, with Kafka's semantics.

The broker's own fetch quota sees only the probes of remote-served partitions, so the bytes
the proxy serves from the remote tier would escape it. The proxy therefore keeps the same
kind of quota for them, per quota entity — the client's principal (``User:name``, when its
SASL login showed it, see :mod:`proxy.interceptors.sasl_identity`) and its client id — as
Kafka's ``ClientQuotaManager`` does for fetch bytes:

- The rate is measured over ``quota.window.num`` windows of ``quota.window.size.seconds``.
- A Fetch whose remote bytes would take the rate above the entity's bound is not served
  those bytes: its remote partitions answer with no records and no error, and the response
  carries ``throttle_time_ms`` = (O - T) / T * W (observed rate O, target T, measured span
  W: ``QuotaUtils.throttleTime``); clients wait that long before fetching again (KIP-219).
  As in Kafka, a throttled Fetch's bytes are not counted.
- While the broker throttles a client itself (its answer carries a throttle time), the
  proxy serves it no remote bytes either, and the response keeps the longer throttle.

Bounds: the most specific entry of ``remote.fetch.client.quotas`` (user and client id, then
user, then client id) or ``remote.fetch.client.quota.bytes.per.second`` for everyone else.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from proxy.remote.quota import FetchQuota

__all__ = ["ClientQuotas", "QuotaEntity"]

_ENTITIES_KEPT: Final = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaEntity:
    """Whom a quota applies to: Kafka's (user, client-id) quota entity."""

    principal: str | None
    client_id: str | None


class ClientQuotas:
    """Per-entity byte rates of remote fetches and their throttle times."""

    def __init__(
        self,
        *,
        default_bytes_per_second: int,
        bounds: Mapping[tuple[str | None, str | None], int],
        window_num: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``bounds`` maps (principal, client id) — either may be ``None``: any — to bytes
        per second."""
        self._default = default_bytes_per_second
        self._bounds = dict(bounds)
        self._window_num = window_num
        self._window_seconds = window_seconds
        self._clock = clock
        self._rates: LRUCache[QuotaEntity, FetchQuota] = LRUCache(_ENTITIES_KEPT)
        self.throttle_ms: LRUCache[QuotaEntity, int] = LRUCache(_ENTITIES_KEPT)
        """Total throttle time given to each entity (for the metrics)."""

    def bound(self, entity: QuotaEntity) -> int:
        """The entity's bytes per second: the most specific configured bound."""
        for key in (
            (entity.principal, entity.client_id),
            (entity.principal, None),
            (None, entity.client_id),
        ):
            if key in self._bounds:
                return self._bounds[key]
        return self._default

    def throttle_time_ms(self, entity: QuotaEntity) -> int:
        """How long the entity must wait now (0 when within its quota)."""
        rate = self._rates.get(entity)
        bound = self.bound(entity)
        if rate is None or rate.rate() <= bound:
            return 0
        return self._throttle(entity, rate, rate.rate(), bound)

    def record(self, entity: QuotaEntity, nbytes: int) -> int:
        """Count ``nbytes`` for ``entity``; the throttle time if that breaks its quota, in
        which case the bytes are not served and not counted (Kafka's unrecord)."""
        if nbytes <= 0:
            return 0
        rate = self._rates.get(entity)
        if rate is None:
            rate = self._rates[entity] = FetchQuota(
                bytes_per_second=max(1, self.bound(entity)),
                window_num=self._window_num,
                window_seconds=self._window_seconds,
                clock=self._clock,
            )
        bound = self.bound(entity)
        rate.record(nbytes)
        observed = rate.rate()
        if observed <= bound:
            return 0
        throttle = self._throttle(entity, rate, observed, bound)
        rate.record(-nbytes)
        return throttle

    def _throttle(self, entity: QuotaEntity, rate: FetchQuota, observed: float, bound: int) -> int:
        throttle = math.ceil((observed - bound) / bound * rate.window_seconds() * 1000)
        self.throttle_ms[entity] = self.throttle_ms.get(entity, 0) + throttle
        return throttle
