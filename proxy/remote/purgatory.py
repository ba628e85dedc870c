"""The remote fetch purgatory: how long a Fetch waits for its remote reads.

Kafka parks a Fetch with remote partitions in ``RemoteFetchPurgatory`` (a
``DelayedRemoteFetch``) until its reads complete or the delay expires; on expiry it answers
with what it has, and the partitions whose reads are still running get no records and no
error, so the consumer asks again. The rules here:

- A Fetch waits until every one of its reads is done, or until ``remote.fetch.max.wait.ms``
  has passed, whichever comes first, whatever the request's own max wait: Kafka's
  ``ReplicaManager.processRemoteFetch`` parks a ``DelayedRemoteFetch`` for
  ``remoteFetchMaxWaitMs`` (KIP-1018 gave remote reads their own bound). A consumer with
  ``fetch.max.wait.ms=0`` therefore still sees a cold read complete, instead of polling
  in a tight loop and never getting the data.
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

    async def wait(self, reads: Collection[asyncio.Future[Any]]) -> bool:
        """Wait for ``reads`` within the Fetch's deadline; ``True`` if all finished.

        Unfinished reads keep running; their exceptions are marked retrieved so that a
        read nobody waits for anymore is not reported as an unhandled error.
        """
        pending = [read for read in reads if not read.done()]
        if not pending:
            return True
        self.size += 1
        try:
            _done, still = await asyncio.wait(pending, timeout=max(0, self.max_wait_ms) / 1000)
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
