"""Which partitions the broker recently let a connection read: when a Fetch may skip it.

Every Fetch of a remote-served partition sends the broker a *probe* (see
:mod:`proxy.remote.fetch_plan`) so that the broker checks the client's rights and leader
epoch for it. A probe reads nothing, but the broker's fixed cost per Fetch (request
parsing, the authoriser, the replica manager, a response) is paid for each, which at 1 MiB
fetches is more than serving the same data from its own log
(``docs/decisions/0009-remote-read-path.md``). So a connection's Fetch whose every partition
is served remotely is answered without the broker while the broker's last word on each of
those partitions, on this very connection, is recent (``remote.fetch.broker.check.reuse.ms``),
if the Fetch is sessionless or an incremental one in step with its fetch session (Kafka's
Java consumer always fetches in a session; :mod:`proxy.remote.sessions` keeps the broker's
session epochs in sequence).

What that changes, and why it is within what Kafka itself does: an ACL revocation, a leader
move or a topic deletion reaches this connection's remote reads up to the reuse interval
later (the first Fetch after it goes to the broker, whose answer stands). Kafka authorises a
Fetch once, when it arrives; a Fetch then parked in its purgatory (up to the client's
``fetch.max.wait.ms``, 500 ms by default) or waiting for a remote read
(``remote.fetch.max.wait.ms``, 500 ms) returns data read after that check. A reuse interval
well below 500 ms keeps the proxy inside that envelope. Data is never wrong for it: the
remote tier holds committed batches only, bounded by the high watermark (last stable offset)
the broker last reported.

Rules of this file (everything that decides whether the broker may be skipped lives here):

- A check is recorded only when the broker answered a partition of a Fetch on a connection
  without error, the whole response being without error and unthrottled, with the leader
  epoch the client sent for it and the time of the answer. A partition of an incremental
  fetch session that the broker left out of its answer counts as answered without error:
  Kafka's ``FetchSession`` leaves out only partitions without news *and* without error, and
  it fetched them at the leader epoch the client last listed (every position the client
  lists is forwarded).
- Any other answer for the partition on that connection (an error, including
  OFFSET_OUT_OF_RANGE), a whole-response error, or a broker throttle drops the checks.
- :meth:`BrokerChecks.vouch` is a pure predicate: every partition asked has a check on this
  connection younger than the reuse interval, at the leader epoch the client sends now (a
  client that learned of a new leader epoch goes to the broker).
- A closed connection takes its checks with it. A reuse interval of 0 turns all this off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache

from protocol.fetch_bodies import FetchPosition, PartitionKey

__all__ = ["BrokerChecks"]

_CONNECTIONS_KEPT: Final = 100_000
"""Connections whose checks are remembered (a closed one's go at once)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Check:
    at: float
    """Event-loop time of the broker's answer."""
    leader_epoch: int
    """The client's ``current_leader_epoch`` that the broker accepted."""


class BrokerChecks:
    """Recent broker answers per connection and partition; see the module docstring."""

    def __init__(self, *, reuse_ms: int) -> None:
        self._reuse = reuse_ms / 1000
        self._checks: LRUCache[int, dict[PartitionKey, _Check]] = LRUCache(_CONNECTIONS_KEPT)
        self.answered_alone = 0
        """Fetches answered without the broker (exported as a counter)."""

    @property
    def enabled(self) -> bool:
        return self._reuse > 0

    def checked(
        self, connection_id: int, key: PartitionKey, *, leader_epoch: int, at: float
    ) -> None:
        """The broker answered ``key`` on the connection without error at time ``at``."""
        if not self.enabled:
            return
        checks = self._checks.get(connection_id)
        if checks is None:
            checks = self._checks[connection_id] = {}
        checks[key] = _Check(at=at, leader_epoch=leader_epoch)

    def refused(self, connection_id: int, key: PartitionKey) -> None:
        """The broker answered ``key`` on the connection with an error."""
        checks = self._checks.get(connection_id)
        if checks is not None:
            checks.pop(key, None)

    def release(self, connection_id: int) -> None:
        """Forget every check of the connection (closed, or the broker failed or throttled
        a whole response on it)."""
        self._checks.pop(connection_id, None)

    def vouch(
        self,
        connection_id: int,
        positions: Iterable[tuple[PartitionKey, FetchPosition]],
        *,
        now: float,
    ) -> bool:
        """Whether the broker recently let the connection read every partition of
        ``positions`` at the leader epoch asked now. Free of side effects."""
        if not self.enabled:
            return False
        checks = self._checks.get(connection_id)
        if not checks:
            return False
        oldest = now - self._reuse
        for key, position in positions:
            check = checks.get(key)
            if (
                check is None
                or check.at < oldest
                or check.leader_epoch != position.current_leader_epoch
            ):
                return False
        return True

    def note_answered_alone(self) -> None:
        """Count a Fetch answered without the broker."""
        self.answered_alone += 1
