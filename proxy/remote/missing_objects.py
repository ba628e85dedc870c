"""Objects that the metadata lists as readable but remote storage does not have.

Rules of this file:

- A finding comes from a read (:class:`~storage.remote_reader.RemoteLogReader` reports the
  segment and the object key when storage answers "not found" for a segment the metadata
  still lists as readable) or from the start-up sample
  (:func:`storage.startup.check_segment_sample`). The read itself is answered
  KAFKA_STORAGE_ERROR (:mod:`proxy.remote.reads`), so clients retry and skip nothing.
- Each finding is logged as one ``remote.object.missing`` WARNING naming the topic,
  partition, segment id and object key, rate-limited: a segment at most once per
  :data:`LOG_EVERY_SECONDS` (a consumer retrying in a loop asks for it many times a
  second), and lines across segments through a token bucket (the burst, then about one a
  second); the next line says how many were left out (``suppressed_before``).
- ``/readyz`` shows the count (:meth:`MissingObjects.verdict`, the check ``remote_objects``)
  but always passes it: every proxy reads the same store, so failing readiness for a missing
  object would take every proxy, and all the traffic they pass through, out of service for
  the loss of a few segments. Names stay out of it (``/readyz`` names no topic); the log has
  them.
- A segment stays missing until :meth:`MissingObjects.recheck` finds its ``.log`` again (a
  HEAD or stat, one line ``remote.object.restored``; a missing index file with its ``.log``
  present is found again by the next read of it) or the metadata stops listing it as
  readable (retention or a topic deletion removed it on purpose). So :meth:`status` and the
  gauge ``tierproxy_remote_missing_objects`` say what is missing now, for readiness
  reports and alerts.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from proxy.bad_connections import LOG_BURST, LOG_PER_SECOND, TokenBucket
from proxy.health import Verdict
from proxy.logs import event
from storage.model import RemoteLogSegmentMetadata
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError, SegmentProbe
from storage.startup import SampledMetadata, check_segment_sample

__all__ = [
    "LOG_EVERY_SECONDS",
    "MAX_TRACKED",
    "RECHECK_SECONDS",
    "MissingObjects",
    "MissingObjectsStatus",
    "watch_objects",
]

_log = logging.getLogger("tierproxy.remote")

LOG_EVERY_SECONDS: Final = 60.0
"""One line per missing segment per minute: a retrying consumer finds it missing several
times a second, and the gauge and the error counter show it in between."""
MAX_TRACKED: Final = 10_000
"""Segments remembered as missing at most (about 300 bytes each); past it the oldest
finding is forgotten, and found again by the next read of it. A whole tier gone shows
long before that many segments are read."""
RECHECK_PER_ROUND: Final = 100
"""Missing segments a :meth:`MissingObjects.recheck` asks storage about: one HEAD each,
eight at a time, so a round stays short whatever is missing."""
RECHECK_SECONDS: Final = 60.0
"""How often segments known missing are looked for again (a HEAD each, bounded per round)."""
_RECHECK_CONCURRENCY: Final = 8
_STATUS_KEYS: Final = 10
"""Object keys a status lists, newest first: enough to recognise a pattern (one topic, one
prefix), few enough for a health answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MissingObjectsStatus:
    """What is missing now, for ``/readyz`` and ``tierproxy status``-style reports."""

    count: int
    """Segments whose objects are known missing now."""
    last_key: str | None
    """The object of the latest finding."""
    last_seen: float | None
    """When that was, in seconds since the epoch."""
    keys: tuple[str, ...]
    """Up to ten missing objects, newest finding first."""

    def as_dict(self) -> dict[str, Any]:
        """The status as JSON members (``missing_objects``, ``last_key``, ``last_seen``,
        ``keys``)."""
        return {
            "missing_objects": self.count,
            "last_key": self.last_key,
            "last_seen": self.last_seen,
            "keys": list(self.keys),
        }


@dataclass(slots=True, kw_only=True)
class _Missing:
    segment: RemoteLogSegmentMetadata
    key: str
    seen: float
    """Wall-clock time of the latest finding."""
    logged: float
    """Monotonic time of its latest line."""
    checked: float
    """Monotonic time storage was last asked about it (or it was found)."""


class MissingObjects:
    """Missing remote objects: logged, counted, re-checked (see the module docstring).

    A :class:`~storage.remote_reader.MissingObjectReport`; its methods run on the event loop.
    """

    def __init__(
        self,
        *,
        readable: Callable[[RemoteLogSegmentMetadata], bool],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """:param readable: whether the metadata still lists a segment as readable."""
        self._readable = readable
        self._clock = clock
        self._wall_clock = wall_clock
        self._missing: OrderedDict[uuid.UUID, _Missing] = OrderedDict()
        """By segment id, the latest finding last."""
        self._lines = TokenBucket(LOG_BURST, LOG_PER_SECOND, clock)
        self._suppressed = 0
        self._last: tuple[str, float] | None = None

    @property
    def count(self) -> int:
        """Segments whose objects are known missing now."""
        return len(self._missing)

    def status(self) -> MissingObjectsStatus:
        """What is missing now (a copy: the caller may keep it)."""
        recent = reversed(self._missing.values())
        keys = tuple(entry.key for entry, _ in zip(recent, range(_STATUS_KEYS), strict=False))
        last_key, last_seen = self._last if self._last is not None else (None, None)
        return MissingObjectsStatus(
            count=len(self._missing), last_key=last_key, last_seen=last_seen, keys=keys
        )

    def verdict(self) -> Verdict:
        """The ``remote_objects`` readiness check: always passing, its reason the count (see
        the module docstring)."""
        count = len(self._missing)
        if not count:
            return Verdict(ok=True, reason="no object known missing")
        return Verdict(
            ok=True,
            reason=f"{count} segment(s) the metadata lists are missing from remote storage "
            "(event=remote.object.missing in the log names them)",
        )

    def object_missing(self, segment: RemoteLogSegmentMetadata, key: str) -> None:
        """Remember and log (rate-limited) that ``key`` of ``segment`` is not in storage."""
        now, wall = self._clock(), self._wall_clock()
        segment_id = segment.segment_id.id
        entry = self._missing.pop(segment_id, None)
        self._last = (key, wall)
        if entry is None:
            entry = _Missing(
                segment=segment, key=key, seen=wall, logged=now - LOG_EVERY_SECONDS, checked=now
            )
            if len(self._missing) >= MAX_TRACKED:
                self._missing.popitem(last=False)
        entry.seen, entry.key = wall, key
        self._missing[segment_id] = entry
        if now - entry.logged < LOG_EVERY_SECONDS:
            return
        if not self._lines.take():
            self._suppressed += 1
            return
        entry.logged = now
        suppressed, self._suppressed = self._suppressed, 0
        tp = segment.topic_id_partition
        event(
            _log,
            logging.WARNING,
            "remote.object.missing",
            topic=tp.topic,
            partition=tp.partition,
            segment=segment_id,
            offsets=f"{segment.start_offset}-{segment.end_offset}",
            key=key,
            meaning="the metadata lists this segment but remote storage does not have it; "
            "its reads get KAFKA_STORAGE_ERROR until it is back",
            **({"suppressed_before": suppressed} if suppressed else {}),
        )

    async def recheck(self, probe: SegmentProbe) -> None:
        """Ask storage again about the missing segments least recently asked about (up to
        :data:`RECHECK_PER_ROUND`); forget those found again or no longer readable."""
        now = self._clock()
        batch = heapq.nsmallest(
            RECHECK_PER_ROUND, self._missing.values(), key=lambda entry: entry.checked
        )
        for entry in batch:
            entry.checked = now
        gate = asyncio.Semaphore(_RECHECK_CONCURRENCY)

        async def check(entry: _Missing) -> None:
            segment_id = entry.segment.segment_id.id
            if not self._readable(entry.segment):
                self._missing.pop(segment_id, None)
                return
            async with gate:
                try:
                    await probe.log_segment_size(entry.segment)
                except RemoteResourceNotFoundError:
                    return
                except RemoteStorageError as err:
                    event(_log, logging.DEBUG, "remote.object.recheck.failed", error=repr(err))
                    return
            if self._missing.pop(segment_id, None) is not None:
                tp = entry.segment.topic_id_partition
                event(
                    _log,
                    logging.INFO,
                    "remote.object.restored",
                    topic=tp.topic,
                    partition=tp.partition,
                    segment=segment_id,
                    key=entry.key,
                )

        await asyncio.gather(*(check(entry) for entry in batch))


async def watch_objects(
    missing: MissingObjects,
    metadata: SampledMetadata,
    probe: SegmentProbe,
    *,
    recheck_seconds: float = RECHECK_SECONDS,
) -> None:
    """The start-up sample (:func:`storage.startup.check_segment_sample`), then a re-check
    of what is missing every ``recheck_seconds``, until cancelled; a failure of either is
    logged and the watch goes on."""
    try:
        await check_segment_sample(metadata, probe, missing, log=_log)
    except Exception:
        event(
            _log,
            logging.ERROR,
            "remote.tier.check.failed",
            msg="remote tier start-up check failed",
            exc_info=True,
        )
    while True:
        await asyncio.sleep(recheck_seconds)
        if missing.count:
            try:
                await missing.recheck(probe)
            except Exception:
                event(
                    _log,
                    logging.ERROR,
                    "remote.object.recheck_failed",
                    msg="re-checking missing remote objects failed",
                    exc_info=True,
                )
