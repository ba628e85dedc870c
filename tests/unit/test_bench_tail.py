"""bench.tail and bench.catchup_load: the pure parts (order, summaries, lag histograms)."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from bench.catchup_load import LoadSpec, Pacer, argv, parse
from bench.clients import Endpoint
from bench.tail import (
    LagSnapshot,
    LoopThreadTimes,
    ProxyLoop,
    TailRound,
    lag_between,
    parse_lag,
    parse_schedstat,
    ratio_of_ratios,
    rotation,
    summarise_tail,
)

EXPOSITION = """\
# HELP tierproxy_event_loop_lag_seconds How late the event loop woke a 10 ms timer.
# TYPE tierproxy_event_loop_lag_seconds histogram
tierproxy_event_loop_lag_seconds_bucket{le="0.001"} 90.0
tierproxy_event_loop_lag_seconds_bucket{le="0.01"} 99.0
tierproxy_event_loop_lag_seconds_bucket{le="+Inf"} 100.0
tierproxy_event_loop_lag_seconds_count 100.0
tierproxy_event_loop_lag_seconds_sum 0.25
tierproxy_requests_total{api="fetch"} 7.0
"""


def tail_round(p99_ms: float, lag_ms: float | None = None) -> TailRound:
    loop = ProxyLoop(lag_mean_ms=lag_ms, lag_p99_ms=None, on_cpu_share=0.5, waiting_share=0.25)
    return TailRound(
        fetches=100,
        p50_ms=p99_ms / 2,
        p99_ms=p99_ms,
        load_mib_per_s=None,
        proxy=None if lag_ms is None else loop,
    )


@given(st.lists(st.text(min_size=1), min_size=1, max_size=6, unique=True))
def test_each_name_takes_each_place_once_in_as_many_rounds(names: list[str]) -> None:
    orders = [rotation(names, index) for index in range(len(names))]
    assert all(sorted(order) == sorted(names) for order in orders)
    for place in range(len(names)):
        assert sorted(order[place] for order in orders) == sorted(names)


def test_the_lag_histogram_is_read_from_the_exposition() -> None:
    snapshot = parse_lag(EXPOSITION)
    assert snapshot.buckets == ((0.001, 90.0), (0.01, 99.0), (float("inf"), 100.0))
    assert (snapshot.total_s, snapshot.count) == (0.25, 100.0)


def test_a_missing_histogram_is_an_error_not_zero() -> None:
    try:
        parse_lag('tierproxy_requests_total{api="fetch"} 7.0\n')
    except ValueError as error:
        assert "tierproxy_event_loop_lag_seconds" in str(error)
    else:
        raise AssertionError("no error")


def test_lag_between_two_snapshots_is_of_the_probes_in_between() -> None:
    before = LagSnapshot(
        buckets=((0.001, 50.0), (0.01, 50.0), (float("inf"), 50.0)), total_s=0.05, count=50.0
    )
    after = parse_lag(EXPOSITION)
    # 50 probes in between: 40 under 1 ms, 9 under 10 ms, 1 over: the 99th percentile of 50
    # (nearest rank: the 50th) is over 10 ms.
    assert lag_between(before, after) == (0.2 / 50 * 1000, float("inf"))
    empty = LagSnapshot(buckets=tuple((b, 0.0) for b, _ in after.buckets), total_s=0, count=0)
    # 100 probes: 99 at most 10 ms late, so the p99 is in the 10 ms bucket.
    assert lag_between(empty, after) == (0.25 / 100 * 1000, 10.0)
    assert lag_between(after, after) is None


def test_ratios_pair_each_loaded_round_with_the_alone_round_of_the_same_round() -> None:
    rounds = {
        "alone": [tail_round(1.0), tail_round(2.0), tail_round(1.0)],
        "loaded": [tail_round(3.0, 0.5), tail_round(4.0, 1.5), tail_round(9.0, 1.0)],
    }
    summary = summarise_tail(rounds, {"loaded": "alone"})
    assert summary["loaded"]["p99_ratio_to_alone"] == 3.0  # median of 3, 2, 9
    assert summary["loaded"]["p99_ms"] == 4.0
    assert summary["loaded"]["proxy_loop_lag_mean_ms"] == 1.0
    assert summary["loaded"]["proxy_loop_waiting_share"] == 0.25
    assert "proxy_loop_lag_p99_ms" not in summary["loaded"]  # no round measured it
    assert "proxy_loop_lag_mean_ms" not in summary["alone"]
    assert "p99_ratio_to_alone" not in summary["alone"]


def test_the_load_spec_survives_its_command_line() -> None:
    spec = LoadSpec(
        endpoint=Endpoint(name="load", host="127.0.0.1", port=9092),
        topic="bench-native-1",
        topic_id=uuid.uuid4(),
        end_offset=98_304,
        consumers=4,
        fetch_mib=1,
    )
    assert parse(argv(spec)) == spec
    capped = LoadSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "mib_per_s": 100.0})
    assert parse(argv(capped)) == capped


def test_the_pacer_holds_readers_to_the_aggregate_rate() -> None:
    times = iter([100.0, 100.5, 102.5])
    pacer = Pacer(1000.0, lambda: next(times))
    assert pacer.delay(500) == 0.5  # 500 bytes at 1000 B/s end at 0.5 s
    assert pacer.delay(250) == 0.25  # a second reader's bytes count against the same rate
    assert pacer.delay(250) == 0.0  # behind schedule: no wait


def test_each_setup_is_held_against_its_own_idle_tail_round_by_round() -> None:
    rounds = {
        "ours alone": [tail_round(1.0), tail_round(2.0)],
        "ours loaded": [tail_round(4.0), tail_round(4.0)],
        "theirs alone": [tail_round(2.0), tail_round(1.0)],
        "theirs loaded": [tail_round(4.0), tail_round(4.0)],
    }
    # Round 1: 4 / 2 = 2; round 2: 2 / 4 = 0.5; the median of the two: 1.25.
    got = ratio_of_ratios(rounds, ("ours loaded", "ours alone"), ("theirs loaded", "theirs alone"))
    assert got == 1.25


def test_the_loop_threads_times_come_from_schedstat_in_nanoseconds() -> None:
    assert parse_schedstat("2500000000 500000000 1234\n") == LoopThreadTimes(
        on_cpu_s=2.5, waiting_s=0.5
    )
