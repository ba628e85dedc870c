"""Admission control of the stream, against Spark's Kafka source's rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage.spark_source.rate import TriggerDelay, rate_limit


def test_the_limit_is_shared_in_proportion_to_the_backlog() -> None:
    starts = {"a": 0, "b": 100, "c": 5}
    ends = {"a": 300, "b": 200, "c": 5, "d": 9}  # c: no backlog; d: new, no start known
    assert rate_limit(40, starts, ends) == {"a": 30, "b": 110, "c": 5, "d": 9}


def test_a_share_below_one_record_rounds_up_so_no_partition_starves() -> None:
    assert rate_limit(10, {"big": 0, "small": 0}, {"big": 10_000, "small": 1}) == {
        "big": 9,
        "small": 1,
    }


@given(
    backlog=st.dictionaries(
        st.integers(0, 20), st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)), min_size=1
    ),
    limit=st.integers(1, 10**5),
)
def test_never_past_the_end_never_back_and_about_the_limit(
    backlog: dict[int, tuple[int, int]], limit: int
) -> None:
    starts = {key: start for key, (start, _) in backlog.items()}
    ends = {key: start + size for key, (start, size) in backlog.items()}
    limited = rate_limit(limit, starts, ends)
    assert all(starts[k] <= limited[k] <= ends[k] for k in ends)
    taken = sum(limited[k] - starts[k] for k in ends)
    waiting = sum(ends[k] - starts[k] for k in ends)
    assert taken == waiting if waiting <= limit else taken <= limit + len(ends)


def test_a_batch_waits_for_enough_records_but_not_past_the_delay() -> None:
    delay = TriggerDelay(min_records=100, max_delay_ms=1000)
    assert not delay.waits(5, now_ms=10_000)  # the first batch never waits
    assert delay.waits(99, now_ms=10_500)
    assert not delay.waits(100, now_ms=10_600)  # enough records: runs, and the clock restarts
    assert delay.waits(1, now_ms=11_599)
    assert not delay.waits(1, now_ms=11_600)  # waited maxTriggerDelay: runs anyway
