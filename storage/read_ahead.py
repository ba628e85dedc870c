"""How far the chunk cache reads ahead of a sequential reader: the sizing rule, pure.

A chunk read ahead helps only if it is whole when the reader gets to it. A GET of one
chunk takes ``get_seconds`` from request to last byte (the time to the first byte, which
object storage spends whatever the size, plus the transfer; a chunk is of no use before its
last byte, so the whole GET is what counts), and the reader uses a chunk every
``seconds_per_chunk``. For the reader never to wait, ``get_seconds / seconds_per_chunk``
chunks must be in flight at all times: the bandwidth-delay product, in chunks (a reader at
500 MiB/s behind 55 ms GETs needs 27.5 MiB, seven 4 MiB chunks). Twice that absorbs GETs
slower than the average and a reader that speeds up.

The feedback is stable: a reader held back by too shallow a read-ahead reads at the rate
the GETs in flight deliver, ``depth`` chunks per GET, so the next sizing asks for twice
``depth``, until the reader is no longer held back or the bound is reached.

Bounds: at least ``prefetch_chunks`` (the operator's floor, and the depth while the
reader's rate or the GETs' time is not known yet), at most :data:`MAX_READ_AHEAD_BYTES`
and the read-ahead memory budget (``remote.fetch.chunk.read.ahead.max.bytes``). The budget
is apart from the cache's memory: chunks read ahead are held outside the cache until read,
so a deep read-ahead evicts no chunk a reader is in (an 8 MiB fetch spans up to three 4 MiB
chunks) or will read again, however small the cache. Why the budget is apart, with the
figures: ``docs/decisions/0009-remote-read-path.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_READ_AHEAD_BYTES", "ReadAheadBounds", "read_ahead_chunks"]

MAX_READ_AHEAD_BYTES: Final = 64 * 1024 * 1024
"""Most bytes read ahead of one sequential reader: twice the bandwidth-delay product of a
reader at 500 MiB/s behind GETs of 60 ms (50 ms to the first byte), with room to spare.
More would hold memory for readers that stop, for little gain."""
_HEADROOM: Final = 2
"""Read-ahead in GET times of the reader's consumption (see the module docstring)."""
_FASTEST_CHUNK_SECONDS: Final = 1e-6
"""A reader that took no measurable time for a chunk is sized as this fast (the bound
applies anyway)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadAheadBounds:
    """Chunks read ahead of one sequential reader, at least and at most."""

    minimum: int
    maximum: int

    @classmethod
    def for_budget(
        cls, *, prefetch_chunks: int, budget_bytes: int, chunk_bytes: int
    ) -> ReadAheadBounds:
        """The bounds of a read-ahead memory budget of ``budget_bytes`` in chunks of
        ``chunk_bytes`` with the floor ``prefetch_chunks`` (0: read-ahead off, both
        bounds 0; a budget below the floor's chunks allows the floor).

        :raises ValueError: for a chunk size below one byte or negative sizes.
        """
        if chunk_bytes < 1 or budget_bytes < 0 or prefetch_chunks < 0:
            raise ValueError("chunk_bytes must be positive and the sizes not negative")
        if prefetch_chunks == 0:
            return cls(minimum=0, maximum=0)
        by_memory = min(MAX_READ_AHEAD_BYTES, budget_bytes) // chunk_bytes
        return cls(minimum=prefetch_chunks, maximum=max(prefetch_chunks, by_memory))


def read_ahead_chunks(
    bounds: ReadAheadBounds, *, get_seconds: float | None, seconds_per_chunk: float | None
) -> int:
    """Chunks to read ahead of a reader that took ``seconds_per_chunk`` for its last chunk,
    when a GET takes ``get_seconds`` (``None``: not measured yet, the minimum)."""
    if get_seconds is None or seconds_per_chunk is None:
        return bounds.minimum
    needed = math.ceil(_HEADROOM * get_seconds / max(seconds_per_chunk, _FASTEST_CHUNK_SECONDS))
    return max(bounds.minimum, min(needed, bounds.maximum))
