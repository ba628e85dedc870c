"""Clients older than the proxy's decoders are served by the broker, never disconnected.

The proxy decodes Fetch from v4, ListOffsets from v1 and OffsetForLeaderEpoch from v2 (the
versions Kafka 4 still speaks), and advertises only those. A client that never asks
ApiVersions (kafka-python told to speak Kafka 0.10.0: Fetch v2, ListOffsets v0) still
sends older ones; Kafka 3.9 serves them, so the proxy passes them to the broker as they are
(with one log line per connection) and the client reads the broker's local log.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol.headers import encode_request_header
from protocol.messages import ApiKey, decode_response, encode_request, request_class
from proxy.embedded import BrokerInfo
from proxy.embedded.tierproxy import TierproxyServer
from tests.conftest import NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka3")]

COUNT = 200


def advertised_ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ApiVersions v3, asked on a plain socket as any client would."""
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    body_class = request_class(ApiKey.API_VERSIONS, 3)
    body = encode_request(body_class(client_software_name="t", client_software_version="1"))
    frame = encode_request_header(ApiKey.API_VERSIONS, 3, 1, "old-clients") + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    response = decode_response(ApiKey.API_VERSIONS, 3, memoryview(payload)[4:])
    return {int(e.api_key): (int(e.min_version), int(e.max_version)) for e in response.api_keys}


def test_the_proxy_advertises_the_read_versions_it_decodes(
    proxy: TierproxyServer, broker: BrokerInfo
) -> None:
    direct = advertised_ranges(broker.bootstrap)
    through = advertised_ranges(proxy.bootstrap)
    assert direct[ApiKey.FETCH] == (0, 17) and direct[ApiKey.LIST_OFFSETS][0] == 0
    assert through[ApiKey.FETCH] == (4, 17)
    assert through[ApiKey.LIST_OFFSETS] == (1, 9)
    assert through[ApiKey.OFFSET_FOR_LEADER_EPOCH] == (2, 4)


async def test_a_kafka_0_10_client_reads_every_record_through_the_proxy(
    proxy: TierproxyServer, broker: BrokerInfo, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(COUNT):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=proxy.bootstrap,
        api_version=(0, 10, 0),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    got: list[tuple[int, bytes | None]] = []
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        deadline = time.monotonic() + 60
        while len(got) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got += [(m.offset, m.value) for m in batch]
    finally:
        consumer.close()
    assert got == [(i, b"v%d" % i) for i in range(COUNT)]
    assert "request.version.passed" in proxy.process.log_path.read_text()
