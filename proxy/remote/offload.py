"""The offload policy: serve already-tiered ranges from the remote tier while the broker
still has them (docs/architecture.md "Read path"; beyond KIP-405).

A consumer far behind the head reads data that the broker has long since paged out: every
such Fetch is a cold disk read on the broker, competing with producers and tail consumers.
When the range is already in the remote tier, the proxy can serve it from there instead and
leave the broker's disks to the head of the log. It is off by default; when on, a partition
read is offloaded if its fetch offset lies in the remote tier and the consumer lags the
high watermark by at least ``min_lag_records`` records and (an estimate of)
``min_lag_bytes`` bytes, estimated from the remote segments' bytes per record.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OffloadPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadPolicy:
    """Whether a read that the broker could serve goes to the remote tier instead."""

    enabled: bool = False
    min_lag_records: int = 0
    min_lag_bytes: int = 0

    def offload(
        self,
        *,
        fetch_offset: int,
        remote_start: int,
        remote_end: int,
        high_watermark: int | None,
        bytes_per_record: float,
    ) -> bool:
        """Decide for one partition read.

        :param remote_end: last tiered offset (inclusive).
        :param high_watermark: the broker's, from its last Fetch response; ``None`` when
            not known yet (then only a policy without lag thresholds offloads).
        """
        if not self.enabled or not remote_start <= fetch_offset <= remote_end:
            return False
        if self.min_lag_records == 0 and self.min_lag_bytes == 0:
            return True
        if high_watermark is None:
            return False
        lag = high_watermark - fetch_offset
        return lag >= self.min_lag_records and lag * bytes_per_record >= self.min_lag_bytes
