"""The write requests, each over one connection: Produce, InitProducerId and DeleteRecords."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Final

from protocol.errors import KafkaError
from protocol.messages import ApiKey
from protocol.messages import build as build_entity
from storage.kafka_client.connection import Connection
from storage.kafka_client.reads import partition_topics
from storage.kafka_client.values import DeletedRecords, ProducedBatch

__all__ = ["ACKS_ALL", "delete_records", "init_producer_id", "produce"]

ACKS_ALL: Final = -1
"""``acks=all``: the leader answers once every in-sync replica has the batch."""
_TRANSACTION_TIMEOUT_MS: Final = 60_000
"""What Kafka's producer sends in InitProducerId (``transaction.timeout.ms``); brokers ignore
it for a producer without a transactional id."""


async def produce(
    connection: Connection,
    topic: str,
    partition: int,
    batch: bytes,
    *,
    timeout_ms: int,
    transactional_id: str | None = None,
) -> ProducedBatch:
    """Append one record batch to ``topic``-``partition`` on its leader, with ``acks=all``
    (a transactional batch names its ``transactional_id``)."""
    rows = [(topic, {"index": partition, "records": batch})]

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            transactional_id=transactional_id,
            acks=ACKS_ALL,
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            topic_data=partition_topics(
                cls, rows, topics_field="topic_data", partitions_field="partition_data"
            ),
        )

    response = await connection.request(ApiKey.PRODUCE, build)
    for t in response.responses:
        for p in t.partition_responses:
            if t.name == topic and int(p.index) == partition:
                return ProducedBatch(
                    error=KafkaError(int(p.error_code)),
                    base_offset=int(p.base_offset),
                    message=getattr(p, "error_message", None),
                )
    return ProducedBatch(
        error=KafkaError.UNKNOWN_SERVER_ERROR,
        base_offset=-1,
        message=f"the answer did not name {topic}-{partition}",
    )


async def init_producer_id(
    connection: Connection,
    *,
    transactional_id: str | None = None,
    transaction_timeout_ms: int = _TRANSACTION_TIMEOUT_MS,
) -> tuple[KafkaError, int, int]:
    """A producer id and epoch: ``(error, producer id, producer epoch)``; for an idempotent
    producer without ``transactional_id``, or a new epoch of ``transactional_id`` (sent to
    its coordinator)."""

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=transaction_timeout_ms),
            producer_id=-1,
            producer_epoch=-1,
        )

    response = await connection.request(ApiKey.INIT_PRODUCER_ID, build)
    return (
        KafkaError(int(response.error_code)),
        int(response.producer_id),
        int(response.producer_epoch),
    )


async def delete_records(
    connection: Connection, targets: Sequence[tuple[str, int, int]], *, timeout_ms: int
) -> list[DeletedRecords]:
    """Move the log start of ``(topic, partition, offset)`` targets forward."""
    partitions = [(topic, {"partition_index": p, "offset": o}) for topic, p, o in targets]

    def build(cls: type[Any]) -> Any:
        return build_entity(
            cls,
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            topics=partition_topics(cls, partitions),
        )

    response = await connection.request(ApiKey.DELETE_RECORDS, build)
    return [
        DeletedRecords(
            topic=t.name,
            partition=int(p.partition_index),
            error=KafkaError(int(p.error_code)),
            low_watermark=int(p.low_watermark),
        )
        for t in response.topics
        for p in t.partitions
    ]
