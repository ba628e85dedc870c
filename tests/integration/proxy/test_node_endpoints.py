"""KIP-951 node endpoints from a real Kafka, through the streaming proxy.

A Fetch v16+ sent to a broker that does not lead the partition is answered with
NOT_LEADER_OR_FOLLOWER and, at the very end of the response, the leader's address
(``KafkaApis.handleFetchRequest``). Through the proxy the response streams, and only that
tail is rewritten in place: the client must see the proxy's address of the leader, in a
response as long as the broker's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.fetch_tail import TailFinder, read_tail
from protocol.messages import ApiKey
from proxy.embedded import KAFKA_4, create_topic, ensure_jars
from proxy.embedded.kafka_cluster import KafkaCluster
from proxy.embedded.tierproxy import TierproxyServer
from storage.kafka_client import KafkaClient
from tests.fakes.kafka_requests import fetch_request
from tests.integration.proxy.conftest import start_proxy
from tests.integration.tiered.wire import ask_raw

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(
        ensure_jars(KAFKA_4), size=2, work_dir=tmp_path_factory.mktemp("endpoints")
    ) as nodes:
        nodes.start()
        yield nodes


@pytest.fixture
def proxy(cluster: KafkaCluster, tmp_path: Path) -> Iterator[TierproxyServer]:
    server = start_proxy(cluster.info, tmp_path)
    yield server
    server.stop()


def tail_of(payload: bytes, version: int) -> tuple[int, bytes]:
    finder = TailFinder(ApiKey.FETCH, version)
    finder.feed(payload)
    assert finder.tail_start is not None
    return finder.tail_start, payload[finder.tail_start :]


@pytest.mark.parametrize("version", [16, 17, 18])
async def test_a_moved_leaders_endpoint_comes_back_as_the_proxys_address(
    cluster: KafkaCluster, proxy: TierproxyServer, version: int
) -> None:
    topic = f"endpoints-{uuid.uuid4().hex[:8]}"
    # One replica (create_topic's): the other node is not even a follower, so it must send
    # the client to the leader.
    await create_topic(cluster.bootstrap, topic)
    async with KafkaClient(cluster.bootstrap) as client:
        metadata = await client.metadata([topic])
    described = metadata.topics[topic]
    leader = described.partitions[0].leader_id
    elsewhere = next(node for node in metadata.brokers if node != leader)
    async with KafkaClient(proxy.bootstrap) as client:
        brokers = (await client.metadata()).brokers
    proxied = {node: f"{b.host}:{b.port}" for node, b in brokers.items()}
    direct = {node: f"{b.host}:{b.port}" for node, b in metadata.brokers.items()}
    request = fetch_request(version, [(described.topic_id, 0, 0, 1 << 20)], max_wait_ms=100)

    from_broker = await ask_raw(direct[elsewhere], ApiKey.FETCH, version, request)
    through_proxy = await ask_raw(proxied[elsewhere], ApiKey.FETCH, version, request)

    head, broker_tail = tail_of(from_broker, version)
    assert [(e.node_id, f"{e.host}:{e.port}") for e in read_tail(broker_tail).node_endpoints] == [
        (leader, direct[leader])
    ]
    assert len(through_proxy) == len(from_broker)
    assert through_proxy[:head] == from_broker[:head]
    _, proxy_tail = tail_of(through_proxy, version)
    assert [(e.node_id, f"{e.host}:{e.port}") for e in read_tail(proxy_tail).node_endpoints] == [
        (leader, proxied[leader])
    ]
