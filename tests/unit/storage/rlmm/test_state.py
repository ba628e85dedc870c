"""Every segment and partition-delete transition, valid and invalid, against Kafka's table."""

from __future__ import annotations

import itertools

import pytest

from storage.model import RemoteLogSegmentState, RemotePartitionDeleteState
from storage.rlmm.state import (
    InvalidStateTransitionError,
    check_partition_transition,
    check_segment_transition,
    check_segment_update,
    is_valid_partition_transition,
    is_valid_segment_transition,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState

# Kafka's RemoteLogSegmentState.isValidTransition, written out.
SEGMENT_VALID = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_FINISHED),
}
PARTITION_VALID = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
    (P.DELETE_PARTITION_FINISHED, P.DELETE_PARTITION_FINISHED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product([None, *S], S)))
def test_segment_transitions(
    current: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> None:
    valid = (current, target) in SEGMENT_VALID
    assert is_valid_segment_transition(current, target) is valid
    if valid:
        check_segment_transition("segment x", current, target)
    else:
        with pytest.raises(InvalidStateTransitionError) as caught:
            check_segment_transition("segment x", current, target)
        assert caught.value.current == current
        assert caught.value.target == target
        assert str(caught.value).startswith(f"segment x cannot move to {target.name}: ")


@pytest.mark.parametrize(("current", "target"), list(itertools.product([None, *P], P)))
def test_partition_transitions(
    current: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> None:
    valid = (current, target) in PARTITION_VALID
    assert is_valid_partition_transition(current, target) is valid
    if valid:
        check_partition_transition("partition t-0", current, target)
    else:
        with pytest.raises(InvalidStateTransitionError, match=r"^partition t-0 cannot move to"):
            check_partition_transition("partition t-0", current, target)


def test_messages_say_what_may_follow() -> None:
    with pytest.raises(InvalidStateTransitionError) as caught:
        check_segment_transition("segment x", S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)
    assert str(caught.value) == (
        "segment x cannot move to COPY_SEGMENT_STARTED: it is in COPY_SEGMENT_FINISHED, which may "
        "only move to COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED"
    )
    with pytest.raises(
        InvalidStateTransitionError, match="the first state must be DELETE_PARTITION_MARKED"
    ):
        check_partition_transition("partition t-0", None, P.DELETE_PARTITION_STARTED)


@pytest.mark.parametrize("target", list(S))
def test_an_update_never_introduces_a_segment(target: RemoteLogSegmentState) -> None:
    with pytest.raises(InvalidStateTransitionError, match="only a RemoteLogSegmentMetadataRecord"):
        check_segment_update("segment x", None, target)


def test_an_update_of_a_known_segment_follows_the_machine() -> None:
    check_segment_update("segment x", S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)
    with pytest.raises(InvalidStateTransitionError):
        check_segment_update("segment x", S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
