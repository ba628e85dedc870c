"""The bound on what intercepted requests in flight hold: new work waits, none is dropped."""

from __future__ import annotations

import logging

import pytest

from proxy.exchange_memory import ExchangeMemory


def test_over_the_bound_no_request_is_admitted_until_memory_is_freed() -> None:
    memory = ExchangeMemory(100)
    memory.charge(100)
    assert memory.admits
    memory.charge(1)
    assert not memory.admits
    resumed: list[int] = []
    memory.wait(1, lambda: resumed.append(1))
    memory.wait(2, lambda: resumed.append(2))
    assert memory.waiting == 2
    memory.free(1)
    assert resumed == [1, 2]  # in the order they started waiting
    assert memory.admits and memory.waiting == 0 and memory.held == 100


def test_waiters_are_woken_only_while_the_total_is_within_the_bound() -> None:
    memory = ExchangeMemory(10)
    memory.charge(30)
    resumed: list[int] = []

    def first() -> None:
        resumed.append(1)
        memory.charge(15)  # the first one woken reads a request that takes the room

    memory.wait(1, first)
    memory.wait(2, lambda: resumed.append(2))
    memory.free(25)
    assert resumed == [1]
    assert memory.waiting == 1
    memory.free(15)
    assert resumed == [1, 2]


def test_a_closed_connection_stops_waiting() -> None:
    memory = ExchangeMemory(0)
    memory.charge(1)
    memory.wait(1, lambda: pytest.fail("a closed connection was resumed"))
    memory.stop_waiting(1)
    memory.free(1)
    assert memory.admits


def test_a_zero_bound_admits_one_request_at_a_time() -> None:
    memory = ExchangeMemory(0)
    assert memory.admits
    memory.charge(500)
    assert not memory.admits
    memory.free(500)
    assert memory.admits


def test_crossing_the_bound_is_logged_once_per_crossing(caplog: pytest.LogCaptureFixture) -> None:
    memory = ExchangeMemory(10)
    with caplog.at_level(logging.WARNING, logger="tierproxy.router"):
        memory.charge(11)
        memory.charge(5)
        memory.free(16)
        memory.charge(11)
    assert [r.getMessage() for r in caplog.records].count("request.plans.full") == 2
