"""What the read path keeps for a request lives exactly as long as the request is in flight.

A Fetch's plan (its tiered partitions, where the client asked, the probe positions sent) is
needed again when the broker answers. Memory short, the proxy reads no new requests; it
never forgets an outstanding plan, whose answer would otherwise reach the client as the
broker sent it: the probe's records, at the probe's position, in place of the client's.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import ApiKey, encode_request
from protocol.records import parse_batch_header
from proxy.exchange_memory import ExchangeMemory
from tests.conditions import wait_for
from tests.fakes.kafka_requests import fetch_request
from tests.fakes.kio_client import KioClient
from tests.fakes.record_batches import batches_of
from tests.fakes.wire_broker import Script, WireBroker
from tests.unit.proxy.remote.env import TOPIC, Env, EnvFactory, only


def holds(part: object, offset: int) -> bool:
    """Whether the partition's first batch holds ``offset``."""
    batches = batches_of(part.records)  # type: ignore[attr-defined]
    if not batches:
        return False
    header = parse_batch_header(batches[0])
    return header.base_offset <= offset < header.next_offset


def memory_of(env: Env) -> ExchangeMemory:
    memory: ExchangeMemory = env.proxy._router.memory
    return memory


async def test_a_long_polled_fetch_keeps_its_plan_while_memory_is_short(
    make_env: EnvFactory, fake_broker: WireBroker
) -> None:
    """The first Fetch waits at the broker (its probe long-polled) while a second client
    asks; the bound is below one plan. The second Fetch waits to be read, and the first is
    answered from the remote tier at the client's offset, not with the probe's batch."""
    env = await make_env(proxy_settings={"request_plans_max_bytes": 1})
    release = asyncio.Event()
    fetches: list[RequestHeader] = []
    answer: Script = env.broker.script

    async def long_poll_first(header: RequestHeader, body: bytes) -> bytes | None:
        if header.api_key == ApiKey.FETCH:
            fetches.append(header)
            if len(fetches) == 1:
                await release.wait()
        return await answer(header, body)

    fake_broker.script = long_poll_first
    first = asyncio.create_task(
        env.client.call(ApiKey.FETCH, 12, fetch_request(12, [(TOPIC, 0, 3, 1 << 20)]), 30)
    )
    await wait_for(lambda: bool(fetches), what="the first Fetch reached the broker")
    other = await KioClient.connect(env.proxy)
    try:
        second = asyncio.create_task(
            other.call(ApiKey.FETCH, 12, fetch_request(12, [(TOPIC, 0, 5, 1 << 20)]), 30)
        )
        await wait_for(lambda: memory_of(env).waiting == 1, what="the second Fetch waits")
        assert len(fetches) == 1, "a request was read while memory was short"
        release.set()
        assert holds(only(await first), 3)
        assert holds(only(await second), 5)
    finally:
        await other.close()
    await wait_for(lambda: memory_of(env).held == 0, what="every plan released")


async def test_a_closed_connection_releases_the_plans_of_its_fetches_in_flight(
    make_env: EnvFactory, fake_broker: WireBroker
) -> None:
    env = await make_env()
    release = asyncio.Event()
    answer: Script = env.broker.script

    async def never_answer_fetches(header: RequestHeader, body: bytes) -> bytes | None:
        if header.api_key == ApiKey.FETCH:
            await release.wait()
        return await answer(header, body)

    fake_broker.script = never_answer_fetches
    address = env.proxy.routes[0].advertised
    _reader, writer = await asyncio.open_connection(address.host, address.port)
    for correlation_id in range(3):
        payload = encode_request_header(ApiKey.FETCH, 12, correlation_id, "c") + encode_request(
            fetch_request(12, [(TOPIC, 0, 3, 1 << 20)])
        )
        writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()
    await wait_for(lambda: memory_of(env).held > 0, what="the Fetches are in flight")
    # A reset, not a half-close (whose Fetches the proxy would still answer first).
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    await wait_for(lambda: memory_of(env).held == 0, what="the closed connection's plans freed")
    release.set()
