"""Missing remote objects: remembered per segment, logged at most once a minute each and
through a token bucket across segments, shown by status(), and forgotten when a re-check
finds them again or the metadata no longer lists them."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from proxy.bad_connections import LOG_BURST
from proxy.health import Verdict
from proxy.remote.missing_objects import (
    LOG_EVERY_SECONDS,
    MAX_TRACKED,
    RECHECK_PER_ROUND,
    MissingObjects,
)
from storage.model import RemoteLogSegmentMetadata
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from tests.fakes.clocks import ManualClock
from tests.unit.storage.rlmm.reference import TP, seg


class Probe:
    """Storage whose ``present`` segments exist; asked ids in order."""

    def __init__(self) -> None:
        self.present: set[uuid.UUID] = set()
        self.broken: set[uuid.UUID] = set()
        self.asked: list[uuid.UUID] = []

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        segment_id = metadata.segment_id.id
        self.asked.append(segment_id)
        if segment_id in self.broken:
            raise RemoteStorageError("store down", retriable=True)
        if segment_id not in self.present:
            raise RemoteResourceNotFoundError("gone", key=f"key-{segment_id.int}")
        return 1


def segments(count: int) -> list[RemoteLogSegmentMetadata]:
    return [seg(10 * i, 10 * i + 9, ((0, 0),), number=i + 1) for i in range(count)]


def lines(caplog: pytest.LogCaptureFixture, name: str = "remote.object.missing") -> list[Any]:
    """The fields of each ``name`` event logged."""
    return [r.tierproxy_fields for r in caplog.records if r.getMessage() == name]  # type: ignore[attr-defined]


def test_a_segment_is_logged_once_a_minute_and_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, wall = ManualClock(1000.0), ManualClock(1000.0)
    missing = MissingObjects(readable=lambda _s: True, clock=clock, wall_clock=wall)
    [segment] = segments(1)
    with caplog.at_level(logging.WARNING, logger="tierproxy.remote"):
        for _ in range(100):
            missing.object_missing(segment, "s3://bucket/orders-x/0/00000000000000000000-x.log")
            clock.now += 0.1
        assert len(lines(caplog)) == 1
        clock.now += LOG_EVERY_SECONDS
        wall.now = 5000.0
        missing.object_missing(segment, "s3://bucket/orders-x/0/00000000000000000000-x.log")
    [first, second] = lines(caplog)
    assert first["topic"] == TP.topic
    assert first["partition"] == TP.partition
    assert first["segment"] == segment.segment_id.id
    assert first["offsets"] == "0-9"
    assert first["key"].startswith("s3://bucket/")
    assert "suppressed_before" not in second
    status = missing.status()
    assert (status.count, status.last_seen) == (1, 5000.0)
    assert status.keys == ("s3://bucket/orders-x/0/00000000000000000000-x.log",)


def test_lines_across_segments_are_rate_limited_and_the_rest_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(1000.0)
    missing = MissingObjects(readable=lambda _s: True, clock=clock)
    many = segments(LOG_BURST + 5)
    with caplog.at_level(logging.WARNING, logger="tierproxy.remote"):
        for segment in many:
            missing.object_missing(segment, f"key-{segment.start_offset}")
        assert len(lines(caplog)) == LOG_BURST
        clock.now += 1.0  # one token back
        missing.object_missing(segment := segments(LOG_BURST + 6)[-1], "key-last")
    assert lines(caplog)[-1]["suppressed_before"] == 5
    assert lines(caplog)[-1]["segment"] == segment.segment_id.id
    status = missing.status()
    assert status.count == LOG_BURST + 6
    assert status.last_key == "key-last"
    assert status.keys[0] == "key-last"
    assert len(status.keys) == 10


def test_readiness_shows_the_count_and_always_passes() -> None:
    missing = MissingObjects(readable=lambda _s: True)
    assert missing.verdict() == Verdict(ok=True, reason="no object known missing")
    for segment in segments(2):
        missing.object_missing(segment, "s3://bucket/orders-x/0/key.log")
    verdict = missing.verdict()
    assert verdict.ok
    assert verdict.reason.startswith("2 segment(s) the metadata lists are missing")
    assert "orders" not in verdict.reason  # /readyz names no topic


def test_the_oldest_finding_is_forgotten_past_the_bound() -> None:
    missing = MissingObjects(readable=lambda _s: True)
    many = segments(MAX_TRACKED + 1)
    for segment in many:
        missing.object_missing(segment, "k")
    assert missing.count == MAX_TRACKED


async def test_recheck_forgets_what_is_back_or_no_longer_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listed = segments(4)
    deleted = {listed[1].segment_id.id}
    missing = MissingObjects(readable=lambda s: s.segment_id.id not in deleted)
    for segment in listed:
        missing.object_missing(segment, f"key-{segment.start_offset}")
    probe = Probe()
    probe.present.add(listed[0].segment_id.id)
    probe.broken.add(listed[2].segment_id.id)
    with caplog.at_level(logging.INFO, logger="tierproxy.remote"):
        await missing.recheck(probe)
    assert missing.count == 2  # the broken one (cannot tell) and the one still missing
    assert listed[1].segment_id.id not in probe.asked  # the metadata says it is gone
    [restored] = lines(caplog, "remote.object.restored")
    assert restored["segment"] == listed[0].segment_id.id
    assert {k for k in missing.status().keys} == {"key-20", "key-30"}


async def test_recheck_rounds_are_bounded_and_take_turns() -> None:
    clock = ManualClock(1000.0)
    missing = MissingObjects(readable=lambda _s: True, clock=clock)
    for segment in segments(RECHECK_PER_ROUND + 10):
        missing.object_missing(segment, "k")
    probe = Probe()
    clock.now += 60
    await missing.recheck(probe)
    assert len(probe.asked) == RECHECK_PER_ROUND
    first_round = set(probe.asked)
    probe.asked.clear()
    clock.now += 60
    await missing.recheck(probe)
    assert len(set(probe.asked) - first_round) == 10  # the ten not asked before go first
