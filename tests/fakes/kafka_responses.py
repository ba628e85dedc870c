"""Builders of the response bodies the fake brokers answer with, as kio entities, and a
reader of Fetch answers.

A builder fills what a Kafka broker fills (throttle time 0, no error unless asked) and takes
what a test varies; :func:`response_payload` puts the response header of the right version
in front, as the bytes a broker writes after the frame's size.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kio.static.primitive import Records

from protocol.headers import RequestHeader, encode_response_header, response_header_version
from protocol.messages import (
    ApiKey,
    ErrorCode,
    build,
    encode_response,
    nested_class,
    response_class,
)

__all__ = [
    "api_versions_body",
    "fetch_response_payload",
    "list_offsets_response",
    "metadata_body",
    "metadata_topics",
    "partition_answers",
    "partitions_of",
    "plain_authenticate_body",
    "plain_handshake_body",
    "response_payload",
    "share_response_payload",
]

Endpoint = tuple[int, str, int]
"""A broker as Metadata names it: (node id, host, port)."""


def response_payload(header: RequestHeader, body: Any) -> bytes:
    """The response header (of the version ``header``'s request asks for) and ``body``."""
    version = response_header_version(header.api_key, header.api_version)
    assert version is not None
    return encode_response_header(header.correlation_id, version) + encode_response(body)


def api_versions_body(
    version: int, apis: Mapping[ApiKey, tuple[int, int]] | Mapping[int, tuple[int, int]]
) -> Any:
    """An ApiVersions answer advertising ``apis`` (API key to lowest and highest version)."""
    body_class = response_class(ApiKey.API_VERSIONS, version)
    entry_class = nested_class(body_class, "api_keys")
    return build(
        body_class,
        error_code=ErrorCode.none,
        api_keys=tuple(
            build(entry_class, api_key=key, min_version=low, max_version=high)
            for key, (low, high) in apis.items()
        ),
        throttle_time=datetime.timedelta(0),
    )


def metadata_topics(
    version: int,
    topics: Iterable[tuple[str, uuid.UUID | None, Iterable[tuple[int, int]]]],
    *,
    leader_epoch: int = 0,
) -> tuple[Any, ...]:
    """The ``topics`` of a Metadata answer: (name, id, [(partition, leader)]), each
    partition in ``leader_epoch`` with its leader as its only replica, in that order."""
    topic_class = nested_class(response_class(ApiKey.METADATA, version), "topics")
    partition_class = nested_class(topic_class, "partitions")
    return tuple(
        build(
            topic_class,
            error_code=ErrorCode.none,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=tuple(
                build(
                    partition_class,
                    error_code=ErrorCode.none,
                    partition_index=index,
                    leader_id=leader,
                    leader_epoch=leader_epoch,
                    replica_nodes=(leader,),
                    isr_nodes=(leader,),
                    offline_replicas=(),
                )
                for index, leader in partitions
            ),
        )
        for name, topic_id, partitions in topics
    )


def metadata_body(
    version: int,
    brokers: Sequence[Endpoint],
    topics: tuple[Any, ...] = (),
    *,
    cluster_id: str = "fake",
) -> Any:
    """A Metadata answer naming ``brokers`` (the first is the controller) and ``topics``
    (see :func:`metadata_topics`)."""
    body_class = response_class(ApiKey.METADATA, version)
    broker_class = nested_class(body_class, "brokers")
    return build(
        body_class,
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            build(broker_class, node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in brokers
        ),
        cluster_id=cluster_id,
        controller_id=brokers[0][0] if brokers else -1,
        topics=topics,
    )


def plain_handshake_body(version: int, mechanism: str) -> Any:
    """A SaslHandshake answer of a listener that offers PLAIN only."""
    return build(
        response_class(ApiKey.SASL_HANDSHAKE, version),
        error_code=ErrorCode.none if mechanism == "PLAIN" else ErrorCode.unsupported_sasl_mechanism,
        mechanisms=("PLAIN",),
    )


def plain_authenticate_body(
    version: int, *, refusal: str | None = None, session_lifetime_ms: int = 0
) -> Any:
    """A SaslAuthenticate answer to PLAIN: a login, or SASL_AUTHENTICATION_FAILED with the
    ``refusal`` message; ``session_lifetime_ms`` as KIP-368 sends it (0: no expiry)."""
    return build(
        response_class(ApiKey.SASL_AUTHENTICATE, version),
        error_code=ErrorCode.none if refusal is None else ErrorCode.sasl_authentication_failed,
        error_message=refusal,
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(milliseconds=session_lifetime_ms),
    )


def partition_answers(
    api_key: ApiKey,
    version: int,
    request: Any,
    answer: Callable[[str, Any], dict[str, Any]],
    *,
    topic_field: str = "name",
    partition_field: str = "partition_index",
) -> Any:
    """The answer to a request whose topics list partitions, as ListOffsets, DeleteRecords
    and OffsetForLeaderEpoch do: every partition asked for, in order, with the fields
    ``answer(topic, requested partition)`` gives. ``topic_field`` and ``partition_field``
    name the topic and the partition index in the request and the answer alike."""
    body_class = response_class(api_key, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    topics = []
    for topic in request.topics:
        name = getattr(topic, topic_field)
        parts = tuple(
            build(
                partition_class,
                **{partition_field: getattr(part, partition_field)},
                **answer(name, part),
            )
            for part in topic.partitions
        )
        topics.append(build(topic_class, **{topic_field: name}, partitions=parts))
    return build(body_class, throttle_time=datetime.timedelta(0), topics=tuple(topics))


def list_offsets_response(version: int = 1, offset: int = 5) -> Any:
    """A ListOffsets answer for partition 0 of topic ``t``: ``offset``, no timestamp."""
    body_class = response_class(ApiKey.LIST_OFFSETS, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    return build(
        body_class,
        throttle_time=datetime.timedelta(0),
        topics=(
            topic_class(
                name="t",
                partitions=(
                    build(
                        partition_class,
                        partition_index=0,
                        error_code=ErrorCode.none,
                        timestamp=-1,
                        offset=offset,
                    ),
                ),
            ),
        ),
    )


def fetch_response_payload(
    version: int,
    correlation_id: int,
    *,
    records: bytes,
    endpoints: Sequence[Endpoint] = (),
) -> bytes:
    """A Fetch v12+ response payload with one partition of ``records``; with ``endpoints``
    the partition failed with NOT_LEADER_OR_FOLLOWER and they are its KIP-951 node endpoints
    (v16+), as Kafka sends them."""
    body_class = response_class(ApiKey.FETCH, version)
    topic_class = nested_class(body_class, "responses")
    partition_class = nested_class(topic_class, "partitions")
    partition = build(
        partition_class,
        partition_index=0,
        error_code=ErrorCode.not_leader_or_follower if endpoints else ErrorCode.none,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=Records(records),
    )
    topic = build(topic_class, topic_id=uuid.UUID(int=7), topic="t", partitions=(partition,))
    endpoint_class = nested_class(body_class, "node_endpoints") if version >= 16 else None
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(topic,),
        node_endpoints=tuple(
            endpoint_class(node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in endpoints
        )
        if endpoint_class is not None
        else (),
    )
    return encode_response_header(correlation_id, 1) + encode_response(body)


def share_response_payload(
    api_key: ApiKey,
    version: int,
    correlation_id: int,
    *,
    records: bytes = b"",
    endpoints: Sequence[Endpoint] = (),
) -> bytes:
    """A ShareFetch (with ``records``, acquired) or ShareAcknowledge response payload with one
    partition; with ``endpoints`` the partition failed with NOT_LEADER_OR_FOLLOWER and they
    are its node endpoints, as Kafka sends them."""
    body_class = response_class(api_key, version)
    topic_class = nested_class(body_class, "responses")
    partition_class = nested_class(topic_class, "partitions")
    leader = nested_class(partition_class, "current_leader")(leader_id=2, leader_epoch=3)
    acquired = (
        (
            nested_class(partition_class, "acquired_records")(
                first_offset=0, last_offset=9, delivery_count=1
            ),
        )
        if records
        else ()
    )
    partition = build(
        partition_class,
        partition_index=0,
        error_code=ErrorCode.not_leader_or_follower if endpoints else ErrorCode.none,
        error_message=None,
        acknowledge_error_code=0,
        acknowledge_error_message=None,
        current_leader=leader,
        records=Records(records),
        acquired_records=acquired,
    )
    topic = build(topic_class, topic_id=uuid.UUID(int=7), partitions=(partition,))
    endpoint_class = nested_class(body_class, "node_endpoints")
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=(topic,),
        node_endpoints=tuple(
            endpoint_class(node_id=node_id, host=host, port=port, rack=None)
            for node_id, host, port in endpoints
        ),
    )
    return encode_response_header(correlation_id, 1) + encode_response(body)


def partitions_of(response: Any) -> dict[tuple[Any, int], Any]:
    """A Fetch response's partitions by (topic name, or id from v13, partition)."""
    out = {}
    for topic in response.responses:
        key = getattr(topic, "topic_id", None) or getattr(topic, "topic", None)
        for part in topic.partitions:
            out[(key, part.partition_index)] = part
    return out
