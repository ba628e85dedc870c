"""The raw Kafka client on uvloop, as ``tierproxy serve`` runs it (uvloop's transports are
not ``asyncio.Transport`` subclasses, so nothing may assume they are)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from proxy.embedded import BrokerInfo
from storage.kafka_client import KafkaClient

pytestmark = pytest.mark.integration


def test_metadata_round_trip_on_uvloop(broker: BrokerInfo) -> None:
    async def topics() -> object:
        async with KafkaClient(broker.bootstrap, client_id="uvloop-test") as client:
            return await client.metadata(None)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(topics()) is not None
