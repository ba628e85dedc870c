"""READ_COMMITTED reads that reach a transaction the remote tier cannot resolve yet.

The remote tier holds a transaction's outcome only once the segment with its commit or abort
marker is tiered. Under the offload policy, a READ_COMMITTED read from the remote tier that
reaches such a transaction fails with ``UnresolvedTransactionError`` although the broker
still holds these records and their outcome; the partition is then left to the broker from
that offset on, until more is tiered (the remote end moves) and the remote tier may know.
"""

from __future__ import annotations

from typing import Final

from cachetools import LRUCache

from proxy.remote.offsets import RemoteRange
from storage.model import TopicIdPartition

__all__ = ["UnresolvedTransactions"]

_PARTITIONS_KEPT: Final = 100_000


class UnresolvedTransactions:
    """Per partition, (remote end, offset) from which the broker serves READ_COMMITTED."""

    def __init__(self, *, capacity: int = _PARTITIONS_KEPT) -> None:
        self._from: LRUCache[TopicIdPartition, tuple[int, int]] = LRUCache(capacity)

    def remember(self, tp: TopicIdPartition, remote: RemoteRange, offset: int) -> None:
        """READ_COMMITTED reads of ``tp`` from ``offset`` cannot be resolved remotely now."""
        self._from[tp] = (remote.end, offset)

    def blocks(self, tp: TopicIdPartition, remote: RemoteRange, offset: int) -> bool:
        """Whether a READ_COMMITTED read at ``offset`` should go to the broker."""
        found = self._from.get(tp)
        return found is not None and found[0] == remote.end and offset >= found[1]
