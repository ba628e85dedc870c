"""Handlers for :class:`~tests.fakes.kio_broker.KioBroker` shared by the client's tests.

:func:`metadata_handler` answers Metadata as a one-broker cluster whose topic ``t`` (id
:data:`TOPIC_ID`) has partitions 1 and 0, in that order, led by node 1 in leader epoch 7.
:func:`fetch_handler` answers every partition of a Fetch with ``records`` cut at the
partition's byte limit, the fetch offset as log start, a high watermark 10 and a last stable
offset 5 past it, and one aborted transaction (producer 9) from it: values a test can tell
apart from each other.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from protocol.messages import ApiKey, ErrorCode, build, nested_class, response_class
from tests.fakes.kio_broker import Handler, metadata_answer

__all__ = ["TOPIC_ID", "fetch_handler", "metadata_handler"]

TOPIC_ID = uuid.UUID("01a1fe04-05ee-7793-8bf4-91641a48cb44")


def metadata_handler(port: int) -> Handler:
    """Metadata of the one broker on ``port`` and its topic ``t`` (see the module)."""

    def handle(request: Any, version: int) -> Any:
        return metadata_answer(
            version,
            brokers={1: port},
            topic="t",
            leaders={1: 1, 0: 1},
            topic_id=TOPIC_ID,
            leader_epoch=7,
        )

    return handle


def fetch_handler(records: bytes, *, error: ErrorCode = ErrorCode.none) -> Handler:
    """``records`` for every partition asked for, each with ``error`` (see the module)."""

    def handle(request: Any, version: int) -> Any:
        cls = response_class(ApiKey.FETCH, version)
        topic_cls = nested_class(cls, "responses")
        partition_cls = nested_class(topic_cls, "partitions")
        aborted_cls = nested_class(partition_cls, "aborted_transactions")
        return build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(
                build(
                    topic_cls,
                    topic=t.topic,
                    partitions=tuple(
                        build(
                            partition_cls,
                            partition_index=p.partition,
                            error_code=error,
                            high_watermark=10 + p.fetch_offset,
                            last_stable_offset=5 + p.fetch_offset,
                            log_start_offset=p.fetch_offset,
                            aborted_transactions=(
                                build(aborted_cls, producer_id=9, first_offset=p.fetch_offset),
                            ),
                            preferred_read_replica=-1,
                            records=records[: p.partition_max_bytes],
                        )
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )

    return handle
