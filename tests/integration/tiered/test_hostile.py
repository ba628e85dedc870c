"""Hostile input against ``tierproxy serve`` over Apache Kafka while a consumer reads the
session's tiered topic (its tiered range deleted by the broker) through the same proxy: a
few thousand malformed frames of every category of ``bench.hostile_attacks`` (the smaller
sibling of ``python -m bench.hostile``)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import pytest

from bench.clients import Endpoint, topic_id_and_end
from bench.common import MIB, rss_bytes
from bench.hostile import fetch_frame
from bench.hostile_attacks import CATEGORIES, Target, attack
from protocol.frames import DEFAULT_MAX_FRAME_BYTES
from proxy.bad_connections import LOG_BURST, LOG_PER_SECOND
from proxy.embedded import BrokerInfo
from tests.integration.tiered.conftest import MakeProxy
from tests.integration.tiered.support import (
    READ_UNCOMMITTED,
    Record,
    TieredTopic,
    by_partition,
    consume_confluent,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

FRAMES = 3000
RECEIVE_TIMEOUT_MS = 2000
RSS_GROWTH_LIMIT = 64 * MIB
"""Far above what a few thousand closed connections leave behind if nothing leaks (a few
MiB of allocator slack), far below what keeping each one's buffers would cost."""


def read_while(stop: threading.Event, bootstrap: str, tiered: TieredTopic) -> list[list[Record]]:
    """Whole reads of the topic, back to back, until ``stop`` (at least one)."""
    reads: list[list[Record]] = []
    while not reads or not stop.is_set():
        reads.append(
            by_partition(consume_confluent(bootstrap, tiered.topic, tiered.high_watermarks))
        )
    return reads


def test_a_flood_of_malformed_frames_costs_the_consumer_nothing(
    make_proxy: MakeProxy, broker: BrokerInfo, tiered_topic: TieredTopic, tmp_path: Path
) -> None:
    proxy = make_proxy(request_receive_timeout_ms=RECEIVE_TIMEOUT_MS)
    pid = proxy.process.pid
    assert pid is not None
    expected = tiered_topic.expected[READ_UNCOMMITTED]
    # A first read warms the caches, so growth below is the attack's.
    ends = tiered_topic.high_watermarks
    assert by_partition(consume_confluent(proxy.bootstrap, tiered_topic.topic, ends)) == expected
    rss_before = rss_bytes(pid)
    topic_id, _ = asyncio.run(
        topic_id_and_end(
            Endpoint(name="direct", host=broker.host, port=broker.port), tiered_topic.topic
        )
    )
    target = Target(
        host=proxy.host,
        port=proxy.port,
        max_request_bytes=DEFAULT_MAX_FRAME_BYTES,
        fetch_frame=fetch_frame(tiered_topic.topic, topic_id),
    )
    stop = threading.Event()
    reads: list[list[list[Record]]] = []
    reader = threading.Thread(
        target=lambda: reads.append(read_while(stop, proxy.bootstrap, tiered_topic))
    )
    started = time.monotonic()
    reader.start()
    try:
        tally = asyncio.run(
            attack(
                target,
                frames=FRAMES,
                seconds=60,
                attackers=8,
                slowloris_connections=8,
                slowloris_patience_s=RECEIVE_TIMEOUT_MS / 1000 * 5,
            )
        )
    finally:
        stop.set()
        reader.join()

    assert proxy.process.running
    (consumer_reads,) = reads
    assert all(read == expected for read in consumer_reads), "a consumer lost or repeated records"
    assert sum(tally.frames.values()) >= FRAMES
    assert set(tally.frames) == set(CATEGORIES)
    assert tally.connect_failed == 0
    assert not tally.left_open, f"the proxy left attack connections open: {tally.left_open}"
    for _ in range(50):
        if proxy.metric("tierproxy_connections_active") == 0:
            break
        time.sleep(0.2)
    assert proxy.metric("tierproxy_connections_active") == 0
    assert rss_bytes(pid) - rss_before < RSS_GROWTH_LIMIT

    bad_closed = proxy.metric("tierproxy_bad_connections_total")
    log = (tmp_path / f"tierproxy-{proxy.port}.log").read_text(errors="replace")
    logged = len(re.findall(r"event=connection\.closed .* bad=", log))
    reasons = len(set(re.findall(r" bad=(\w+)", log)))
    assert 0 < logged <= bad_closed
    # Rate-limited: a burst per reason, then one line a second per reason, at most.
    assert logged <= reasons * (LOG_BURST + LOG_PER_SECOND * (time.monotonic() - started + 1))
