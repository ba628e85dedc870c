"""Fetch sessions (KIP-227) as the proxy must track them to serve remote partitions.

Rules of this file (everything that decides which partitions a Fetch covers lives here):

- Fetch v7+ may run in a session: the first request (epoch 0) lists every partition and the
  broker answers with a session id; later requests (epoch 1, 2, ...) list only partitions
  that are new or whose fetch position changed, plus ``forgotten_topics_data``, and the
  broker answers only partitions with news. A partition the client does not list is still
  fetched, at the position the broker remembers. To serve such a partition from the remote
  tier the proxy needs that position, so it keeps a copy of every session it has seen,
  per client connection (session ids belong to the broker, and the proxy pairs each client
  connection with its own broker connection).
- The proxy may forward a position other than the client's for a partition it serves from
  the remote tier (see the Fetch interceptor). The broker then remembers the forwarded
  position, so each tracked partition keeps both: what the client asked (``client``) and
  what the broker holds (``broker``). Whenever the forwarded position must change, the
  partition is listed in the forwarded request, even if the client did not list it; that
  is an ordinary update to the broker.
- Sessionless fetches (session id 0, epoch -1, and every version below 7) are tracked only
  for the duration of one request.
- An incremental request for a session the proxy does not know (evicted from the
  ``slots`` bound, or a proxy restart) cannot be served correctly: :meth:`FetchSessions.
  open` returns ``None`` and the caller answers FETCH_SESSION_ID_NOT_FOUND, on which every
  client starts a new full session, as after a broker's own eviction.
- A top-level error in the broker's response (FETCH_SESSION_ID_NOT_FOUND,
  INVALID_FETCH_SESSION_EPOCH, ...) ends the proxy's copy too.
- A closed client connection takes its sessions with it (:meth:`FetchSessions.release`), as
  the broker drops them once its own connection closes: heavy connection churn must not
  push the ``slots`` bound into evicting the sessions of live consumers.
- The proxy may answer an incremental request itself (see
  :mod:`proxy.remote.broker_checks`), only *in step* (its epoch the one Kafka's
  ``FetchSession`` expects next: the last one's successor, 1 after ``Integer.MAX_VALUE``),
  listing no partition new to the session and forgetting none: such a request changes
  nothing the broker's session holds but the client's positions, which stay here, and its
  epoch. The broker's session then expects an epoch the client has passed, so every
  forwarded request carries the client's epoch moved back by the number answered without
  the broker (``SessionView.broker_epoch``; :meth:`FetchSessions.answered_alone` counts
  them). The shift keeps the broker the judge of every forwarded epoch: an epoch the client
  got wrong reaches it wrong, and its INVALID_FETCH_SESSION_EPOCH ends the session here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from cachetools import LRUCache

from protocol.fetch_bodies import FINAL_EPOCH, FetchPosition, PartitionKey

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "FetchPosition",
    "FetchSessions",
    "PartitionKey",
    "SessionView",
    "next_epoch",
]

INITIAL_EPOCH = 0
_NO_SESSION = 0
_EPOCHS: Final = 2**31 - 1
"""Incremental epochs run 1, 2, ..., ``Integer.MAX_VALUE``, then 1 again (Kafka's
``FetchMetadata.nextEpoch``)."""


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` in a session, as Kafka's ``FetchMetadata.nextEpoch``."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _EPOCHS else epoch + 1


def _shifted_back(epoch: int, steps: int) -> int:
    """The incremental ``epoch`` moved ``steps`` back along Kafka's cycle of epochs."""
    return (epoch - 1 - steps) % _EPOCHS + 1


@dataclass(slots=True, kw_only=True)
class _Tracked:
    client: FetchPosition
    broker: FetchPosition


@dataclass(slots=True, kw_only=True)
class _Session:
    """The proxy's copy of one broker session."""

    partitions: dict[PartitionKey, _Tracked]
    client_epoch: int = INITIAL_EPOCH
    """The epoch of the client's last request in the session."""
    answered_alone: int = 0
    """Requests the proxy answered without the broker (modulo the cycle of epochs): how far
    the broker's epoch lags the client's."""


@dataclass(slots=True, kw_only=True)
class SessionView:
    """What one Fetch request covers, in the order the broker will consider them."""

    connection_id: int
    request_session_id: int
    epoch: int
    listed: tuple[PartitionKey, ...]
    """Partitions the client listed in this request."""
    client: dict[PartitionKey, FetchPosition]
    """Every partition the broker answers for, at the client's position."""
    broker: dict[PartitionKey, FetchPosition]
    """Where the broker's session already holds a position (incremental requests only)."""
    forgotten: tuple[PartitionKey, ...] = ()
    broker_epoch: int | None = None
    """The epoch to forward, if the broker's lags the client's (incremental requests)."""
    in_step: bool = False
    """An incremental request the proxy may answer itself: the epoch expected next, no
    partition new to the session and none forgotten."""
    sent: dict[PartitionKey, FetchPosition] = field(default_factory=dict)
    """What the forwarded request listed (set by :meth:`FetchSessions.forwarded`)."""
    session: _Session | None = field(default=None, repr=False)

    @property
    def incremental(self) -> bool:
        return self.request_session_id != _NO_SESSION and self.epoch > INITIAL_EPOCH

    @property
    def creates_session(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessions:
    """The proxy's copy of the broker's fetch sessions, per client connection."""

    def __init__(self, *, slots: int) -> None:
        self._sessions: LRUCache[tuple[int, int], _Session] = LRUCache(slots)
        self._by_connection: dict[int, set[int]] = {}
        """Session ids per client connection, to release them when it closes."""

    def __len__(self) -> int:
        return len(self._sessions)

    def release(self, connection_id: int) -> None:
        """Forget every session of a closed client connection."""
        for session_id in self._by_connection.pop(connection_id, ()):
            self._sessions.pop((connection_id, session_id), None)

    def open(
        self,
        *,
        connection_id: int,
        session_id: int,
        epoch: int,
        listed: Sequence[tuple[PartitionKey, FetchPosition]],
        forgotten: Iterable[PartitionKey] = (),
    ) -> SessionView | None:
        """The partitions a request covers; ``None`` for an unknown incremental session.

        An incremental request updates the tracked session at once (clients do not send
        the next epoch before the previous one is answered).
        """
        forgotten = tuple(forgotten)
        keys = tuple(key for key, _position in listed)
        key = (connection_id, session_id)
        if session_id != _NO_SESSION and epoch > INITIAL_EPOCH:
            session = self._sessions.get(key)
            if session is None:
                return None
            tracked = session.partitions
            adds = any(partition not in tracked for partition in keys)
            in_step = epoch == next_epoch(session.client_epoch) and not (adds or forgotten)
            for partition in forgotten:
                tracked.pop(partition, None)
            for partition, position in listed:
                previous = tracked.get(partition)
                broker = position if previous is None else previous.broker
                tracked[partition] = _Tracked(client=position, broker=broker)
            session.client_epoch = epoch
            return SessionView(
                connection_id=connection_id,
                request_session_id=session_id,
                epoch=epoch,
                listed=keys,
                client={p: t.client for p, t in tracked.items()},
                broker={p: t.broker for p, t in tracked.items() if p not in keys},
                forgotten=forgotten,
                broker_epoch=(
                    _shifted_back(epoch, session.answered_alone) if session.answered_alone else None
                ),
                in_step=in_step,
                session=session,
            )
        if session_id != _NO_SESSION:
            # Epoch 0 replaces the session, epoch -1 closes it: either way it is gone.
            self._sessions.pop(key, None)
        return SessionView(
            connection_id=connection_id,
            request_session_id=session_id,
            epoch=epoch,
            listed=keys,
            client=dict(listed),
            broker={},
            forgotten=forgotten,
        )

    def forwarded(
        self, view: SessionView, desired: Mapping[PartitionKey, FetchPosition]
    ) -> list[tuple[PartitionKey, FetchPosition]]:
        """The partitions to list in the forwarded request, and where.

        ``desired`` holds the position the broker should fetch at for every partition of
        ``view.client`` (the client's, or the proxy's own for a remote-served one). Listed
        partitions are always forwarded; in an incremental request, unlisted ones are added
        where the broker holds another position than desired. Listed first, in order.
        """
        out = [(key, desired[key]) for key in view.listed]
        if view.incremental:
            out += [
                (key, desired[key])
                for key, held in view.broker.items()
                if key in desired and held != desired[key]
            ]
        if view.session is not None:
            for key, position in out:
                view.session.partitions[key].broker = position
        view.sent = dict(out)
        return out

    def answered(self, view: SessionView, *, session_id: int, error: bool) -> None:
        """Record the broker's answer: a new session starts, an error ends one."""
        if error:
            self._sessions.pop((view.connection_id, view.request_session_id), None)
            return
        if view.creates_session and session_id != _NO_SESSION:
            self._by_connection.setdefault(view.connection_id, set()).add(session_id)
            self._sessions[(view.connection_id, session_id)] = _Session(
                partitions={
                    key: _Tracked(client=position, broker=view.sent.get(key, position))
                    for key, position in view.client.items()
                }
            )

    @staticmethod
    def answered_alone(view: SessionView) -> None:
        """The proxy answers ``view``'s in-step incremental request itself: the broker's
        session does not see this epoch (nor anything else: the client's positions are
        already tracked, the broker's stay)."""
        if view.session is None or not view.in_step:
            raise ValueError("only an in-step incremental request can be answered alone")
        view.session.answered_alone = (view.session.answered_alone + 1) % _EPOCHS
