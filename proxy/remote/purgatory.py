"""The remote fetch purgatory: how long a Fetch waits for its remote reads.

Kafka parks a Fetch with remote partitions in ``RemoteFetchPurgatory`` (a
``DelayedRemoteFetch``) until its reads complete or the delay expires; on expiry it answers
with what it has, and the partitions whose reads are still running get no records and no
error, so the consumer asks again. The rules here:

- A Fetch waits until every one of its reads is done, or until ``min(request max wait,
  remote.fetch.max.wait.ms)`` has passed, whichever comes first (KIP-1018 gave remote
  reads their own bound so that a slow store does not hold a consumer for its whole
  ``fetch.max.wait.ms``, and a consumer asking for less is not held longer than it asked).
- Waiting never cancels a read: the reads belong to the reader pool, and one that
  finishes after its Fetch left still fills the caches the next Fetch reads from.
- ``size`` counts Fetches currently waiting, ``expirations`` those that left with reads
  still running (Kafka's ``DelayedRemoteFetchMetrics.expiredRequestMeter``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

__all__ = ["RemoteFetchPurgatory"]


class RemoteFetchPurgatory:
    """Bounds the wait of each Fetch for its remote reads."""

    def __init__(self, *, max_wait_ms: int) -> None:
        self.max_wait_ms = max_wait_ms
        self.size = 0
        self.expirations = 0

    def deadline_seconds(self, request_max_wait_ms: int) -> float:
        """How long a Fetch with this ``max_wait_ms`` may wait for remote reads."""
        return max(0, min(request_max_wait_ms, self.max_wait_ms)) / 1000

    async def wait(self, reads: Collection[asyncio.Future[Any]], request_max_wait_ms: int) -> bool:
        """Wait for ``reads`` within the Fetch's deadline; ``True`` if all finished.

        Unfinished reads keep running; their exceptions are marked retrieved so that a
        read nobody waits for anymore is not reported as an unhandled error.
        """
        pending = [read for read in reads if not read.done()]
        if not pending:
            return True
        self.size += 1
        try:
            _done, still = await asyncio.wait(
                pending, timeout=self.deadline_seconds(request_max_wait_ms)
            )
        finally:
            self.size -= 1
        if not still:
            return True
        self.expirations += 1
        for read in still:
            read.add_done_callback(_retrieve)
        return False


def _retrieve(read: asyncio.Future[Any]) -> None:
    if not read.cancelled():
        read.exception()
