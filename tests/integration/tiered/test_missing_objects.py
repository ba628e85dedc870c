"""Remote objects that the metadata lists but storage lacks, on Apache Kafka with the real
pipeline: the remote directory moved away, and one object deleted from SeaweedFS.

Reads of such a segment get KAFKA_STORAGE_ERROR, which every client retries in place. Kafka's
own answer would be UNKNOWN_SERVER_ERROR; OFFSET_OUT_OF_RANGE, which the proxy used to give,
made a consumer reset to the earliest offset and read the same records again, in a loop. The
proxy logs each missing object (``remote.object.missing``, with the segment and the object
key), counts it (``tierproxy_remote_fetch_errors_total{reason="not-found"}``) and shows it
(``tierproxy_remote_missing_objects``); at start it looks for the oldest and newest segment of
the tiered partitions. Once the objects are back, consumers read every record exactly once.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import KafkaError
from proxy.embedded import BrokerInfo, S3Info, create_bucket, delete_bucket
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_tools import run_tool
from proxy.embedded.s3 import s3_client
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings
from tests.conditions import wait_until
from tests.integration.tiered.support import (
    CycleTarget,
    Record,
    by_partition,
    consume_confluent,
    earliest_offsets,
    fetch_once,
    high_watermarks,
    run_cycle,
)
from tests.integration.tiering.workload import create_topic, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

PARTITIONS = 2
UNCACHED: dict[str, Any] = {
    "remote.fetch.chunk.cache.size.bytes": 0,
    "remote.fetch.chunk.prefetch.chunks": 0,
}
"""Every read goes to remote storage, so a missing object is found by the read itself."""
NOT_FOUND = {"reason": "not-found"}
WAIT_S = 120.0
"""Bound on each wait for the proxy to notice: generous, the machine may be busy."""


async def tier_topic(
    broker: BrokerInfo, s3: S3Info, spark: Any, tmp_path: Path, storage: dict[str, Any]
) -> tuple[str, list[Record]]:
    """A topic of mixed records tiered with ``storage`` settings and deleted at the broker
    below the tiered range; its name and every record (READ_UNCOMMITTED)."""
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_mixed(broker.bootstrap, topic, PARTITIONS, records=300)
    ends = await asyncio.to_thread(high_watermarks, broker.bootstrap, topic, PARTITIONS)
    everything = by_partition(consume_confluent(broker.bootstrap, topic, ends))
    target = CycleTarget(
        topic=topic,
        bucket=str(storage.get("remote.log.storage.s3.bucket", "")),
        metadata_topic=str(storage["remote.log.metadata.topic.name"]),
        spill=tmp_path / "spill",
    )
    policy = {"local.retention.ms": 1, "retention.ms": -1}
    report = await run_cycle(broker, s3, spark, target, policy, settings=storage)
    assert not report.errors, report.errors
    assert report.topics[topic].log_starts_advanced == PARTITIONS, report
    starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
    assert all(start > 0 for start in starts.values()), starts
    return topic, everything


def readyz(proxy: TierproxyServer) -> Any:
    """The proxy's ``/readyz`` answer (a JSON object), ready or not."""
    url = f"http://{proxy.host}:{proxy.metrics_port}/readyz"
    try:
        answer = urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError as err:  # 503: not ready, the same body
        answer = err
    with answer:
        return json.loads(answer.read())


def log_of(proxy: TierproxyServer) -> str:
    return proxy.process.log_path.read_text(errors="replace")


def missing_lines(proxy: TierproxyServer) -> list[str]:
    return [line for line in log_of(proxy).splitlines() if "event=remote.object.missing" in line]


async def test_a_remote_directory_moved_away_is_reported_and_consumers_wait_for_it(
    broker: BrokerInfo, s3: S3Info, spark: Any, tmp_path: Path
) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    remote = tmp_path / "remote"
    storage = {
        "remote.log.storage.backend": "local",
        "remote.log.storage.local.dir": str(remote),
        "remote.log.metadata.topic.name": f"__rlm-missing-{uuid.uuid4().hex[:8]}",
        "remote.log.metadata.topic.partitions": 3,
    }
    topic, everything = await tier_topic(broker, s3, spark, tmp_path, storage)
    remote.rename(tmp_path / "moved-away")

    proxy = proxy_process(broker, tmp_path, {**storage, **UNCACHED})
    proxy.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=proxy.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        # The start-up check finds the oldest and newest segment of each partition missing.
        wait_until(
            lambda: "remote tier start-up check" in log_of(proxy),
            timeout_s=WAIT_S,
            what="the start-up check's summary",
        )
        assert f"of {PARTITIONS} of {PARTITIONS} tiered partitions are missing" in log_of(proxy)
        found_at_start = proxy.metric("tierproxy_remote_missing_objects")
        assert PARTITIONS <= found_at_start <= 2 * PARTITIONS
        assert len(missing_lines(proxy)) == found_at_start
        assert all(str(remote) in line for line in missing_lines(proxy))
        check = readyz(proxy)["checks"]["remote_objects"]
        assert check["ok"], check  # shown, but no reason to take the proxy out of service
        assert check["reason"].startswith(f"{found_at_start:g} segment(s)"), check

        error, _high_watermark, records = await fetch_once(proxy.bootstrap, topic, 0, 0)
        assert error == KafkaError.KAFKA_STORAGE_ERROR  # retriable: no client resets
        assert records == b""

        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        await consumer.start()
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        got: list[Record] = []
        retried = proxy.metric("tierproxy_remote_fetch_errors_total", **NOT_FOUND) + 20
        async with asyncio.timeout(WAIT_S):
            while proxy.metric("tierproxy_remote_fetch_errors_total", **NOT_FOUND) < retried:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    got += [(m.partition, m.offset, m.key, m.value) for m in batch]
        assert got == []  # nothing skipped, nothing delivered
        assert [await consumer.position(tp) for tp in partitions] == [0] * PARTITIONS
        assert "remote.object.missing" in log_of(proxy)

        remote.rmdir()  # the empty directory the proxy's start-up check made
        (tmp_path / "moved-away").rename(remote)
        ends = {p: 1 + max(r[1] for r in everything if r[0] == p) for p in range(PARTITIONS)}
        async with asyncio.timeout(WAIT_S):
            while [p for p in partitions if await consumer.position(p) < ends[p.partition]]:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    got += [(m.partition, m.offset, m.key, m.value) for m in batch]
        assert by_partition(got) == everything
        assert len(got) == len(everything)  # each record exactly once
    finally:
        await consumer.stop()
        proxy.stop()


def console_consumer(
    distribution: KafkaDistribution, bootstrap: str, topic: str, messages: int
) -> list[tuple[int, int]]:
    """``kafka-console-consumer --from-beginning``: the partition and offset of every record
    it printed, in order, repeats included."""
    run = run_tool(
        distribution,
        distribution.console_consumer,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(messages),
        "--timeout-ms",
        str(int(WAIT_S * 1000)),
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.value=false",
        timeout_s=4 * WAIT_S,
    )
    found = re.findall(r"Partition:(\d+)\s+Offset:(\d+)", run.stdout)
    return [(int(partition), int(offset)) for partition, offset in found]


async def test_an_object_deleted_from_s3_holds_the_java_console_consumer_until_it_is_back(
    broker: BrokerInfo,
    s3: S3Info,
    spark: Any,
    kafka_distribution: KafkaDistribution,
    tmp_path: Path,
) -> None:
    bucket = f"missing-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    client = s3_client(s3)
    try:
        storage = storage_settings(s3, bucket, f"__rlm-missing-{uuid.uuid4().hex[:8]}")
        topic, everything = await tier_topic(broker, s3, spark, tmp_path, storage)
        # The second segment of partition 0: the console consumer reads the first, then
        # meets the hole in the middle of the remote range.
        listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{topic}-")["Contents"]
        logs = sorted(o["Key"] for o in listing if o["Key"].endswith(".log") and "/0/" in o["Key"])
        assert len(logs) >= 3, logs
        key = logs[1]
        content = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        client.delete_object(Bucket=bucket, Key=key)

        proxy = proxy_process(broker, tmp_path, {**storage, **UNCACHED})
        proxy.start()
        with ThreadPoolExecutor(1) as pool:
            try:
                reading = pool.submit(
                    console_consumer,
                    kafka_distribution,
                    proxy.bootstrap,
                    topic,
                    len(everything),
                )
                wait_until(
                    lambda: any(f"s3://{bucket}/{key}" in line for line in missing_lines(proxy)),
                    timeout_s=WAIT_S,
                    what="the missing object logged",
                )
                retried = proxy.metric("tierproxy_remote_fetch_errors_total", **NOT_FOUND) + 20
                wait_until(
                    lambda: (
                        proxy.metric("tierproxy_remote_fetch_errors_total", **NOT_FOUND) >= retried
                    ),
                    timeout_s=WAIT_S,
                    what="the consumer retrying the missing segment",
                )
                assert proxy.metric("tierproxy_remote_missing_objects") == 1
                assert len(missing_lines(proxy)) <= 3  # a line a minute, not one per retry
                assert not reading.done()  # waiting, neither failed nor reset

                client.put_object(Bucket=bucket, Key=key, Body=content)
                printed = reading.result(timeout=4 * WAIT_S)
            finally:
                proxy.stop()
        assert len(printed) == len(set(printed)), "a record was delivered twice"
        assert set(printed) == {(r[0], r[1]) for r in everything}
    finally:
        client.close()
        delete_bucket(s3, bucket)
