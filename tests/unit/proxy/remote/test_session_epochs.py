"""Incremental fetch requests answered without the broker (:mod:`proxy.remote.sessions`).

Random sequences of full and incremental requests (right and wrong epochs, partitions
listed, added and forgotten), some answered by the proxy alone and the rest forwarded, are
checked against a model of the client's session (what a client talking to the broker
directly would have) and of the broker's own ``FetchSession`` (epoch checks as Kafka's
``FetchManager.newContext``, positions as its ``CachedPartition``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from protocol.fetch_bodies import FetchPosition, PartitionKey
from proxy.remote.sessions import FetchSessions, SessionView, next_epoch
from proxy.remote.sessions import _shifted_back as shifted_back

_KEYS: tuple[PartitionKey, ...] = tuple(("t", i) for i in range(3))
_MAX_EPOCH = 2**31 - 1


def _position(offset: int) -> FetchPosition:
    return FetchPosition(fetch_offset=offset, partition_max_bytes=1 << 20)


@dataclass
class _BrokerSession:
    expected: int
    positions: dict[PartitionKey, FetchPosition]


@dataclass
class _Broker:
    """Kafka's session cache, as far as epochs and positions go."""

    sessions: dict[int, _BrokerSession] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def fetch(self, view: SessionView, sent: dict[PartitionKey, FetchPosition]) -> int | None:
        """The session id of the answer, or ``None`` for INVALID_FETCH_SESSION_EPOCH."""
        if view.epoch == 0:
            session_id = next(self.ids)
            self.sessions[session_id] = _BrokerSession(expected=1, positions=dict(sent))
            return session_id
        session = self.sessions[view.request_session_id]
        epoch = view.epoch if view.broker_epoch is None else view.broker_epoch
        if epoch != session.expected:
            return None
        session.expected = next_epoch(session.expected)
        for key in view.forgotten:
            session.positions.pop(key, None)
        session.positions.update(sent)
        return view.request_session_id


_requests = st.lists(
    st.tuples(
        st.sampled_from(["full", "incremental", "incremental", "incremental"]),
        st.dictionaries(st.sampled_from(_KEYS), st.integers(0, 5), max_size=3),  # listed
        st.sets(st.sampled_from(_KEYS), max_size=1),  # forgotten
        st.sampled_from([0, 0, 0, 0, 1, -1]),  # how wrong the client's epoch is
        st.booleans(),  # answered alone if allowed
        st.booleans(),  # the proxy forwards probes rather than the client's positions
    ),
    max_size=40,
)


@given(requests=_requests)
def test_answers_alone_keep_the_brokers_session_in_step(
    requests: list[tuple[str, dict[PartitionKey, int], set[PartitionKey], int, bool, bool]],
) -> None:
    sessions = FetchSessions(slots=100)
    broker = _Broker()
    session_id = 0
    expected_epoch = 0
    """The epoch the client sends next when it is right."""
    client: dict[PartitionKey, FetchPosition] = {}
    for kind, listed_offsets, to_forget, wrong, alone, probes in requests:
        listed = [(key, _position(offset)) for key, offset in listed_offsets.items()]
        if kind == "full" or not session_id:
            epoch, forgotten = 0, set[PartitionKey]()
            expected_client = dict(listed)
            in_step = False
        else:
            epoch = max(1, expected_epoch + wrong)
            forgotten = to_forget - set(listed_offsets)
            expected_client = {k: p for k, p in client.items() if k not in forgotten}
            expected_client.update(listed)
            new = not set(listed_offsets) <= set(client)
            in_step = epoch == expected_epoch and not (forgotten or new)
        held = broker.sessions[session_id].positions if epoch else {}
        view = sessions.open(
            connection_id=1,
            session_id=session_id,
            epoch=epoch,
            listed=listed,
            forgotten=forgotten,
        )
        assert view is not None
        assert view.client == expected_client
        assert view.in_step == in_step
        unlisted = set(view.client) - set(listed_offsets)
        assert view.broker == {k: v for k, v in held.items() if k in unlisted}
        if in_step and alone:
            event("answered alone")
            sessions.answered_alone(view)
            client, expected_epoch = expected_client, next_epoch(expected_epoch)
            continue
        desired = {
            key: dataclasses.replace(position, fetch_offset=1000) if probes else position
            for key, position in view.client.items()
        }
        sent = dict(sessions.forwarded(view, desired))
        answered = broker.fetch(view, sent)
        # The broker accepts exactly what it would accept from the client directly.
        assert (answered is not None) == (epoch in (0, expected_epoch))
        sessions.answered(view, session_id=answered or 0, error=answered is None)
        if answered is None:
            event("the broker refused an epoch")
            session_id, client = 0, {}
            continue
        # Whatever was answered alone, the broker fetches every partition where the proxy
        # wants it to.
        assert broker.sessions[answered].positions == desired
        session_id, client = answered, expected_client
        expected_epoch = next_epoch(epoch)


@given(epoch=st.integers(1, _MAX_EPOCH), steps=st.integers(0, 3000))
def test_the_broker_epoch_is_the_client_epoch_moved_back_along_kafkas_cycle(
    epoch: int, steps: int
) -> None:
    later = epoch
    for _ in range(steps):
        later = next_epoch(later)
    assert shifted_back(later, steps) == epoch


def test_only_in_step_incremental_requests_can_be_answered_alone() -> None:
    sessions = FetchSessions(slots=10)
    view = sessions.open(connection_id=1, session_id=0, epoch=-1, listed=[])
    assert view is not None and not view.in_step
    with pytest.raises(ValueError, match="in-step"):
        sessions.answered_alone(view)
