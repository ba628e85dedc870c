"""The broker's offsets of tiered partitions, asked before their first Fetch.

A partition the remote tier serves still goes to the broker, as a *probe*
(:mod:`proxy.remote.fetch_plan`) placed at the broker's high watermark (its last stable
offset for READ_COMMITTED), where the broker has nothing to read. Those offsets come from the
broker's earlier answers (:class:`~proxy.remote.broker_view.BrokerView`). Before the first
answer the probe can only go just after the remote tier (a *reach probe*), where Kafka reads
and ships one batch (its "at least one batch" allowance) that the proxy throws away; and a
Fetch cannot wait for a question of the proxy's own, since requests reach the broker in the
client's order with nothing queued in between (:mod:`proxy.interceptors.base`).

Clients ask Metadata before they fetch, to learn the leaders. So when a Metadata answer
passes through the proxy (:mod:`proxy.interceptors.metadata_offsets`), the proxy asks the
leader of each tiered partition it names whose offsets it does not know yet, in three
ListOffsets per leader (Kafka answers INVALID_REQUEST for a partition named twice in one
request; ``Partition.fetchOffsetForTimestamp`` gives the offsets):

- LATEST under READ_UNCOMMITTED: the high watermark;
- LATEST under READ_COMMITTED: the last stable offset;
- EARLIEST: the broker's log start, which says whether the remote tier joins its log.

They go at once over the proxy's one connection to each leader (the product's
:class:`~storage.kafka_client.KafkaClient`, logged in with the ``upstream.*`` settings), so
they cost one round trip. A stale answer is harmless: the offsets only grow, and a probe
below the high watermark just carries the records produced since, as any probe may.

Bounds, so that a Metadata answer is never held long:

- at most ``MAX_PARTITIONS`` (1,000) partitions of one Metadata answer are asked about; the
  rest wait for a later answer, or for their reach probe;
- the answer waits at most ``HOLD_SECONDS`` (0.5 s). The questions go on after that (up to
  the proxy client's request timeout) and the broker view still learns their answers, but a
  Fetch sent before then falls back to a reach probe;
- a partition already being asked about is not asked again (a second Metadata answer waits
  for the same questions), and one whose questions failed (broker down,
  NOT_LEADER_OR_FOLLOWER, no Describe right for the proxy's own principal, ...) is not asked
  again for ``RETRY_AFTER_SECONDS`` (30 s).

Nothing here fails or changes a Metadata answer: failures are logged at debug level, and the
partition's first Fetch falls back to the reach probe, which is counted
(``tierproxy_remote_fetch_reach_probes_total``) and logged at debug level with the reason.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from cachetools import LRUCache, TTLCache

from protocol.errors import KafkaError
from proxy.logs import event
from proxy.remote.broker_view import BrokerView
from proxy.remote.offsets import EARLIEST, LATEST, RemoteRange
from storage.kafka_client import READ_COMMITTED, READ_UNCOMMITTED, KafkaClientError, ListedOffset
from storage.model import TopicIdPartition

__all__ = [
    "HOLD_SECONDS",
    "MAX_PARTITIONS",
    "RETRY_AFTER_SECONDS",
    "BrokerOffsets",
    "LedPartition",
    "OffsetLister",
]

_log = logging.getLogger("tierproxy.fetch")

HOLD_SECONDS: Final = 0.5
"""How long a Metadata answer waits for the questions it started."""
MAX_PARTITIONS: Final = 1_000
"""Partitions asked about per Metadata answer (three ListOffsets of this many partitions
cost a broker next to nothing; an answer naming every topic of a large cluster is cut)."""
RETRY_AFTER_SECONDS: Final = 30.0
"""How long a partition whose questions failed is left to its reach probe."""
_PARTITIONS_KEPT: Final = 100_000
"""Failed or left-out partitions remembered (for the retry delay and the debug log)."""

_QUESTIONS: Final = (
    (LATEST, READ_UNCOMMITTED),
    (LATEST, READ_COMMITTED),
    (EARLIEST, READ_UNCOMMITTED),
)
"""(timestamp, isolation level) of the three ListOffsets: high watermark, last stable
offset, log start."""

_Key = tuple[str, int]


class OffsetLister(Protocol):
    """How the proxy asks a broker ListOffsets itself (:class:`~storage.kafka_client.
    KafkaClient`)."""

    async def list_offsets(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[ListedOffset]: ...


class TieredRanges(Protocol):
    """The remote tier's range of a partition (``TieredPartitions``)."""

    def remote_range(self, tp: TopicIdPartition) -> RemoteRange | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LedPartition:
    """A tiered partition named by a Metadata answer, and its leader there."""

    tp: TopicIdPartition
    leader: int


class BrokerOffsets:
    """Asks leaders for the offsets of tiered partitions; see the module docstring."""

    def __init__(
        self,
        *,
        broker_view: BrokerView,
        ranges: TieredRanges,
        lister: OffsetLister | None,
        hold_seconds: float = HOLD_SECONDS,
        max_partitions: int = MAX_PARTITIONS,
        retry_after_seconds: float = RETRY_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """:param lister: ``None`` for a proxy that asks no broker itself (reach probes
        only)."""
        self._view = broker_view
        self._ranges = ranges
        self._lister = lister
        self._hold_seconds = hold_seconds
        self._max_partitions = max_partitions
        self._pending: dict[TopicIdPartition, asyncio.Task[None]] = {}
        self._failed: TTLCache[TopicIdPartition, str] = TTLCache(
            _PARTITIONS_KEPT, retry_after_seconds, timer=clock
        )
        """Per partition whose questions failed lately: why."""
        self._left_out: LRUCache[TopicIdPartition, None] = LRUCache(_PARTITIONS_KEPT)
        """Partitions a Metadata answer named beyond ``max_partitions``."""
        self.asked = 0
        """Partitions asked about."""
        self.reach_probes = 0
        """Probes sent just after the remote tier, the broker's offsets not being known."""

    async def learn(self, partitions: Iterable[LedPartition]) -> None:
        """Ask the leaders of those of ``partitions`` whose broker offsets are not known;
        return when the answers are in, or after ``hold_seconds``. Never raises."""
        if self._lister is None:
            return
        waits: set[asyncio.Task[None]] = set()
        by_leader: dict[int, list[TopicIdPartition]] = {}
        asking = left_out = 0
        for led in partitions:
            tp = led.tp
            if not self._unknown(tp) or tp in self._failed:
                continue
            running = self._pending.get(tp)
            if running is not None:
                waits.add(running)
            elif asking >= self._max_partitions:
                left_out += 1
                self._left_out[tp] = None
            else:
                asking += 1
                by_leader.setdefault(led.leader, []).append(tp)
        if left_out:
            event(
                _log,
                logging.DEBUG,
                "broker.offsets.capped",
                asked=asking,
                left_out=left_out,
                meaning=f"at most {self._max_partitions} partitions per Metadata answer; "
                "the others get a reach probe unless a later answer asks for them",
            )
        for leader, tps in by_leader.items():
            waits.add(self._start(leader, tps))
        if not waits:
            return
        _done, late = await asyncio.wait(waits, timeout=self._hold_seconds)
        if late:
            event(
                _log,
                logging.DEBUG,
                "broker.offsets.late",
                leaders=len(late),
                hold_seconds=self._hold_seconds,
                meaning="the Metadata answer went on without them; they are still learned",
            )

    def reach_probe(self, tp: TopicIdPartition) -> None:
        """The Fetch planner falls back to a reach probe for ``tp``: count it, say why."""
        self.reach_probes += 1
        if _log.isEnabledFor(logging.DEBUG):
            event(
                _log,
                logging.DEBUG,
                "fetch.reach_probe",
                topic=tp.topic,
                partition=tp.partition,
                why=self._why(tp),
            )

    async def close(self) -> None:
        """Stop the questions still running."""
        tasks = set(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _unknown(self, tp: TopicIdPartition) -> bool:
        remote = self._ranges.remote_range(tp)
        if remote is None:
            return False
        state = self._view.state(tp)
        return (
            state.high_watermark is None
            or state.last_stable_offset is None
            or state.reaches(remote) is None
        )

    def _start(self, leader: int, tps: list[TopicIdPartition]) -> asyncio.Task[None]:
        task = asyncio.create_task(self._ask(leader, tps), name=f"broker-offsets-{leader}")
        for tp in tps:
            self._pending[tp] = task
            self._left_out.pop(tp, None)
        task.add_done_callback(functools.partial(self._finished, tps))
        self.asked += len(tps)
        return task

    def _finished(self, tps: list[TopicIdPartition], task: asyncio.Task[None]) -> None:
        for tp in tps:
            if self._pending.get(tp) is task:
                del self._pending[tp]

    async def _ask(self, leader: int, tps: list[TopicIdPartition]) -> None:
        """The three ListOffsets to ``leader``; the broker view learns what they answer."""
        assert self._lister is not None
        lister = self._lister
        targets = [(tp.topic, tp.partition) for tp in tps]
        answers = await asyncio.gather(
            *(
                lister.list_offsets(
                    leader, [(t, p, timestamp) for t, p in targets], isolation_level=isolation
                )
                for timestamp, isolation in _QUESTIONS
            ),
            return_exceptions=True,
        )
        found: dict[_Key, list[int | None]] = {key: [None] * len(_QUESTIONS) for key in targets}
        why: dict[_Key, str] = {}
        for question, answer in enumerate(answers):
            if isinstance(answer, BaseException):
                reason = self._failure(leader, answer)
                why.update(dict.fromkeys(targets, reason))
                continue
            for listed in answer:
                key = (listed.topic, listed.partition)
                if key not in found:
                    continue
                if listed.error == KafkaError.NONE:
                    found[key][question] = listed.offset
                else:
                    why.setdefault(key, listed.error.name)
        for tp, key in zip(tps, targets, strict=True):
            high_watermark, last_stable_offset, log_start_offset = found[key]
            self._view.learn_offsets(
                tp,
                high_watermark=high_watermark,
                last_stable_offset=last_stable_offset,
                log_start_offset=log_start_offset,
                remote=self._ranges.remote_range(tp),
            )
            if None in found[key]:
                self._failed[tp] = why.get(key, "not answered")
        if why:
            event(
                _log,
                logging.DEBUG,
                "broker.offsets.failed",
                leader=leader,
                partitions=len(why),
                errors=sorted(set(why.values())),
                retry_after_seconds=self._failed.ttl,
            )

    def _failure(self, leader: int, error: BaseException) -> str:
        """Why a whole ListOffsets failed; an error the client does not expect is a bug,
        logged as a warning (it still never reaches the Metadata answer)."""
        if isinstance(error, asyncio.CancelledError):
            raise error
        if not isinstance(error, KafkaClientError | OSError | TimeoutError):
            event(
                _log,
                logging.WARNING,
                "broker.offsets.error",
                leader=leader,
                error=repr(error),
            )
        return repr(error)

    def _why(self, tp: TopicIdPartition) -> str:
        if self._lister is None:
            return "this proxy asks no broker itself"
        if tp in self._pending:
            return "its ListOffsets are still running"
        failed = self._failed.get(tp)
        if failed is not None:
            return f"its ListOffsets failed: {failed}"
        if tp in self._left_out:
            return f"the Metadata answer named more than {self._max_partitions} such partitions"
        return "no Metadata answer through this proxy named it since its offsets became unknown"
