"""Kafka's leader-epoch checkpoint file and the epoch-lineage rules built on it.

The file is text (``LeaderEpochCheckpointFile``/``CheckpointFile``)::

    0                  <- version
    2                  <- number of entries
    0 0                <- leader epoch, start offset (first offset written in that epoch)
    3 1200

A KIP-405 segment carries the partition's lineage up to the segment's end, so a reader can
tell which epoch wrote which offsets and refuse divergent copies after unclean elections.
The helpers below are the pure parts of ``LeaderEpochFileCache`` over a lineage: a sequence
of :class:`EpochEntry` with strictly increasing epochs and start offsets.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from protocol.indexes import CorruptIndexError

__all__ = [
    "CURRENT_VERSION",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "assign",
    "encode_leader_epoch_checkpoint",
    "end_offset_for_epoch",
    "entries_in_range",
    "epoch_for_offset",
    "parse_leader_epoch_checkpoint",
    "truncate_from_end",
    "truncate_from_start",
]

CURRENT_VERSION = 0
UNDEFINED_EPOCH = -1
"""``OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH``."""
UNDEFINED_EPOCH_OFFSET = -1
"""``OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET``."""
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """The checkpoint file text for ``entries``, as ``CheckpointFile.write`` renders it."""
    entries = list(entries)
    lines = [str(CURRENT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode()


def parse_leader_epoch_checkpoint(data: bytes | memoryview) -> tuple[EpochEntry, ...]:
    """The entries of a checkpoint file, in file order.

    Follows ``CheckpointReadBuffer.read``: an empty file, or one with only a version line, has
    no entries.

    :raises CorruptIndexError: on a wrong version, a malformed line or a count mismatch.
    """
    try:
        text = bytes(data).decode()
    except UnicodeDecodeError as err:
        raise CorruptIndexError("leader-epoch checkpoint is not UTF-8 text") from err
    lines = text.splitlines()
    if not lines:
        return ()
    if _to_int(lines[0]) != CURRENT_VERSION:
        raise CorruptIndexError(f"unknown leader-epoch checkpoint version {lines[0]!r}")
    if len(lines) == 1:
        return ()
    expected = _to_int(lines[1])
    entries = []
    for line in lines[2:]:
        fields = _WHITESPACE.split(line)
        if len(fields) != 2:
            raise CorruptIndexError(f"malformed leader-epoch checkpoint line {line!r}")
        entries.append(EpochEntry(epoch=_to_int(fields[0]), start_offset=_to_int(fields[1])))
    if len(entries) != expected:
        raise CorruptIndexError(
            f"leader-epoch checkpoint announces {expected} entries but has {len(entries)}"
        )
    return tuple(entries)


def _to_int(field: str) -> int:
    try:
        return int(field)
    except ValueError as err:
        raise CorruptIndexError(f"malformed leader-epoch checkpoint field {field!r}") from err


def assign(entries: Sequence[EpochEntry], epoch: int, start_offset: int) -> tuple[EpochEntry, ...]:
    """The lineage after a leader of ``epoch`` wrote its first batch at ``start_offset``.

    ``LeaderEpochFileCache.assign``: nothing changes if ``epoch`` is already the latest and
    starts no later; otherwise every entry whose epoch or start offset is not below the new
    one is dropped (the log was truncated), and the new entry is appended.

    :raises ValueError: for a negative epoch or start offset.
    """
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
    if entries and entries[-1].epoch == epoch and entries[-1].start_offset <= start_offset:
        return tuple(entries)
    kept = list(entries)
    while kept and (kept[-1].epoch >= epoch or kept[-1].start_offset >= start_offset):
        kept.pop()
    kept.append(EpochEntry(epoch=epoch, start_offset=start_offset))
    return tuple(kept)


def truncate_from_end(entries: Sequence[EpochEntry], end_offset: int) -> tuple[EpochEntry, ...]:
    """Drop the entries that start at or after ``end_offset`` (exclusive end of the log)."""
    kept = list(entries)
    if end_offset >= 0:
        while kept and kept[-1].start_offset >= end_offset:
            kept.pop()
    return tuple(kept)


def truncate_from_start(entries: Sequence[EpochEntry], start_offset: int) -> tuple[EpochEntry, ...]:
    """The lineage of a log that now starts at ``start_offset``.

    Entries starting at or before it collapse into one: the latest of them, moved to start at
    ``start_offset`` (``LeaderEpochFileCache.truncateFromStart``).
    """
    split = 0
    while split < len(entries) and entries[split].start_offset <= start_offset:
        split += 1
    if split == 0:
        return tuple(entries)
    first = EpochEntry(epoch=entries[split - 1].epoch, start_offset=start_offset)
    return (first, *entries[split:])


def entries_in_range(
    entries: Sequence[EpochEntry], start_offset: int, end_offset: int
) -> tuple[EpochEntry, ...]:
    """The lineage restricted to ``[start_offset, end_offset)``.

    ``LeaderEpochFileCache.epochEntriesInRange``; a negative ``start_offset`` keeps the start.
    KIP-405 segments store ``entries_in_range(lineage, base, end + 1)`` as their segment
    leader epochs.
    """
    kept = tuple(entries)
    if start_offset >= 0:
        kept = truncate_from_start(kept, start_offset)
    return truncate_from_end(kept, end_offset)


def end_offset_for_epoch(
    entries: Sequence[EpochEntry], epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """``(epoch, end offset)`` for an OffsetForLeaderEpoch request on this lineage.

    ``LeaderEpochFileCache.endOffsetFor``: the end offset of ``epoch`` is the start of the
    next higher epoch, or ``log_end_offset`` if ``epoch`` is the latest. The returned epoch
    is the largest known epoch ``<= epoch``; a requested epoch below every known one answers
    with itself and the first epoch's start. An undefined request, or one above every known
    epoch, answers ``(-1, -1)``.
    """
    if epoch == UNDEFINED_EPOCH:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries and entries[-1].epoch == epoch:
        return epoch, log_end_offset
    epochs = [e.epoch for e in entries]
    higher = bisect.bisect_right(epochs, epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return epoch, entries[0].start_offset
    return entries[higher - 1].epoch, entries[higher].start_offset


def epoch_for_offset(entries: Sequence[EpochEntry], offset: int) -> int | None:
    """The epoch that wrote ``offset``, or ``None`` if it lies before the lineage.

    ``LeaderEpochFileCache.epochForOffset``: the epoch of the last entry starting at or
    before ``offset``.
    """
    starts = [e.start_offset for e in entries]
    index = bisect.bisect_right(starts, offset)
    return entries[index - 1].epoch if index else None
