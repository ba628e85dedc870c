"""``bench.clients``: what Kafka's ConsumerPerformance printed, read back."""

from __future__ import annotations

import pytest

from bench.clients import parse_consumer_performance

OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-25 04:40:01:123, 2026-11-25 04:40:04:623, 384.0000, 109.7143, 393216, 112347.4286, \
312, 3188, 120.4517, 123342.5345

Metric Name                                                          Value
consumer-coordinator-metrics:heartbeat-total:{client-id=perf-consumer-client}   : 1.000
consumer-fetch-manager-metrics:fetch-total:{client-id=perf-consumer-client}     : 412.000
consumer-fetch-manager-metrics:fetch-total-extra:{client-id=perf-consumer-client} : 9.000
"""


def test_the_fetch_time_and_fetch_count_are_read_from_the_tools_own_words() -> None:
    seconds, fetches = parse_consumer_performance(OUTPUT)

    assert seconds == pytest.approx(3.188)
    assert fetches == 412


def test_output_without_the_metrics_is_refused_with_the_output_quoted() -> None:
    first_two_lines = "\n".join(OUTPUT.splitlines()[:2])
    with pytest.raises(ValueError, match="fetch-total"):
        parse_consumer_performance(first_two_lines)
