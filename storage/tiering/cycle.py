"""What the steps of one tiering cycle share: the partitions as the driver sees them, the
operator's notes, and the metadata manager they publish through.

The cycle (:mod:`.pipeline`) runs its steps in order; each step is a class of its own
(:mod:`.cleanup`, :mod:`.survey`, :mod:`.copying`, :mod:`.retention_driver`) that receives
what it works with in its constructor, and they hand each other only the values below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final, Protocol

from protocol.metadata_records import MetadataRecord
from storage.kafka_client import TopicMetadata
from storage.model import TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.tiering.fetch_stage import FetchWindow
from storage.tiering.policy import TopicPolicy
from storage.tiering.report import Failure, TopicStats

__all__ = [
    "CLOCK_MARGIN_MS",
    "DEFAULT_BYTES_PER_OFFSET",
    "EndedJobs",
    "MetadataManager",
    "Notes",
    "ScanMemory",
    "TieredPartition",
    "first_line",
    "topic_partition",
    "wall_clock_ms",
]

CLOCK_MARGIN_MS: Final = 60_000
"""How far apart the clocks of the pipeline's hosts (drivers and executors) may be: copy
deadlines are set by one host's clock, obeyed by the executors' and judged by the next
holder's."""

DEFAULT_BYTES_PER_OFFSET = 1024.0
"""Bytes per offset assumed until a sample or the remote tier says better."""


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: what record timestamps are compared with."""
    return int(time.time() * 1000)


class MetadataManager(Protocol):
    """The parts of the topic-based RLMM the pipeline uses."""

    @property
    def cache(self) -> RemoteLogMetadataCache: ...

    @property
    def partition_count(self) -> int:
        """The metadata topic's partitions (tasks publish to the one the RLMM would)."""
        ...

    async def publish(self, record: MetadataRecord) -> None:
        """Publish and return once the record is in :attr:`cache`."""
        ...

    async def wait_until_caught_up(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (the RLMM contract)
        """Return once every record now in the topic (the tasks' too) is in :attr:`cache`."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanMemory:
    """What the last read of a partition found, so a partition whose tail is still open is
    not read again until enough new data can close a segment."""

    start: int
    end: int
    size: int
    first_max_timestamp: int | None


@dataclass(slots=True, kw_only=True)
class TieredPartition:
    """A tiered partition as the driver sees it in this cycle (each step fills in more)."""

    tp: TopicIdPartition
    policy: TopicPolicy
    leader_id: int
    leader_epoch: int
    remote_end: int | None
    log_start: int = -1
    high_watermark: int = -1
    last_stable: int = -1
    first_max_timestamp: int | None = None
    bytes_per_offset: float = DEFAULT_BYTES_PER_OFFSET
    windows: list[FetchWindow] = field(default_factory=list)
    tail: ScanMemory | None = None
    """What stays untiered once this cycle's segments are copied."""
    error: str | None = None

    @property
    def copy_start(self) -> int:
        if self.remote_end is None:
            return self.log_start
        return max(self.remote_end + 1, self.log_start)


class Notes:
    """What the cycles tell the operator: each note once per topic for the pipeline's life,
    and this cycle's authorisation refusals, each naming the missing ACL, in order."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()
        self._denied: dict[Failure, None] = {}

    def first_time(self, topic: str, message: str) -> bool:
        """Whether ``message`` about ``topic`` is new (and remember it from now on)."""
        if (topic, message) in self._reported:
            return False
        self._reported.add((topic, message))
        return True

    def report_once(self, topic: str, message: str, stats: TopicStats) -> None:
        """Add ``message`` to the topic's notes, unless an earlier cycle reported it."""
        if self.first_time(topic, message):
            stats.notes.append(message)

    def deny(self, refusal: Failure) -> None:
        """Record an authorisation refusal of this cycle (the same one once)."""
        self._denied[refusal] = None

    def take_denied(self) -> list[Failure]:
        """This cycle's refusals so far, forgotten once taken."""
        denied = list(self._denied)
        self._denied.clear()
        return denied


class EndedJobs:
    """The start times of this pipeline's copy jobs whose every task has ended (the job
    returned, or Spark confirmed its failed tasks gone): a COPY_SEGMENT_STARTED copy of such a
    job (its event time is the job's start) is a leftover at once, without waiting for the
    job's deadline (:func:`.cleanup.may_still_upload`).

    :param horizon_ms: how long after its start a job's copies wait for their deadline
        anyway (the copy timeout and :data:`CLOCK_MARGIN_MS`): older stamps are forgotten.
    """

    def __init__(self, *, horizon_ms: int) -> None:
        self._horizon_ms = horizon_ms
        self._stamps: set[int] = set()

    def ended(self, stamp: int) -> None:
        """The job that started at ``stamp`` has no task running any more."""
        self._stamps = {s for s in self._stamps if s >= stamp - self._horizon_ms}
        self._stamps.add(stamp)

    def __contains__(self, stamp: object) -> bool:
        return stamp in self._stamps


def topic_partition(topic: TopicMetadata, partition: int) -> TopicIdPartition:
    """Partition ``partition`` of ``topic`` as the metadata names it."""
    return TopicIdPartition(topic_id=topic.topic_id, topic=topic.name, partition=partition)


def first_line(err: Exception) -> str:
    """Spark wraps task failures in pages of Java stack trace; the first line says what."""
    lines = str(err).strip().splitlines()
    return lines[0][:500] if lines else type(err).__name__
