"""``bench.matrix``: which cells run, the order of the paths in each visit, and what a cell's
visits add up to (issue 13's b/c, b/a, a/c with CPU and Fetch requests per GiB)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.common import GIB
from bench.matrix import (
    BASELINE,
    CLIENTS,
    LOCAL,
    NATIVE,
    PATHS,
    TIERPROXY,
    Cell,
    PathRound,
    headline,
    path_round,
    plan,
    summarise_cell,
    visit_order,
)


def test_the_plan_covers_every_partition_count_client_and_fetch_size_once() -> None:
    cells = plan([1, 8], CLIENTS, [1, 8])

    assert len(cells) == len(set(cells)) == 2 * len(CLIENTS) * 2
    assert [cell.partitions for cell in cells] == [1] * 6 + [8] * 6
    assert cells[0].name == "1 partition, raw Fetch v12, 1 MiB fetches"
    assert cells[-1].name == "8 partitions, Java consumer, 8 MiB fetches"


def test_an_unknown_client_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="kcat"):
        plan([1], ["kcat"], [1])


@given(st.integers(min_value=0, max_value=1000))
def test_every_visit_reads_each_path_once(index: int) -> None:
    assert sorted(visit_order(index)) == sorted(PATHS)


def test_three_visits_put_each_path_first_once_and_each_pair_in_both_orders() -> None:
    orders = [visit_order(index) for index in range(3)]

    assert {order[0] for order in orders} == set(PATHS)
    for a, b in [(LOCAL, TIERPROXY), (TIERPROXY, NATIVE), (NATIVE, LOCAL)]:
        before = [order.index(a) < order.index(b) for order in orders]
        assert True in before and False in before


def read(path: str, mib_per_s: float, *, fetches_per_gib: float = 1024.0) -> PathRound:
    return PathRound(
        path=path,
        mib=1024.0,
        seconds=1024.0 / mib_per_s,
        mib_per_s=mib_per_s,
        broker_cpu_s_per_gib=1.0,
        proxy_cpu_s_per_gib=2.0 if path == TIERPROXY else 0.0,
        client_cpu_s_per_gib=0.5,
        fetches_per_gib=fetches_per_gib,
    )


def test_a_round_is_charged_per_gib_read() -> None:
    measured = path_round(
        TIERPROXY,
        received=GIB // 2,
        seconds=2.0,
        fetches=512,
        cpu={"broker": 0.1, "proxy": 0.75, "client": 0.25},
    )

    assert measured.mib_per_s == 256.0
    assert measured.proxy_cpu_s_per_gib == pytest.approx(1.5)
    assert measured.broker_cpu_s_per_gib == pytest.approx(0.2)
    assert measured.client_cpu_s_per_gib == pytest.approx(0.5)
    assert measured.fetches_per_gib == 1024.0


def test_a_round_that_read_nothing_is_an_error_not_a_division_by_zero() -> None:
    with pytest.raises(ValueError, match="read nothing"):
        path_round(LOCAL, received=0, seconds=1.0, fetches=1, cpu={})


def test_ratios_are_medians_of_the_ratios_within_each_visit() -> None:
    # The machine slows down in the second visit: all paths halve, the ratios hold.
    visits = [
        {
            LOCAL: read(LOCAL, 1000.0),
            TIERPROXY: read(TIERPROXY, 800.0),
            NATIVE: read(NATIVE, 400.0),
        },
        {LOCAL: read(LOCAL, 500.0), TIERPROXY: read(TIERPROXY, 400.0), NATIVE: read(NATIVE, 200.0)},
        {LOCAL: read(LOCAL, 900.0), TIERPROXY: read(TIERPROXY, 720.0), NATIVE: read(NATIVE, 360.0)},
    ]

    summary = summarise_cell(visits)

    assert summary["ratio_tierproxy_to_local"] == pytest.approx(0.8)
    assert summary["ratio_tierproxy_to_native"] == pytest.approx(2.0)
    assert summary["ratio_native_to_local"] == pytest.approx(0.4)
    assert summary["local_mib_per_s"] == 900.0
    assert summary["proxy_cpu_s_per_gib_tierproxy"] == 2.0
    assert summary["broker_cpu_s_per_gib_native"] == 1.0
    assert summary["client_cpu_s_per_gib_local"] == 0.5


def test_fetch_requests_per_gib_are_compared_with_the_local_log() -> None:
    visit = {
        LOCAL: read(LOCAL, 1000.0, fetches_per_gib=150.0),
        TIERPROXY: read(TIERPROXY, 800.0, fetches_per_gib=165.0),
        NATIVE: read(NATIVE, 400.0, fetches_per_gib=1150.0),
    }

    summary = summarise_cell([visit])

    assert summary["fetches_per_gib_native"] == 1150.0
    assert summary["fetches_ratio_tierproxy_to_local"] == pytest.approx(1.1)


def test_the_headline_is_the_worst_and_median_cells_with_their_goals() -> None:
    one = Cell(partitions=1, client="raw Fetch v12", fetch_mib=1)
    eight = Cell(partitions=8, client="raw Fetch v12", fetch_mib=1)
    base = {"ratio_native_to_local": 0.4, "fetches_ratio_tierproxy_to_local": 1.0}
    summaries = {
        one: {
            **base,
            "ratio_tierproxy_to_local": 0.7,
            "ratio_tierproxy_to_native": 2.0,
            "proxy_cpu_s_per_gib_tierproxy": 1.2,
            "fetches_ratio_tierproxy_to_local": 3.0,  # one partition: not compared
        },
        eight: {
            **base,
            "ratio_tierproxy_to_local": 0.9,
            "ratio_tierproxy_to_native": 1.4,
            "proxy_cpu_s_per_gib_tierproxy": 1.6,
        },
    }

    figures = headline(summaries)

    assert figures["ratio_tierproxy_to_local_worst"] == 0.7
    assert figures["goal_ratio_tierproxy_to_local_worst"] == 0.8
    assert figures["ratio_tierproxy_to_local_median"] == pytest.approx(0.8)
    assert figures["ratio_tierproxy_to_native_worst"] == 1.4
    assert figures["proxy_cpu_s_per_gib_worst"] == 1.6
    assert figures["fetches_ratio_tierproxy_to_local_worst"] == 1.0


def test_one_partition_alone_has_no_fetch_ratio_headline() -> None:
    cell = Cell(partitions=1, client="librdkafka", fetch_mib=8)
    summary = {
        "ratio_tierproxy_to_local": 0.8,
        "ratio_tierproxy_to_native": 1.5,
        "ratio_native_to_local": 0.5,
        "proxy_cpu_s_per_gib_tierproxy": 1.0,
        "fetches_ratio_tierproxy_to_local": 1.0,
    }

    assert "fetches_ratio_tierproxy_to_local_worst" not in headline({cell: summary})
    assert headline({}) == {}


def test_a_baseline_proxy_is_a_fourth_path_compared_with_this_one() -> None:
    visits = [
        {
            LOCAL: read(LOCAL, 1000.0),
            TIERPROXY: read(TIERPROXY, 800.0),
            NATIVE: read(NATIVE, 400.0),
            BASELINE: read(BASELINE, 640.0),
        }
    ]

    summary = summarise_cell(visits)

    assert summary["ratio_tierproxy_to_baseline"] == pytest.approx(1.25)
    assert summary["baseline_mib_per_s"] == 640.0
    assert sorted(visit_order(1, (*PATHS, BASELINE))) == sorted((*PATHS, BASELINE))
    without = {path: visits[0][path] for path in PATHS}
    assert "ratio_tierproxy_to_baseline" not in summarise_cell([without])


def test_fetch_requests_not_counted_are_not_a_number_not_zero() -> None:
    measured = path_round(
        LOCAL,
        received=GIB,
        seconds=1.0,
        fetches=None,
        cpu=dict.fromkeys(("broker", "proxy", "client"), 0.0),
    )

    assert math.isnan(measured.fetches_per_gib)
