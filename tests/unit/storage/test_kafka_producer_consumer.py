"""The metadata topic's producer and consumer against two scripted brokers.

A small cluster of two :class:`KioBroker` nodes keeps one log per partition and answers
Metadata, InitProducerId, Produce, ListOffsets and Fetch like Apache Kafka does; moving a
partition's leader between them exercises NOT_LEADER_OR_FOLLOWER, the metadata refresh and
the retry with back-off, byte for byte over real sockets.
"""

from __future__ import annotations

import datetime
import functools
import logging
import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest

from protocol.messages import ApiKey, ErrorCode, nested_class, response_class
from protocol.messages import build as build_entity
from protocol.records import iter_batches
from storage.kafka_client import KafkaClient
from storage.kafka_client.consumer import AssignedConsumer
from storage.kafka_client.leaders import TopicAuthorizationError
from storage.kafka_client.producer import TopicProducer
from storage.retry import RetryPolicy
from storage.retry_log import RetryLog
from tests.fakes.kafka_responses import partition_answers
from tests.fakes.kio_broker import KAFKA_APIS, TANSU_APIS, KioBroker, metadata_answer, running

TOPIC = "__meta"
PARTITIONS = 2
FAST = RetryPolicy(backoff_ms=1, backoff_max_ms=5, max_attempts=50, deadline_ms=None)
APIS = {**KAFKA_APIS, ApiKey.PRODUCE: (3, 12), ApiKey.INIT_PRODUCER_ID: (0, 5)}


@dataclass
class Cluster:
    """Two brokers sharing one view of leaders and logs; each answers for its node id."""

    nodes: dict[int, KioBroker] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 1))
    logs: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    """Each partition's batches, with their base offsets set as a broker sets them."""
    refuse: dict[int, list[ErrorCode]] = field(default_factory=dict)
    """Errors a node answers to its next Produce or Fetch requests, first to last."""
    log_start: int = 0

    def end(self, partition: int) -> int:
        return sum(h.record_count for _, h in iter_batches(b"".join(self.logs[partition])))

    def error_for(self, node: int, partition: int) -> ErrorCode:
        if self.refuse.get(node):
            return self.refuse[node].pop(0)
        if self.leaders[partition] != node:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.none

    def metadata(self, request: Any, version: int) -> Any:
        return metadata_answer(
            version,
            brokers={node: broker.port for node, broker in self.nodes.items()},
            topic=TOPIC,
            leaders=self.leaders,
        )

    def produce(self, node: int, request: Any, version: int) -> Any:
        cls = response_class(ApiKey.PRODUCE, version)
        topic_cls = nested_class(cls, "responses")
        partition_cls = nested_class(topic_cls, "partition_responses")
        answers = []
        for data in request.topic_data[0].partition_data:
            error, base = self.error_for(node, data.index), -1
            if error == ErrorCode.none:
                base = self.end(data.index)
                self.logs[data.index].append(struct.pack(">q", base) + bytes(data.records)[8:])
            answers.append(
                build_entity(
                    partition_cls,
                    index=data.index,
                    error_code=error,
                    base_offset=base,
                    log_append_time=None,
                    log_start_offset=0,
                    record_errors=(),
                    error_message=None,
                )
            )
        return build_entity(
            cls,
            responses=(build_entity(topic_cls, name=TOPIC, partition_responses=tuple(answers)),),
            throttle_time=datetime.timedelta(0),
        )

    def fetch(self, node: int, request: Any, version: int) -> Any:
        cls = response_class(ApiKey.FETCH, version)
        topic_cls = nested_class(cls, "responses")
        partition_cls = nested_class(topic_cls, "partitions")
        answers = []
        for wanted in request.topics[0].partitions:
            p = wanted.partition
            error = self.error_for(node, p)
            if error == ErrorCode.none and not self.log_start <= wanted.fetch_offset <= self.end(p):
                error = ErrorCode.offset_out_of_range
            answers.append(
                build_entity(
                    partition_cls,
                    partition_index=p,
                    error_code=error,
                    high_watermark=self.end(p),
                    last_stable_offset=self.end(p),
                    log_start_offset=self.log_start,
                    aborted_transactions=(),
                    preferred_read_replica=-1,
                    records=b"".join(self.logs[p]) if error == ErrorCode.none else b"",
                )
            )
        return build_entity(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(build_entity(topic_cls, topic=TOPIC, partitions=tuple(answers)),),
        )

    def list_offsets(self, node: int, request: Any, version: int) -> Any:
        return partition_answers(
            ApiKey.LIST_OFFSETS,
            version,
            request,
            lambda _topic, p: {
                "error_code": self.error_for(node, p.partition_index),
                "timestamp": -1,
                "offset": self.log_start if p.timestamp == -2 else self.end(p.partition_index),
                "leader_epoch": 0,
            },
        )


def init_producer_id(request: Any, version: int) -> Any:
    return build_entity(
        response_class(ApiKey.INIT_PRODUCER_ID, version),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id=7,
        producer_epoch=0,
    )


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    found = Cluster()
    async with AsyncExitStack() as stack:
        for node in (1, 2):
            fake = KioBroker(apis=dict(APIS))
            fake.handlers[ApiKey.METADATA] = found.metadata
            fake.handlers[ApiKey.INIT_PRODUCER_ID] = init_producer_id
            fake.handlers[ApiKey.PRODUCE] = functools.partial(found.produce, node)
            fake.handlers[ApiKey.FETCH] = functools.partial(found.fetch, node)
            fake.handlers[ApiKey.LIST_OFFSETS] = functools.partial(found.list_offsets, node)
            found.nodes[node] = await stack.enter_async_context(running(fake))
        yield found


def produced(broker: KioBroker) -> list[tuple[int, int, int]]:
    """``(partition, producer id, base sequence)`` of every batch ``broker`` was sent."""
    rows = []
    for key, request in broker.requests:
        if key == ApiKey.PRODUCE:
            for data in request.topic_data[0].partition_data:
                (header,) = (h for _, h in iter_batches(bytes(data.records)))
                rows.append((data.index, header.producer_id, header.base_sequence))
    return rows


def bootstrap(cluster: Cluster) -> str:
    return f"127.0.0.1:{cluster.nodes[1].port}"


async def test_records_are_acknowledged_with_their_offsets_and_sequences(
    cluster: Cluster,
) -> None:
    async with KafkaClient(bootstrap(cluster)) as client:
        producer = TopicProducer(client, TOPIC, retry=FAST)
        offsets = [await producer.send(p % PARTITIONS, b"v%d" % p) for p in range(5)]
        assert await producer.send_batch(0, [(b"k", b"a"), (None, b"b")]) == 3
    assert offsets == [0, 0, 1, 1, 2]
    assert produced(cluster.nodes[1]) == [
        (0, 7, 0),
        (1, 7, 0),
        (0, 7, 1),
        (1, 7, 1),
        (0, 7, 2),
        (0, 7, 3),
    ]
    assert [key for key, _ in cluster.nodes[1].requests].count(ApiKey.INIT_PRODUCER_ID) == 1


async def test_a_moved_leader_is_found_and_the_same_batch_sent_again(cluster: Cluster) -> None:
    async with KafkaClient(bootstrap(cluster)) as client:
        producer = TopicProducer(client, TOPIC, retry=FAST)
        assert await producer.send(1, b"first") == 0
        cluster.leaders[1] = 2  # an election: node 1 now answers NOT_LEADER_OR_FOLLOWER
        assert await producer.send(1, b"second") == 1
        cluster.refuse[2] = [ErrorCode.not_enough_replicas]
        assert await producer.send(1, b"third") == 2
    assert produced(cluster.nodes[1]) == [(1, 7, 0), (1, 7, 1)]
    # The refused batches went again, with the same sequence, to the new leader.
    assert produced(cluster.nodes[2]) == [(1, 7, 1), (1, 7, 2), (1, 7, 2)]


async def test_tansu_gets_plain_batches(cluster: Cluster) -> None:
    cluster.nodes[1].apis = {**TANSU_APIS, ApiKey.PRODUCE: (3, 12)}
    async with KafkaClient(bootstrap(cluster)) as client:
        assert await TopicProducer(client, TOPIC, retry=FAST).send(0, b"v") == 0
    assert produced(cluster.nodes[1]) == [(0, -1, -1)]


async def test_a_refused_write_is_raised_at_once(cluster: Cluster) -> None:
    cluster.refuse[1] = [ErrorCode.topic_authorization_failed]
    async with KafkaClient(bootstrap(cluster)) as client:
        with pytest.raises(TopicAuthorizationError) as refused:
            await TopicProducer(client, TOPIC, retry=FAST).send(0, b"v")
    assert refused.value.request == "Produce"


async def produce_values(cluster: Cluster, partition: int, values: list[bytes]) -> None:
    async with KafkaClient(bootstrap(cluster)) as client:
        producer = TopicProducer(client, TOPIC, retry=FAST)
        for value in values:
            await producer.send(partition, value)


async def test_the_consumer_reads_every_partition_and_follows_its_leader(
    cluster: Cluster,
) -> None:
    await produce_values(cluster, 0, [b"a", b"b"])
    await produce_values(cluster, 1, [b"c"])
    async with KafkaClient(bootstrap(cluster)) as client:
        consumer = AssignedConsumer(client, TOPIC, PARTITIONS, retry=FAST)
        first = await consumer.poll()
        assert {p: [(r.offset, r.value) for r in rs] for p, rs in first.items()} == {
            0: [(0, b"a"), (1, b"b")],
            1: [(0, b"c")],
        }
        assert (consumer.position(0), consumer.end(0)) == (2, 2)

        cluster.leaders[0] = 2
        await produce_values(cluster, 0, [b"d"])
        found: list[bytes | None] = []
        for _ in range(5):  # node 1 answers NOT_LEADER for partition 0 until it is asked anew
            found += [r.value for r in (await consumer.poll()).get(0, [])]
        assert found == [b"d"]
        assert consumer.position(0) == 3
        assert await consumer.end_offsets() == {0: 3, 1: 1}


async def test_the_consumer_resumes_from_given_positions_and_resets_when_out_of_range(
    cluster: Cluster,
) -> None:
    await produce_values(cluster, 0, [b"a", b"b", b"c"])
    async with KafkaClient(bootstrap(cluster)) as client:
        consumer = AssignedConsumer(client, TOPIC, PARTITIONS, retry=FAST)
        consumer.seek(0, 2)
        consumer.seek(1, 40)  # beyond the log: read from its start again
        assert [(r.offset, r.value) for r in (await consumer.poll())[0]] == [(2, b"c")]
        assert consumer.position(1) is None
        await consumer.poll()
        assert consumer.position(1) == 0
        assert [key for key, _ in cluster.nodes[1].requests].count(ApiKey.LIST_OFFSETS) == 1


async def test_the_consumer_waits_while_the_brokers_are_away(cluster: Cluster) -> None:
    address = bootstrap(cluster)
    await produce_values(cluster, 0, [b"a"])
    async with KafkaClient(address, request_timeout_ms=500) as client:
        consumer = AssignedConsumer(client, TOPIC, PARTITIONS, retry=FAST)
        cluster.refuse[1] = [ErrorCode.not_leader_or_follower] * 4
        assert await consumer.poll() == {}  # nothing fetched: backed off, not raised
        cluster.nodes[1].close_on = ApiKey.FETCH
        assert await consumer.poll() == {}
        cluster.nodes[1].close_on = None
        found: list[bytes | None] = []
        for _ in range(5):
            found += [r.value for r in (await consumer.poll()).get(0, [])]
        assert found == [b"a"]


async def test_a_refused_read_is_raised(cluster: Cluster) -> None:
    async with KafkaClient(bootstrap(cluster)) as client:
        consumer = AssignedConsumer(client, TOPIC, PARTITIONS, retry=FAST)
        consumer.seek(0, 0)
        consumer.seek(1, 0)
        cluster.refuse[1] = [ErrorCode.topic_authorization_failed]
        with pytest.raises(TopicAuthorizationError) as refused:
            await consumer.poll()
    assert refused.value.request == "Fetch"


async def test_the_consumer_logs_its_retries_with_back_off_then_its_reconnection(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    address = bootstrap(cluster)
    await produce_values(cluster, 0, [b"a"])
    clock = [0.0]
    async with KafkaClient(address, request_timeout_ms=500) as client:
        consumer = AssignedConsumer(
            client, TOPIC, PARTITIONS, retry=FAST, retry_log=RetryLog(clock=lambda: clock[0])
        )
        cluster.nodes[1].close_on = ApiKey.FETCH
        with caplog.at_level(logging.INFO, logger="storage.kafka_client.consumer"):
            for _ in range(10):
                assert await consumer.poll() == {}
                clock[0] += 1.0
            cluster.nodes[1].close_on = None
            found: list[bytes | None] = []
            for _ in range(5):
                found += [r.value for r in (await consumer.poll()).get(0, [])]
    assert found == [b"a"]

    lines = [(r.tierproxy_event, r.tierproxy_fields) for r in caplog.records]  # type: ignore[attr-defined]
    assert [fields["attempt"] for name, fields in lines if name == "metadata.consumer.retry"] == [
        1,
        2,
        4,
        8,
    ]
    (reconnected,) = [r for r in caplog.records if "reconnected" in r.getMessage()]
    assert reconnected.getMessage() == f"consuming {TOPIC}: reconnected after 10.0 s (11 attempts)"
