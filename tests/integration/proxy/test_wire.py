"""The proxy at the wire level, against the real broker: pipelining, byte-for-byte pass-through,
graceful SIGTERM with a request in flight, and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from protocol.frames import FrameDecoder, encode_frame
from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import (
    ApiKey,
    build,
    decode_response,
    encode_request,
    nested_class,
    request_class,
)
from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from proxy.interceptors.api_versions import restrict_api_versions
from tests.conditions import GENEROUS_S, wait_for, wait_until
from tests.fakes.kafka_requests import fetch_request
from tests.integration.proxy.conftest import start_proxy

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka", "kafka3", "tansu")]


class Wire:
    """A bare connection: pipelined requests out, whole response payloads in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(1 << 30)

    @classmethod
    async def open(cls, bootstrap: str) -> Wire:
        host, port = bootstrap.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def receive(self) -> bytes:
        async with asyncio.timeout(30):
            while True:
                frame = self.decoder.next_frame()
                if isinstance(frame, bytes):
                    return frame
                data = await self.reader.read(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                self.decoder.feed(data)

    async def at_eof(self) -> bool:
        async with asyncio.timeout(10):
            return await self.reader.read(1) == b""

    async def close(self) -> None:
        self.writer.close()


def requests(topic: str, count: int) -> list[tuple[ApiKey, int, bytes]]:
    """``count`` framed requests cycling through ApiVersions and Metadata (intercepted),
    ListOffsets and Fetch v12 (raw)."""
    api_versions = build(
        request_class(ApiKey.API_VERSIONS, 3), client_software_name="t", client_software_version="1"
    )
    metadata_class = request_class(ApiKey.METADATA, 12)
    metadata = build(
        metadata_class,
        topics=(build(nested_class(metadata_class, "topics"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    offsets_class = request_class(ApiKey.LIST_OFFSETS, 5)
    offsets_topic = nested_class(offsets_class, "topics")
    offsets = build(
        offsets_class,
        replica_id=-1,
        isolation_level=0,
        topics=(
            offsets_topic(
                name=topic,
                partitions=(
                    build(
                        nested_class(offsets_topic, "partitions"),
                        partition_index=0,
                        current_leader_epoch=-1,
                        timestamp=-2,
                    ),
                ),
            ),
        ),
    )
    fetch = fetch_request(12, [(topic, 0, 0, 1 << 20)], max_wait_ms=0, min_bytes=0)
    cycle = [
        (ApiKey.API_VERSIONS, 3, api_versions),
        (ApiKey.METADATA, 12, metadata),
        (ApiKey.LIST_OFFSETS, 5, offsets),
        (ApiKey.FETCH, 12, fetch),
    ]
    out = []
    for correlation_id in range(count):
        api_key, version, body = cycle[correlation_id % len(cycle)]
        header = encode_request_header(api_key, version, correlation_id, "wire-test")
        out.append((api_key, version, encode_frame(header + encode_request(body))))
    return out


async def pipelined(bootstrap: str, framed: list[tuple[ApiKey, int, bytes]]) -> list[bytes]:
    wire = await Wire.open(bootstrap)
    try:
        wire.writer.write(b"".join(frame for _, _, frame in framed))
        return [await wire.receive() for _ in framed]
    finally:
        await wire.close()


def body_of(api_key: ApiKey, version: int, payload: bytes) -> Any:
    header_version = response_header_version(api_key, version)
    assert header_version is not None
    _, size = parse_response_header(payload, header_version)
    return decode_response(api_key, version, payload[size:])


async def test_pipelined_requests_match_the_broker_byte_for_byte(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: Any
) -> None:
    topic = await new_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for i in range(50):
            await producer.send(topic, b"record %d" % i, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    framed = requests(topic, 400)
    through_proxy = await pipelined(proxy.bootstrap, framed)
    direct = await pipelined(broker.bootstrap, framed)
    for correlation_id, ((api_key, version, _), via, raw) in enumerate(
        zip(framed, through_proxy, direct, strict=True)
    ):
        assert int.from_bytes(via[:4], "big") == correlation_id
        if api_key in (ApiKey.LIST_OFFSETS, ApiKey.FETCH):
            assert via == raw, f"{api_key.name} answer {correlation_id} differs"
        elif api_key == ApiKey.API_VERSIONS:
            proxied, original = body_of(api_key, version, via), body_of(api_key, version, raw)
            # KRaft brokers report the metadata log offset they read their features at as
            # the finalized-features epoch: it grows between the two runs, as in any two
            # answers of the same broker.
            assert proxied.finalized_features_epoch <= original.finalized_features_epoch
            assert proxied == restrict_api_versions(
                dataclasses.replace(
                    original, finalized_features_epoch=proxied.finalized_features_epoch
                )
            )
        else:
            proxied, original = body_of(api_key, version, via), body_of(api_key, version, raw)
            assert [(b.host, b.port) for b in proxied.brokers] == [(proxy.host, proxy.port)]
            assert proxied.topics == original.topics


def test_sigterm_finishes_the_request_in_flight_then_exits(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    info = start_proxy(broker, tmp_path)
    try:
        asyncio.run(sigterm_round(info))
        wait_until(lambda: not info.process.running, what="the proxy exited")
        log = info.process.log_path.read_text()
        assert "event=proxy.stopping" in log
        assert "event=proxy.stopped" in log
    finally:
        info.process.stop()


def fetches_received(info: TierproxyServer) -> float:
    """Fetch requests the proxy has read (``tierproxy_requests_total{api="fetch"}``)."""
    url = f"http://127.0.0.1:{info.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=GENEROUS_S) as response:
        text = response.read().decode()
    prefix = 'tierproxy_requests_total{api="fetch"} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


async def sigterm_round(info: TierproxyServer) -> None:
    topic = f"sigterm-{uuid.uuid4().hex[:8]}"
    # A long poll on an empty partition: the broker answers after max_wait (1.5 s).
    long_poll = fetch_request(12, [(topic, 0, 0, 1 << 20)], max_wait_ms=1500)
    wire = await Wire.open(info.bootstrap)
    header = encode_request_header(ApiKey.FETCH, 12, 77, "sigterm-test")
    wire.writer.write(encode_frame(header + encode_request(long_poll)))
    await wire.writer.drain()
    await wait_for(lambda: fetches_received(info) >= 1, what="the proxy read the Fetch")
    assert info.process.pid is not None
    os.kill(info.process.pid, signal.SIGTERM)
    answer = await wire.receive()
    assert int.from_bytes(answer[:4], "big") == 77
    assert await wire.at_eof()
    await wire.close()


async def test_prometheus_endpoint_counts_what_passed(proxy: TierproxyServer) -> None:
    framed = requests("metrics-topic", 8)
    await pipelined(proxy.bootstrap, framed)

    def scrape() -> str:
        url = f"http://127.0.0.1:{proxy.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=GENEROUS_S) as response:
            return str(response.read().decode())

    text = await asyncio.to_thread(scrape)
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    for api in ("api_versions", "metadata", "list_offsets", "fetch"):
        assert samples[f'tierproxy_requests_total{{api="{api}"}}'] >= 2
        assert samples[f'tierproxy_response_bytes_total{{api="{api}"}}'] > 0
        assert samples[f'tierproxy_request_latency_seconds_count{{api="{api}"}}'] >= 2
    assert samples["tierproxy_connections_total"] >= 1
    assert "tierproxy_connections_active" in samples
