"""The typed views of ListOffsets, OffsetForLeaderEpoch, DeleteRecords and Metadata bodies,
over every version the proxy decodes."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    Body,
    ErrorCode,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    nested_class,
    request_class,
    response_class,
)
from protocol.metadata_bodies import read_metadata_topics
from protocol.offset_bodies import (
    DeleteRecordsEditor,
    EpochsEditor,
    ListOffsetsEditor,
    read_delete_records_request,
    read_epochs_request,
    read_list_offsets_request,
    rewrite_list_offsets_request,
)


def entity(api: ApiKey, version: int, *, request: bool, topics: list[dict[str, Any]]) -> Body:
    """A body of ``api`` with ``topics`` (their ``partitions`` given as field dicts)."""
    body_class = (request_class if request else response_class)(api, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    built = build(
        body_class,
        replica_id=-1,
        isolation_level=0,
        throttle_time=datetime.timedelta(0),
        timeout=datetime.timedelta(seconds=1),
        topics=tuple(
            build(
                topic_class,
                **{k: v for k, v in t.items() if k != "partitions"},
                partitions=tuple(build(partition_class, **coded(p)) for p in t["partitions"]),
            )
            for t in topics
        ),
    )
    return Body(built)


def coded(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with ``error_code`` as kio's enum."""
    if "error_code" in fields:
        return {**fields, "error_code": ErrorCode(fields["error_code"])}
    return fields


def again(api: ApiKey, version: int, body: Body, *, request: bool) -> Any:
    """``body`` encoded and decoded: what the proxy sends is a valid body of its version."""
    if request:
        return decode_request(api, version, encode_request(body))
    return decode_response(api, version, encode_response(body))


@pytest.mark.parametrize("version", INTERCEPTED_VERSIONS[ApiKey.LIST_OFFSETS])
def test_list_offsets_views(version: int) -> None:
    parts = [{"partition_index": p, "timestamp": -2, "current_leader_epoch": -1} for p in (0, 1)]
    request = entity(
        ApiKey.LIST_OFFSETS, version, request=True, topics=[{"name": "t", "partitions": parts}]
    )
    replica, asked = read_list_offsets_request(request)
    assert replica == -1
    assert [(a.name, a.timestamp) for a in asked] == [(("t", 0), -2), (("t", 1), -2)]
    rewritten = again(
        ApiKey.LIST_OFFSETS,
        version,
        rewrite_list_offsets_request(request, {("t", 1): -1}),
        request=True,
    )
    assert [p.timestamp for p in rewritten.topics[0].partitions] == [-2, -1]
    answers = [
        {"partition_index": p, "error_code": 0, "timestamp": -1, "offset": 5, "leader_epoch": 3}
        for p in (0, 1)
    ]
    response = entity(
        ApiKey.LIST_OFFSETS, version, request=False, topics=[{"name": "t", "partitions": answers}]
    )
    editor = ListOffsetsEditor(response, version)
    assert editor.body() is response
    first, second = editor.partitions()
    assert (first.offset, first.leader_epoch) == (5, 3 if version >= 4 else -1)
    editor.put(second.__class__(name=("t", 1), error=0, timestamp=7, offset=9, leader_epoch=4))
    edited = again(ApiKey.LIST_OFFSETS, version, editor.body(), request=False)
    assert [(p.offset, p.timestamp) for p in edited.topics[0].partitions] == [(5, -1), (9, 7)]


@pytest.mark.parametrize("version", INTERCEPTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH])
def test_epoch_views(version: int) -> None:
    parts = [{"partition": 2, "current_leader_epoch": -1, "leader_epoch": 4}]
    request = entity(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        version,
        request=True,
        topics=[{"topic": "t", "partitions": parts}],
    )
    assert read_epochs_request(request)[1][0].leader_epoch == 4
    answer = [{"partition": 2, "error_code": 0, "leader_epoch": 4, "end_offset": 10}]
    response = entity(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        version,
        request=False,
        topics=[{"topic": "t", "partitions": answer}],
    )
    editor = EpochsEditor(response)
    (part,) = editor.partitions()
    editor.put(part.__class__(name=part.name, error=0, leader_epoch=3, end_offset=7))
    edited = again(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, editor.body(), request=False)
    assert (
        edited.topics[0].partitions[0].leader_epoch,
        edited.topics[0].partitions[0].end_offset,
    ) == (3, 7)


@pytest.mark.parametrize("version", INTERCEPTED_VERSIONS[ApiKey.DELETE_RECORDS])
def test_delete_records_views(version: int) -> None:
    request = entity(
        ApiKey.DELETE_RECORDS,
        version,
        request=True,
        topics=[{"name": "t", "partitions": [{"partition_index": 0, "offset": -1}]}],
    )
    (asked,) = read_delete_records_request(request)
    assert (asked.name, asked.offset) == (("t", 0), -1)
    response = entity(
        ApiKey.DELETE_RECORDS,
        version,
        request=False,
        topics=[
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "error_code": 0, "low_watermark": 3}],
            }
        ],
    )
    editor = DeleteRecordsEditor(response)
    (part,) = editor.partitions()
    editor.put(part.__class__(name=part.name, error=0, low_watermark=8))
    edited = again(ApiKey.DELETE_RECORDS, version, editor.body(), request=False)
    assert edited.topics[0].partitions[0].low_watermark == 8


@pytest.mark.parametrize("version", INTERCEPTED_VERSIONS[ApiKey.METADATA])
def test_metadata_topics(version: int) -> None:
    topic_id = uuid.uuid4()
    body_class = response_class(ApiKey.METADATA, version)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    partition = build(
        partition_class,
        error_code=ErrorCode(0),
        partition_index=1,
        leader_id=2,
        leader_epoch=0,
        replica_nodes=(2,),
        isr_nodes=(2,),
        offline_replicas=(),
    )
    topic = build(
        topic_class,
        error_code=ErrorCode(0),
        name="t",
        topic_id=topic_id,
        is_internal=False,
        partitions=(partition,),
        topic_authorized_operations=0,
    )
    body = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=(topic,),
        cluster_authorized_operations=0,
        error_code=ErrorCode(0),
    )
    (read,) = read_metadata_topics(Body(body), version)
    assert (read.name, read.error) == ("t", 0)
    assert read.topic_id == (topic_id if version >= 10 else None)
    assert [(p.index, p.leader) for p in read.partitions] == [(1, 2)]
