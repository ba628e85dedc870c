"""Single requests on a fresh connection, decoded: for comparing what Kafka and the proxy
answer to exactly the same question (ListOffsets, OffsetForLeaderEpoch, Fetch)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from protocol.headers import encode_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, decode_response, encode_request
from tests.fakes.kafka_requests import list_offsets_request, offset_for_leader_epoch_request

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
    body = list_offsets_request(version, timestamp, topic=topic, partitions=range(partitions))
    response = await ask(bootstrap, ApiKey.LIST_OFFSETS, version, body)
    return [
        (int(p.error_code), int(p.offset), int(p.timestamp), int(p.leader_epoch))
        for p in sorted(response.topics[0].partitions, key=lambda p: p.partition_index)
    ]


async def end_offset_for_epoch(
    bootstrap: str, topic: str, epoch: int, partitions: int
) -> list[tuple[int, ...]]:
    body = offset_for_leader_epoch_request(
        OFLE_VERSION, epoch, topic=topic, partitions=range(partitions)
    )
    response = await ask(bootstrap, ApiKey.OFFSET_FOR_LEADER_EPOCH, OFLE_VERSION, body)
    return [
        (int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for p in sorted(response.topics[0].partitions, key=lambda p: p.partition)
    ]
