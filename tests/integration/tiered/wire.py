"""Single requests on a fresh connection, decoded: for comparing what Kafka and the proxy
answer to exactly the same question (ListOffsets, OffsetForLeaderEpoch, Fetch)."""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import Any

from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, build, decode_response, encode_request, nested_class
from protocol.messages import request_class as request_of

LIST_OFFSETS_VERSION = 9
OFLE_VERSION = 4


async def ask_raw(bootstrap: str, api_key: int, version: int, body: Any) -> bytes:
    """Send ``body`` to the first address of ``bootstrap``; the answer's payload as sent."""
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        payload = encode_request_header(api_key, version, 1, "wire-tests") + encode_request(body)
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    finally:
        writer.close()


async def ask(bootstrap: str, api_key: int, version: int, body: Any) -> Any:
    """Send ``body`` to the first address of ``bootstrap`` and decode the answer."""
    answer = await ask_raw(bootstrap, api_key, version, body)
    header_version = response_header_version(api_key, version)
    assert header_version is not None
    _correlation, header_size = parse_response_header(answer, header_version)
    return decode_response(api_key, version, memoryview(answer)[header_size:])


async def list_offsets(
    bootstrap: str, topic: str, timestamp: int, partitions: int, version: int = LIST_OFFSETS_VERSION
) -> list[tuple[int, ...]]:
    """(error, offset, timestamp, leader epoch) of each partition, asked at ``version``."""
    body_class = request_of(ApiKey.LIST_OFFSETS, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    body = build(
        body_class,
        replica_id=-1,
        isolation_level=0,
        timeout=datetime.timedelta(seconds=30),
        topics=(
            topic_class(
                name=topic,
                partitions=tuple(
                    build(partition_class, partition_index=p, timestamp=timestamp)
                    for p in range(partitions)
                ),
            ),
        ),
    )
    response = await ask(bootstrap, ApiKey.LIST_OFFSETS, version, body)
    return [
        (int(p.error_code), int(p.offset), int(p.timestamp), int(p.leader_epoch))
        for p in sorted(response.topics[0].partitions, key=lambda p: p.partition_index)
    ]


async def end_offset_for_epoch(
    bootstrap: str, topic: str, epoch: int, partitions: int
) -> list[tuple[int, ...]]:
    body_class = request_of(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFLE_VERSION)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    body = build(
        body_class,
        replica_id=-1,
        topics=(
            topic_class(
                topic=topic,
                partitions=tuple(
                    build(partition_class, partition=p, current_leader_epoch=-1, leader_epoch=epoch)
                    for p in range(partitions)
                ),
            ),
        ),
    )
    response = await ask(bootstrap, ApiKey.OFFSET_FOR_LEADER_EPOCH, OFLE_VERSION, body)
    return [
        (int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for p in sorted(response.topics[0].partitions, key=lambda p: p.partition)
    ]
