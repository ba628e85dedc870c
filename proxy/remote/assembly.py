"""Putting a Fetch response together: the broker's partitions and the remote reads, within
the request's ``max_bytes`` and the client's remote fetch quota.

Each remote-served partition gets whole batches from the one holding its fetch offset,
within its ``partition_max_bytes`` and what the other partitions left of the request's
``max_bytes`` (at least one batch when the response would otherwise be empty, KIP-74), below
the broker's high watermark (last stable offset for READ_COMMITTED), with error NONE,
``log_start_offset`` = the whole log's start, and for READ_COMMITTED the aborted
transactions of the range.

Partitions take turns: those that got records least recently come first, as Kafka's fetch
sessions move partitions that returned data to the end. Otherwise, with the broker's
partitions always first, a remote batch larger than what they left would never fit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from protocol.buffers import Buffers
from protocol.errors import KafkaError
from protocol.fetch_bodies import FetchedPartition, FetchResponseEditor, PartitionKey
from protocol.records import batches_below, fit_batches, next_offset_after
from proxy.remote.broker_view import PartitionState
from proxy.remote.client_quotas import ClientQuotas, QuotaEntity
from proxy.remote.fetch_plan import TieredPartition
from proxy.remote.inflight import FetchInFlight
from proxy.remote.reads import RemoteReads, Started

__all__ = ["LocalRecords", "RemoteRead", "ResponseAssembler"]

_NONE: Final = int(KafkaError.NONE)
_CONNECTIONS_KEPT: Final = 100_000
"""Connections whose partitions' turns are remembered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRecords:
    """A partition the broker answered with records of its own."""

    key: PartitionKey
    records: bytes | memoryview | Buffers


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteRead:
    """A remote read of one partition, from the broker's answer to the reply's fields."""

    tiered: TieredPartition
    state: PartitionState
    started: Started = None
    retry: bool = False
    """Answer without records and without reading: the broker's log start moved and nobody
    knows yet whether the remote tier still joins it (the next Fetch probes)."""

    @property
    def throttled(self) -> bool:
        """No read was made and no error is to be answered (quota, or no room left)."""
        return self.started is None and not self.retry


class _Turns:
    """Which partitions of one connection got records least recently."""

    __slots__ = ("_last", "_tick")

    def __init__(self) -> None:
        self._last: dict[PartitionKey, int] = {}
        self._tick = 0

    def order(self, entries: list[LocalRecords | RemoteRead]) -> list[LocalRecords | RemoteRead]:
        """``entries`` with those served least recently (or never) first; stable."""
        return sorted(entries, key=lambda e: self._last.get(_key_of(e), -1))

    def served(self, key: PartitionKey) -> None:
        self._tick += 1
        self._last[key] = self._tick


def _key_of(entry: LocalRecords | RemoteRead) -> PartitionKey:
    return entry.key if isinstance(entry, LocalRecords) else entry.tiered.key


class ResponseAssembler:
    """Fills Fetch responses with remote records; remembers each connection's turns."""

    def __init__(self, *, reads: RemoteReads, quotas: ClientQuotas) -> None:
        self._reads = reads
        self._quotas = quotas
        self._turns: LRUCache[int, _Turns] = LRUCache(_CONNECTIONS_KEPT)

    def forget(self, connection_id: int) -> None:
        """Drop a closed connection's turns."""
        self._turns.pop(connection_id, None)

    def fill(
        self,
        connection_id: int,
        plan: FetchInFlight,
        editor: FetchResponseEditor,
        entity: QuotaEntity,
        entries: list[LocalRecords | RemoteRead],
    ) -> int:
        """Put the partitions' records into the response within its ``max_bytes``; the bytes.

        A broker partition that comes later keeps the whole batches that fit. The remote
        bytes then count against the client's quota; if they break it, they are not served
        (see :mod:`proxy.remote.client_quotas`).
        """
        turns = self._turns.get(connection_id)
        if turns is None:
            turns = self._turns[connection_id] = _Turns()
        filled = 0
        replies: list[tuple[RemoteRead, FetchedPartition]] = []
        for entry in turns.order(entries):
            room = max(0, plan.request.max_bytes - filled)
            records: bytes | memoryview | Buffers
            if isinstance(entry, LocalRecords):
                records = fit_batches(entry.records, room, at_least_one=filled == 0)
                if len(records) < len(entry.records):
                    editor.set_records(entry.key, records)
            else:
                reply = self.reply(entry, plan, room, first=filled == 0)
                replies.append((entry, reply))
                records = reply.records
            if records:
                turns.served(_key_of(entry))
            filled += len(records)
        remote_bytes = sum(len(reply.records) for _read, reply in replies)
        throttle = self._quotas.record(entity, remote_bytes)
        if throttle > 0:
            replies = [(read, self.reply(read, plan, None)) for read, _reply in replies]
            editor.set_throttle_time_ms(max(editor.throttle_time_ms, throttle))
            filled -= remote_bytes
        for read, reply in replies:
            self._reads.served(read.tiered.tp, len(reply.records))
            editor.put(reply)
        return filled

    def reply(
        self, read: RemoteRead, plan: FetchInFlight, room: int | None, *, first: bool = False
    ) -> FetchedPartition:
        """The partition entry for a remote-served partition; with no ``room`` (throttled),
        its error if any but no records."""
        state, tiered = read.state, read.tiered
        high_watermark = _known(state.high_watermark)
        last_stable_offset = _known(state.last_stable_offset)
        read_committed = plan.request.read_committed
        error, aborted = _NONE, None
        records: bytes | memoryview | Buffers = b""
        if isinstance(read.started, int):
            error = read.started
        elif isinstance(read.started, asyncio.Future) and room is not None:
            outcome = self._reads.settle(tiered, read.started)
            error = outcome.error
            if outcome.records is not None:
                result = outcome.records
                bound = last_stable_offset if read_committed else high_watermark
                records = result.records
                if 0 <= bound <= result.segment.end_offset:  # else all are below: no scan
                    records = batches_below(records, bound)
                records = fit_batches(records, room, at_least_one=first)
                if read_committed:
                    end = next_offset_after(records)
                    aborted = tuple(t for t in result.aborted if t.first_offset < end)
        return FetchedPartition(
            key=tiered.key,
            error=error,
            high_watermark=high_watermark,
            last_stable_offset=last_stable_offset,
            log_start_offset=state.whole_log_start(tiered.remote),
            records=records,
            aborted=aborted if read_committed else None,
        )


def _known(value: int | None) -> int:
    return -1 if value is None else value
