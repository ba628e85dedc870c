"""Which COPY_SEGMENT_STARTED copies the clean-up leaves alone: those a copy task may still be
uploading, until their job's deadline (and the clock margin) has passed, unless the job was
this pipeline's own and has ended."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from storage.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.tiering.cleanup import may_still_upload
from storage.tiering.cycle import CLOCK_MARGIN_MS, EndedJobs
from tests.fakes.segments import segment_metadata

TP = TopicIdPartition(topic_id=uuid.UUID(int=1), topic="t", partition=0)
TIMEOUT_MS = 900_000


def segment(state: RemoteLogSegmentState, event_ms: int) -> RemoteLogSegmentMetadata:
    return segment_metadata(TP, size=100, timestamp=event_ms, state=state)


@given(
    st.sampled_from(list(RemoteLogSegmentState)),
    st.integers(0, 10**13),
    st.integers(-(10**7), 10**7),
    st.booleans(),
)
def test_only_a_started_copy_of_a_job_not_known_ended_and_within_its_deadline_is_spared(
    state: RemoteLogSegmentState, event_ms: int, after_ms: int, ours: bool
) -> None:
    ended = EndedJobs(horizon_ms=TIMEOUT_MS + CLOCK_MARGIN_MS)
    if ours:
        ended.ended(event_ms)
    copy = segment(state, event_ms)
    now = event_ms + after_ms
    spared = may_still_upload(copy, now_ms=now, copy_timeout_ms=TIMEOUT_MS, ended=ended)
    assert spared == (
        state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
        and not ours
        and now < event_ms + TIMEOUT_MS + CLOCK_MARGIN_MS
    )


def test_ended_jobs_are_forgotten_once_past_every_deadline() -> None:
    horizon = TIMEOUT_MS + CLOCK_MARGIN_MS
    ended = EndedJobs(horizon_ms=horizon)
    ended.ended(1_000)
    ended.ended(1_000 + horizon)
    assert 1_000 in ended
    ended.ended(1_001 + horizon)
    assert 1_000 not in ended
    assert 1_000 + horizon in ended
