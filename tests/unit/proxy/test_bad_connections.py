"""Bad-connection closes: the rate limiter of their log lines, the counter, and the two clocks
(idle connections, requests that never finish arriving)."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from proxy.bad_connections import (
    CLIENT_DROPPED,
    FRAME_TOO_LARGE,
    IDLE,
    SLOW_REQUEST,
    TRUNCATED_REQUEST,
    BadConnectionLog,
    TokenBucket,
)
from proxy.metrics import ProxyMetrics
from tests.fakes.clocks import ManualClock
from tests.fakes.frame_client import FrameClient
from tests.fakes.wire_broker import WireBroker, raw_request
from tests.unit.proxy.conftest import ProxyFactory


def test_token_bucket_allows_a_burst_then_refills_at_its_rate() -> None:
    clock = ManualClock(100.0)
    bucket = TokenBucket(3, 2.0, clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5  # one token at 2 per second
    assert [bucket.take() for _ in range(2)] == [True, False]
    clock.now += 60  # never more than the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="tierproxy")
    return caplog


def lines(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [
        getattr(record, "tierproxy_fields", {})
        for record in caplog.records
        if record.getMessage() == name
    ]


def test_a_flood_is_logged_in_bursts_and_counted_in_full(
    captured: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(100.0)
    metrics = ProxyMetrics()
    log = BadConnectionLog(
        logging.getLogger("tierproxy.test"),
        metrics,
        burst=5,
        per_second=1.0,
        report_seconds=10.0,
        clock=clock,
    )
    for index in range(100):
        log.closed(logging.WARNING, FRAME_TOO_LARGE, conn=index, reason="request frame too large")
    log.closed(logging.INFO, CLIENT_DROPPED, conn=100, reason="client closed")
    closed = lines(captured, "connection.closed")
    # Each reason has its own bucket: a flood of one does not silence another.
    assert [line["conn"] for line in closed] == [0, 1, 2, 3, 4, 100]
    assert closed[0]["bad"] == FRAME_TOO_LARGE
    assert closed[0]["reason"] == "request frame too large"
    sample = metrics.registry.get_sample_value
    assert sample("tierproxy_bad_connections_total", {"reason": FRAME_TOO_LARGE}) == 100
    assert sample("tierproxy_bad_connections_total", {"reason": CLIENT_DROPPED}) == 1

    log.report_suppressed()  # before the interval: nothing yet
    assert lines(captured, "connection.bad.suppressed") == []
    clock.now += 10
    log.report_suppressed()
    (report,) = lines(captured, "connection.bad.suppressed")
    assert report["suppressed"] == 95
    assert report["reasons"] == f"{FRAME_TOO_LARGE}:95"
    assert report["message"] == "95 more bad connections suppressed"

    # Ten seconds later the bucket is full again, and nothing is left to report.
    clock.now += 10
    log.closed(logging.WARNING, FRAME_TOO_LARGE, conn=200, reason="request frame too large")
    log.report_suppressed()
    assert lines(captured, "connection.closed")[-1]["conn"] == 200
    assert len(lines(captured, "connection.bad.suppressed")) == 1


async def test_a_request_trickled_too_slowly_is_closed_and_others_are_not(
    fake_broker: WireBroker, make_proxy: ProxyFactory, captured: pytest.LogCaptureFixture
) -> None:
    proxy = await make_proxy(fake_broker, request_receive_timeout_ms=300)
    bystander = await FrameClient.connect(proxy)
    slowloris = await FrameClient.connect(proxy)
    # A size prefix and half a header, then nothing: held past the deadline.
    await slowloris.send(struct.pack(">i", 1000) + b"\x00\x03")
    assert await slowloris.closed()
    await bystander.send(raw_request(1, b"fine"))
    assert await bystander.receive() == struct.pack(">i", 1) + b"echo:fine"
    (line,) = [line for line in lines(captured, "connection.closed") if line.get("bad")]
    assert line["bad"] == SLOW_REQUEST
    assert line["buffered"] == 6
    assert proxy.metrics.registry.get_sample_value(
        "tierproxy_bad_connections_total", {"reason": SLOW_REQUEST}
    )
    await bystander.close()


async def test_idle_connections_are_closed_after_connections_max_idle_ms(
    fake_broker: WireBroker, make_proxy: ProxyFactory, captured: pytest.LogCaptureFixture
) -> None:
    proxy = await make_proxy(fake_broker, connections_max_idle_ms=300)
    idle = await FrameClient.connect(proxy)
    await idle.send(raw_request(1, b"hello"))
    assert await idle.receive() == struct.pack(">i", 1) + b"echo:hello"
    assert await idle.closed()
    assert [line["bad"] for line in lines(captured, "connection.closed")] == [IDLE]


async def test_whole_requests_never_run_the_request_clock(
    fake_broker: WireBroker, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(fake_broker, request_receive_timeout_ms=300)
    client = await FrameClient.connect(proxy)
    for correlation_id in range(4):
        await client.send(raw_request(correlation_id, b"x"))
        assert await client.receive() == struct.pack(">i", correlation_id) + b"echo:x"
        # Past the deadline between requests: nothing is half received, so nothing expires.
        await asyncio.sleep(0.4)
    assert proxy.connections == 1
    await client.close()


async def test_a_client_closing_mid_request_is_a_truncated_request(
    fake_broker: WireBroker, make_proxy: ProxyFactory, captured: pytest.LogCaptureFixture
) -> None:
    proxy = await make_proxy(fake_broker)
    clean = await FrameClient.connect(proxy)
    await clean.send(raw_request(1, b"whole"))
    assert await clean.receive() == struct.pack(">i", 1) + b"echo:whole"
    clean.writer.write_eof()
    assert await clean.closed()
    truncated = await FrameClient.connect(proxy)
    await truncated.send(raw_request(2, b"cut short")[:-3])
    truncated.writer.write_eof()
    assert await truncated.closed()
    closed = lines(captured, "connection.closed")
    assert [line.get("bad") for line in closed] == [None, TRUNCATED_REQUEST]
