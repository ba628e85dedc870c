"""What a fetch task learns from the batches of its window, without looking at records.

:class:`WindowScanner` is fed each Fetch answer of one window and says which bytes belong to
the window (whole batches whose base offset lies in ``[start, end)``; the first window of a
partition also owns the batch straddling its start), where to fetch next, and when the
window is complete. On the way it records the batch spans the planner cuts segments from
and the producer batches the chain fold needs (see :mod:`.chain`). Pure: bytes in, values
out; the task does the I/O.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from protocol.records import BatchHeader, iter_batches, read_control_record
from storage.tiering.chain import ProducerEvent, ProducerEventFilter
from storage.tiering.planner import BatchSpan

__all__ = ["SPAN_FIELDS", "ScanStep", "WindowScanError", "WindowScanner", "spans_from_array"]

SPAN_FIELDS = 7
"""Values per span in the packed array: position, size, base offset, last offset, first
batch max timestamp, max timestamp, leader epoch."""


class WindowScanError(ValueError):
    """The broker's batches overlap or leave a gap: the window cannot be copied."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanStep:
    """What to do with one Fetch answer."""

    owned: memoryview
    """The bytes of the answer that belong to the window (whole batches), possibly empty."""
    next_offset: int
    """Where to fetch next."""
    done: bool
    """The window is complete: a batch at or past its end was seen, or its end reached."""


class WindowScanner:
    """Follows the batches of one window ``[start, end)`` through successive Fetch answers."""

    def __init__(
        self,
        *,
        start: int,
        end: int,
        owns_straddling_batch: bool,
        span_max_bytes: int,
        span_max_ms: int,
    ) -> None:
        """:param span_max_bytes: merge consecutive batches of one epoch into a span while it
            stays this small (segment cuts fall on span boundaries).
        :param span_max_ms: and while its batches' max timestamps are this close.
        """
        self._start = start
        self._end = end
        self._owns_straddling = owns_straddling_batch
        self._span_max_bytes = span_max_bytes
        self._span_max_ms = span_max_ms
        self._next_offset = start
        self._position = 0
        self._spans = array("q")
        self._span: list[int] | None = None
        self._filter = ProducerEventFilter()
        self.batches = 0

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def size(self) -> int:
        """Bytes owned so far."""
        return self._position

    def feed(self, records: bytes | memoryview) -> ScanStep:
        """Take one Fetch answer for :attr:`next_offset` (a trailing partial batch is ignored).

        :raises RemoteProtocolError: for a corrupt or legacy batch (from :func:`iter_batches`).
        :raises WindowScanError: for overlapping batches or an offset gap.
        """
        view = memoryview(records)
        first: int | None = None
        end = 0
        done = False
        for position, header in iter_batches(view):
            if header.base_offset >= self._end:
                done = True
                break
            if header.base_offset < self._next_offset:
                # Only the batch holding the fetch offset may start earlier: the first
                # window owns it, the others leave it to the window before.
                if first is not None or self.batches or header.last_offset < self._next_offset:
                    raise WindowScanError(
                        f"batch {header.base_offset}..{header.last_offset} overlaps offsets "
                        f"before {self._next_offset}"
                    )
                if not self._owns_straddling:
                    self._next_offset = header.next_offset
                    continue
            elif first is not None and header.base_offset != self._next_offset:
                raise WindowScanError(
                    f"offset gap: batch at {header.base_offset} follows one ending at "
                    f"{self._next_offset - 1}"
                )
            if first is None:
                first = position
            self._add(view, position, header)
            end = position + header.size
            self._next_offset = header.next_offset
        if self._next_offset >= self._end:
            done = True
        owned = view[first:end] if first is not None else view[0:0]
        return ScanStep(owned=owned, next_offset=self._next_offset, done=done)

    def _add(self, view: memoryview, position: int, header: BatchHeader) -> None:
        self.batches += 1
        span = self._span
        if span is not None and (
            span[6] != header.partition_leader_epoch
            or span[1] + header.size > self._span_max_bytes
            or header.max_timestamp - span[4] > self._span_max_ms
        ):
            self._close_span()
            span = None
        if span is None:
            self._span = [
                self._position,
                header.size,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                header.max_timestamp,
                header.partition_leader_epoch,
            ]
        else:
            span[1] += header.size
            span[3] = header.last_offset
            span[5] = max(span[5], header.max_timestamp)
        self._position += header.size
        if header.producer_id >= 0:
            marker = None
            if header.is_control and header.record_count > 0:
                marker = read_control_record(view, position, header)
            self._filter.add(header, marker)

    def _close_span(self) -> None:
        if self._span is not None:
            self._spans.extend(self._span)
            self._span = None
            self._filter.flush()

    def finish(self) -> tuple[bytes, tuple[ProducerEvent, ...]]:
        """The packed spans (see :data:`SPAN_FIELDS`) and the kept producer batches."""
        self._close_span()
        return self._spans.tobytes(), tuple(self._filter.events)


def spans_from_array(window: int, packed: bytes) -> list[BatchSpan]:
    """Unpack the spans a scanner of window ``window`` produced."""
    values = array("q")
    values.frombytes(packed)
    return [
        BatchSpan(
            window=window,
            position=values[i],
            size=values[i + 1],
            base_offset=values[i + 2],
            last_offset=values[i + 3],
            first_max_timestamp=values[i + 4],
            max_timestamp=values[i + 5],
            leader_epoch=values[i + 6],
        )
        for i in range(0, len(values), SPAN_FIELDS)
    ]
