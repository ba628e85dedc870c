"""The state machines of remote log metadata: everything that decides a legal transition.

Rules of this file (as h11's ``_state.py``): every rule about which state may follow which
lives here, and nowhere else. The cache asks :func:`check_segment_transition`,
:func:`check_segment_update` and :func:`check_partition_transition`; no other module
compares states to decide what is allowed.

A remote segment copy moves through KIP-405's ``RemoteLogSegmentState``::

    (new) ──▶ COPY_SEGMENT_STARTED ──▶ COPY_SEGMENT_FINISHED
                       │                        │
                       └──────────┬─────────────┘
                                  ▼
                       DELETE_SEGMENT_STARTED ──▶ DELETE_SEGMENT_FINISHED

The only way in is COPY_SEGMENT_STARTED, announced by a full metadata record (an update
names a segment by id only and cannot introduce one). STARTED may go straight to
DELETE_SEGMENT_STARTED so that a failed copy can be cleaned up, as Kafka's
``RemoteLogSegmentState.isValidTransition`` allows. A repeated state is accepted: writers
retry a publish after a timeout or a leader failover, and the retry must not be refused.

A deleted partition moves through ``RemotePartitionDeleteState``::

    (new) ──▶ DELETE_PARTITION_MARKED ──▶ DELETE_PARTITION_STARTED ──▶ DELETE_PARTITION_FINISHED

with the same rule for repeats (a controller may mark a partition twice).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage.model import RemoteLogSegmentState, RemotePartitionDeleteState

__all__ = [
    "InvalidStateTransitionError",
    "PartitionDeleteStatus",
    "RemoteLogMetadataError",
    "check_partition_transition",
    "check_segment_transition",
    "check_segment_update",
    "is_valid_partition_transition",
    "is_valid_segment_transition",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionDeleteStatus:
    """The last DeletePartitionStateRecord applied to a partition."""

    state: RemotePartitionDeleteState
    epoch: int
    event_timestamp: int


_S = RemoteLogSegmentState
_P = RemotePartitionDeleteState

_SEGMENT_NEXT: Mapping[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset(
        {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}
    ),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}

_PARTITION_NEXT: Mapping[
    RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]
] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset(
        {_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED}
    ),
    _P.DELETE_PARTITION_STARTED: frozenset(
        {_P.DELETE_PARTITION_STARTED, _P.DELETE_PARTITION_FINISHED}
    ),
    _P.DELETE_PARTITION_FINISHED: frozenset({_P.DELETE_PARTITION_FINISHED}),
}


class RemoteLogMetadataError(Exception):
    """A metadata event the remote log metadata manager refuses to apply."""


class InvalidStateTransitionError(RemoteLogMetadataError):
    """An event would move a segment or a partition to a state that may not follow its current one.

    ``current`` is ``None`` when the subject is unknown (never started, or already removed
    after its final state); ``reason`` replaces the generated explanation. ``subject`` may
    be any object naming the segment or partition: it is only turned into text here, when
    a transition is refused, which keeps the accepted path cheap.
    """

    def __init__(
        self,
        subject: object,
        current: RemoteLogSegmentState | RemotePartitionDeleteState | None,
        target: RemoteLogSegmentState | RemotePartitionDeleteState,
        reason: str | None = None,
    ) -> None:
        self.subject = str(subject)
        self.current = current
        self.target = target
        if reason is None:
            reason = _default_reason(current, target)
        super().__init__(f"{subject} cannot move to {target.name}: {reason}")


def is_valid_segment_transition(
    current: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> bool:
    """Whether a segment copy in ``current`` (``None``: unknown) may move to ``target``."""
    return target in _SEGMENT_NEXT[current]


def is_valid_partition_transition(
    current: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> bool:
    """Whether a partition in delete state ``current`` (``None``: none) may move to ``target``."""
    return target in _PARTITION_NEXT[current]


def check_segment_transition(
    subject: object, current: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> None:
    """Refuse an illegal segment transition; ``subject`` names the segment in the message.

    :raises InvalidStateTransitionError: if ``target`` may not follow ``current``.
    """
    if not is_valid_segment_transition(current, target):
        raise InvalidStateTransitionError(subject, current, target)


def check_segment_update(
    subject: object, current: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> None:
    """Refuse an update event (state change by segment id) that the machine forbids.

    An update carries no offsets or epochs, so it can never introduce a segment: for an
    unknown one (not started yet, or already forgotten after DELETE_SEGMENT_FINISHED) even
    COPY_SEGMENT_STARTED is refused.

    :raises InvalidStateTransitionError: if the segment is unknown or ``target`` may not
        follow ``current``.
    """
    if current is None:
        raise InvalidStateTransitionError(
            subject,
            current,
            target,
            "it is unknown (never started, or forgotten after DELETE_SEGMENT_FINISHED); "
            "only a RemoteLogSegmentMetadataRecord may introduce a segment",
        )
    check_segment_transition(subject, current, target)


def check_partition_transition(
    subject: object, current: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> None:
    """Refuse an illegal partition-delete transition; ``subject`` names the partition.

    :raises InvalidStateTransitionError: if ``target`` may not follow ``current``.
    """
    if not is_valid_partition_transition(current, target):
        raise InvalidStateTransitionError(subject, current, target)


def _default_reason(
    current: RemoteLogSegmentState | RemotePartitionDeleteState | None,
    target: RemoteLogSegmentState | RemotePartitionDeleteState,
) -> str:
    if current is None:
        return f"it is unknown; the first state must be {_first_state(target).name}"
    allowed = sorted(s.name for s in _next_states(current))
    return f"it is in {current.name}, which may only move to {', '.join(allowed)}"


def _next_states(
    current: RemoteLogSegmentState | RemotePartitionDeleteState,
) -> frozenset[RemoteLogSegmentState] | frozenset[RemotePartitionDeleteState]:
    if isinstance(current, RemoteLogSegmentState):
        return _SEGMENT_NEXT[current]
    return _PARTITION_NEXT[current]


def _first_state(
    target: RemoteLogSegmentState | RemotePartitionDeleteState,
) -> RemoteLogSegmentState | RemotePartitionDeleteState:
    if isinstance(target, RemoteLogSegmentState):
        return _S.COPY_SEGMENT_STARTED
    return _P.DELETE_PARTITION_MARKED
