"""How far a micro-batch reads: Spark's Kafka source's admission control, as pure logic.

``maxOffsetsPerTrigger`` shares a number of records among the partitions in proportion to
their backlog (``KafkaMicroBatchStream.rateLimit``: a share below one record rounds up, so no
partition starves; above one, down). ``minOffsetsPerTrigger`` holds a micro-batch back until
that many records wait, but never longer than ``maxTriggerDelay`` after the last one ran
(``delayBatch``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["TriggerDelay", "rate_limit"]

K = TypeVar("K")


def rate_limit(limit: int, starts: Mapping[K, int], ends: Mapping[K, int]) -> dict[K, int]:
    """The ends of a micro-batch of about ``limit`` records from ``starts`` towards ``ends``
    (a partition missing from ``starts`` keeps its end)."""
    sizes = {key: end - starts[key] for key, end in ends.items() if key in starts}
    backlog = {key: size for key, size in sizes.items() if size > 0}
    total = sum(backlog.values())
    if total < 1:
        return dict(ends)
    limited = {}
    for key, end in ends.items():
        if key not in backlog:
            limited[key] = end
            continue
        share = limit * (backlog[key] / total)
        records = math.ceil(share) if share < 1 else math.floor(share)
        limited[key] = min(end, starts[key] + records)
    return limited


@dataclass(slots=True)
class TriggerDelay:
    """When a micro-batch with fewer than ``min_records`` new records must wait."""

    min_records: int
    max_delay_ms: int
    last_trigger_ms: int = 0
    """As in Spark, 0 at first: the first micro-batch never waits."""

    def waits(self, new_records: int, now_ms: int) -> bool:
        """Whether to skip this trigger (and, if not, note that a batch runs now)."""
        if now_ms - self.last_trigger_ms >= self.max_delay_ms or new_records >= self.min_records:
            self.last_trigger_ms = now_ms
            return False
        return True
