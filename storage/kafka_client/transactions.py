"""The transaction requests, each over one connection: FindCoordinator (transaction key),
InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn and DescribeTransactions.

Transactions "v1" as Kafka's producer before KIP-890 part 2 runs them: the client adds each
partition with AddPartitionsToTxn (v3 and below, the client's versions) before it produces to
it, and EndTxn (v4 and below) keeps the producer epoch. Kafka 4 brokers that run transactions
v2 still serve these versions, and the epoch then stays the pipeline's fencing token: EndTxn
v5 would bump it on every commit (:mod:`.connection` stops EndTxn at v4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import KafkaError
from protocol.messages import ApiKey, nested_class
from protocol.messages import build as build_entity
from storage.kafka_client.connection import Connection
from storage.kafka_client.writes import init_producer_id

__all__ = [
    "TRANSACTION_KEY",
    "CoordinatorAnswer",
    "ProducerIdentity",
    "TransactionDescription",
    "add_partitions_to_txn",
    "describe_transaction",
    "end_txn",
    "find_coordinator",
    "init_transactional_producer",
]

TRANSACTION_KEY: Final = 1
"""FindCoordinator ``key_type`` of a transactional id (0 is a consumer group)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorAnswer:
    error: KafkaError
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdentity:
    """InitProducerId's answer: the producer id and the epoch that fences older ones."""

    error: KafkaError
    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id."""

    error: KafkaError
    state: str
    """Kafka's ``TransactionState`` name: ``Empty``, ``Ongoing``, ``PrepareCommit``,
    ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ``Dead``, ``PrepareEpochFence``."""
    producer_id: int
    epoch: int
    timeout_ms: int
    start_ms: int
    """When the ongoing transaction started (-1 when none is)."""


async def find_coordinator(connection: Connection, key: str) -> CoordinatorAnswer:
    """The transaction coordinator of the transactional id ``key``."""

    def build(cls: type[Any]) -> Any:
        return build_entity(cls, key=key, key_type=TRANSACTION_KEY, coordinator_keys=(key,))

    response = await connection.request(ApiKey.FIND_COORDINATOR, build)
    found = response.coordinators[0] if hasattr(response, "coordinators") else response
    return CoordinatorAnswer(
        error=KafkaError(int(found.error_code)),
        node_id=int(found.node_id),
        host=str(found.host),
        port=int(found.port),
    )


async def init_transactional_producer(
    connection: Connection, transactional_id: str, *, transaction_timeout_ms: int
) -> ProducerIdentity:
    """A producer id and a new epoch for ``transactional_id``: every holder of an older
    epoch is fenced, and a transaction it left open is aborted first (the coordinator
    answers CONCURRENT_TRANSACTIONS until the abort is complete)."""

    error, producer_id, epoch = await init_producer_id(
        connection, transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
    )
    return ProducerIdentity(error=error, producer_id=producer_id, epoch=epoch)


async def add_partitions_to_txn(
    connection: Connection,
    transactional_id: str,
    *,
    producer_id: int,
    epoch: int,
    topic: str,
    partitions: Sequence[int],
) -> dict[int, KafkaError]:
    """Add ``partitions`` of ``topic`` to the open transaction (opening one if none is);
    each partition's error."""

    def build(cls: type[Any]) -> Any:
        topic_cls = nested_class(cls, "v3_and_below_topics")
        return build_entity(
            cls,
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(
                build_entity(topic_cls, name=topic, partitions=tuple(partitions)),
            ),
        )

    response = await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, build)
    return {
        int(p.partition_index): KafkaError(int(p.partition_error_code))
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


async def end_txn(
    connection: Connection, transactional_id: str, *, producer_id: int, epoch: int, commit: bool
) -> KafkaError:
    """Commit (or abort) the open transaction; returns once its markers are written."""

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            committed=commit,
        )

    response = await connection.request(ApiKey.END_TXN, build)
    return KafkaError(int(response.error_code))


async def describe_transaction(
    connection: Connection, transactional_id: str
) -> TransactionDescription:
    """The coordinator's state of ``transactional_id`` (TRANSACTIONAL_ID_NOT_FOUND: never
    used, or expired)."""

    def build(cls: type[Any]) -> Any:
        return build_entity(cls, transactional_ids=(transactional_id,))

    response = await connection.request(ApiKey.DESCRIBE_TRANSACTIONS, build)
    state = response.transaction_states[0]
    start = int(state.transaction_start_time.timestamp() * 1000)  # 0: none (kio's seam)
    return TransactionDescription(
        error=KafkaError(int(state.error_code)),
        state=str(state.transaction_state),
        producer_id=int(state.producer_id),
        epoch=int(state.producer_epoch),
        timeout_ms=int(state.transaction_timeout.total_seconds() * 1000),
        start_ms=start if start > 0 else -1,
    )
