"""OffsetForLeaderEpoch over the whole log: epochs that only the remote tier still knows.

A consumer validating its position after a leader change (KIP-320) asks for the end offset
of the epoch of the last record it read. A broker answers from its leader-epoch cache,
which forgets the epochs of segments it deleted (``truncateFromStart``): for an epoch older
than its first entry it answers with that epoch and its *local* log start — an end offset
that is too high, so a consumer whose position lies on a divergent branch below it is not
told to truncate. The remote tier keeps those epochs in its segments' lineage.

The rule: when the remote lineage holds a later epoch than the one asked for, the epoch's
end is known from the remote tier alone (the start of the next epoch there), and the
answer is what Kafka's ``LeaderEpochFileCache.endOffsetFor`` gives on that lineage —
unless the broker's own answer is lower (the broker knows a later truncation). When the
asked epoch is the remote tier's last or later, it continues into the local log and the
broker's answer stands. Errors from the broker (fencing, leadership) always stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.indexes.leader_epoch_checkpoint import (
    UNDEFINED_EPOCH,
    EpochEntry,
    end_offset_for_epoch,
)

__all__ = ["EpochEndOffset", "end_offset"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffset:
    """An OffsetForLeaderEpoch answer for one partition."""

    leader_epoch: int
    end_offset: int


def end_offset(
    requested_epoch: int, broker: EpochEndOffset, remote_lineage: Sequence[EpochEntry]
) -> EpochEndOffset:
    """The answer for one partition the broker answered without error."""
    if requested_epoch == UNDEFINED_EPOCH or not remote_lineage:
        return broker
    if remote_lineage[-1].epoch <= requested_epoch:
        return broker
    epoch, offset = end_offset_for_epoch(remote_lineage, requested_epoch, log_end_offset=-1)
    if 0 <= broker.end_offset < offset:
        return broker
    return EpochEndOffset(leader_epoch=epoch, end_offset=offset)
