"""The pipeline's hold on its transactional id against Apache Kafka (4.x and 3.9): one holder
at a time, a waiting pipeline that logs one line and takes over when the holder releases or
stops, and a fenced holder whose writes Kafka refuses and READ_COMMITTED readers never see.

No Spark here: :class:`storage.tiering.lease.PipelineLease` on a real broker, and a raw
:class:`~storage.kafka_client.transactional.TransactionalProducer` for a holder that stops
(its transaction left open) or a second pipeline that does not wait (InitProducerId at once).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from proxy.embedded import BrokerInfo, create_topic
from storage.kafka_client import READ_COMMITTED, KafkaClient, KafkaClientError
from storage.kafka_client.consumer import AssignedConsumer
from storage.kafka_client.transactional import ProducerFencedError, TransactionalProducer
from storage.tiering.lease import NotHoldingError, PipelineLease
from tests.conditions import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka", "kafka3")]

TIMEOUT_MS = 6_000
TAKEOVER_S = 90.0
"""A stopped holder's transaction is aborted a timeout after it opened, at the broker's next
scan (``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s); generous
for two busy cores."""


@pytest.fixture
async def metadata_topic(broker: BrokerInfo) -> str:
    name = f"__lease-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, name, partitions=3)
    return name


@pytest.fixture
async def clients(broker: BrokerInfo) -> AsyncIterator[list[KafkaClient]]:
    opened = [KafkaClient(broker.bootstrap, client_id=f"lease-{i}") for i in range(4)]
    try:
        yield opened
    finally:
        for client in opened:
            await client.close()


def lease(client: KafkaClient, topic: str, transactional_id: str) -> PipelineLease:
    return PipelineLease(
        client, transactional_id=transactional_id, topic=topic, transaction_timeout_ms=TIMEOUT_MS
    )


async def committed_values(client: KafkaClient, topic: str) -> list[bytes]:
    """Every record value a READ_COMMITTED reader sees in ``topic``, once it read to the end."""
    consumer = AssignedConsumer(client, topic, 3, max_wait_ms=50, isolation_level=READ_COMMITTED)
    ends = await consumer.end_offsets()
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while any((consumer.position(p) or 0) < ends[p] for p in ends):
        assert time.monotonic() < deadline, "the topic was not read to its end"
        for records in (await consumer.poll()).values():
            values += [r.value or b"" for r in records]
    return sorted(values)


async def test_a_live_holder_keeps_its_hold_and_hands_it_over_on_release(
    clients: list[KafkaClient], metadata_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    tid = f"tierproxy-test-{uuid.uuid4().hex[:8]}"
    first, second = lease(clients[0], metadata_topic, tid), lease(clients[1], metadata_topic, tid)
    assert await first.acquire()
    await first.send(1, b"first-1")
    with caplog.at_level(logging.INFO, logger="storage.tiering.lease"):
        # Longer than a timeout: the holder renews, so the waiting one never takes over.
        assert not await second.acquire(patience=TIMEOUT_MS / 1000 * 2)
    waiting = [r for r in caplog.records if "another pipeline holds" in r.getMessage()]
    assert len(waiting) == 1, [r.getMessage() for r in waiting]
    assert f"transactional id {tid!r}" in waiting[0].getMessage()
    assert " since " in waiting[0].getMessage()
    await first.send(2, b"first-2")
    started = time.monotonic()
    await first.release()
    assert await second.acquire()
    assert time.monotonic() - started < TIMEOUT_MS / 1000, "a release hands over at once"
    await second.send(1, b"second-1")
    with pytest.raises(NotHoldingError):
        await first.send(1, b"first-after-release")
    await second.release()
    assert await committed_values(clients[2], metadata_topic) == [
        b"first-1",
        b"first-2",
        b"second-1",
    ]


async def test_a_stopped_holder_is_taken_over_and_its_open_transaction_never_read(
    clients: list[KafkaClient], metadata_topic: str
) -> None:
    """The holder stops with a record in an open transaction (a crash or SIGSTOP mid-write):
    the coordinator aborts it after the timeout, the waiting pipeline takes over, and the
    stopped one's commit is refused when it comes back."""
    tid = f"tierproxy-test-{uuid.uuid4().hex[:8]}"
    stopped = TransactionalProducer(
        clients[0], tid, metadata_topic, transaction_timeout_ms=TIMEOUT_MS
    )
    await stopped.init()
    await stopped.add_partitions([0, 1])
    await stopped.produce(1, [(None, b"stopped-uncommitted")])
    waiting = lease(clients[1], metadata_topic, tid)
    started = time.monotonic()
    assert await asyncio.wait_for(waiting.acquire(), TAKEOVER_S)
    assert time.monotonic() - started >= TIMEOUT_MS / 1000 * 0.9, "taken over too early"
    await waiting.send(1, b"taker-1")
    with pytest.raises(ProducerFencedError):
        await stopped.end(commit=True)
    await waiting.release()
    assert await committed_values(clients[2], metadata_topic) == [b"taker-1"]


async def test_a_holder_fenced_by_another_writes_nothing_more(
    clients: list[KafkaClient], metadata_topic: str
) -> None:
    """A second pipeline that does not wait (InitProducerId at once) fences the holder: the
    holder's next write fails, nothing of it is read, and it stops holding."""
    tid = f"tierproxy-test-{uuid.uuid4().hex[:8]}"
    holder = lease(clients[0], metadata_topic, tid)
    assert await holder.acquire()
    await holder.send(0, b"holder-1")
    intruder = TransactionalProducer(
        clients[1], tid, metadata_topic, transaction_timeout_ms=TIMEOUT_MS
    )
    await intruder.init()
    with pytest.raises(NotHoldingError, match="fenced"):
        await holder.send(0, b"holder-after-fence")
    assert not holder.holding
    with pytest.raises(NotHoldingError):
        holder.ensure_held()
    await wait_for(holder.lost.is_set, what="the lost hold is signalled")
    await intruder.add_partitions([2])
    await intruder.produce(2, [(None, b"intruder-1")])
    await intruder.end(commit=True)
    await holder.release()
    assert await committed_values(clients[2], metadata_topic) == [b"holder-1", b"intruder-1"]


async def test_a_refused_record_fails_its_sender_and_the_hold_stays(
    clients: list[KafkaClient], metadata_topic: str
) -> None:
    """A record the broker refuses for itself (too large) fails its sender with the refusal;
    its transaction is aborted, the next one opened, and the hold kept."""
    tid = f"tierproxy-test-{uuid.uuid4().hex[:8]}"
    holder = lease(clients[0], metadata_topic, tid)
    assert await holder.acquire()
    with pytest.raises(KafkaClientError, match="MESSAGE_TOO_LARGE"):
        await holder.send(0, b"x" * (2 * 1024 * 1024))
    assert holder.holding
    await holder.send(0, b"after")
    await holder.release()
    assert await committed_values(clients[2], metadata_topic) == [b"after"]
