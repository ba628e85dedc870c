"""ListOffsets, OffsetForLeaderEpoch and Metadata interceptors in a real proxy in front of
the IN-PROCESS SCRIPTED BROKER MODEL (see :mod:`tests.unit.proxy.remote.env`)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import ApiKey, build, nested_class, response_class
from proxy.interceptors.topic_ids import MetadataTopicIds
from storage.rsm.base import RemoteStorageError
from tests.fakes.kafka_requests import list_offsets_request, offset_for_leader_epoch_request
from tests.fakes.record_batches import BASE_TIMESTAMP, data_batch
from tests.fakes.tiered_log import TP
from tests.unit.proxy.conftest import through
from tests.unit.proxy.remote.env import LAST, TIERED_END, TOPIC, Env, EnvFactory, metadata_call


async def list_offset(env: Env, version: int, timestamp: int) -> Any:
    response = await env.client.call(
        ApiKey.LIST_OFFSETS, version, list_offsets_request(version, timestamp, topic=TOPIC)
    )
    return response.topics[0].partitions[0]


def forwarded_timestamp(env: Env) -> int:
    (_key, _version, request) = env.broker.requests[-1]
    return int(request.topics[0].partitions[0].timestamp)


@pytest.mark.parametrize("version", [1, 4, 7, 8, 9, 10, 11])
async def test_earliest_is_the_remote_log_start(make_env: EnvFactory, version: int) -> None:
    env = await make_env()
    part = await list_offset(env, version, -2)
    assert (part.error_code, part.offset) == (KafkaError.NONE, 0)
    if version >= 4:
        assert part.leader_epoch == 0


async def test_latest_comes_from_the_broker(make_env: EnvFactory) -> None:
    env = await make_env()
    assert (await list_offset(env, 9, -1)).offset == 40


@pytest.mark.parametrize(("version", "timestamp"), [(6, -3), (8, -4)])
async def test_earliest_local_is_the_brokers_own_log_start(
    make_env: EnvFactory, version: int, timestamp: int
) -> None:
    env = await make_env()
    part = await list_offset(env, version, timestamp)
    assert (part.error_code, part.offset) == (KafkaError.NONE, TIERED_END + 1)
    assert forwarded_timestamp(env) == -2  # the broker need not know the sentinel


async def test_minus_3_is_max_timestamp_from_v7_unless_configured(make_env: EnvFactory) -> None:
    env = await make_env()
    await list_offset(env, 7, -3)
    assert forwarded_timestamp(env) == -3
    kip = await make_env(list_offsets_kip405_minus_3=True)
    part = await list_offset(kip, 7, -3)
    assert part.offset == TIERED_END + 1
    assert forwarded_timestamp(kip) == -2


async def test_latest_tiered(make_env: EnvFactory) -> None:
    env = await make_env()
    part = await list_offset(env, 9, -5)
    assert (part.error_code, part.offset, part.leader_epoch) == (KafkaError.NONE, TIERED_END, 0)
    assert forwarded_timestamp(env) == -1
    env.broker.partitions[("plain", 0)] = env.model.__class__(batches=[data_batch(0, 1)])
    response = await env.client.call(
        ApiKey.LIST_OFFSETS, 9, list_offsets_request(9, -5, topic="plain")
    )
    assert response.topics[0].partitions[0].offset == -1


async def test_earliest_pending_upload_is_the_offset_after_the_tiered_range(
    make_env: EnvFactory,
) -> None:
    """-6 (v11, KIP-1023), as Kafka answers it: the highest tiered offset + 1 with its epoch,
    if the broker's high watermark is above it; -1 for a partition never tiered; before v11,
    not a sentinel."""
    env = await make_env()
    part = await list_offset(env, 11, -6)
    assert (part.error_code, part.offset, part.timestamp, part.leader_epoch) == (
        KafkaError.NONE,
        TIERED_END + 1,
        -1,
        0,
    )
    assert forwarded_timestamp(env) == -1  # the broker need not know the sentinel
    env.broker.partitions[("plain", 0)] = env.model.__class__(batches=[data_batch(0, 1)])
    response = await env.client.call(
        ApiKey.LIST_OFFSETS, 11, list_offsets_request(11, -6, topic="plain")
    )
    assert (response.topics[0].partitions[0].offset, forwarded_timestamp(env)) == (-1, -1)
    await list_offset(env, 10, -6)
    assert forwarded_timestamp(env) == -6


async def test_earliest_pending_upload_is_minus_one_once_everything_is_tiered(
    make_env: EnvFactory,
) -> None:
    """Kafka answers -6 only below the last fetchable offset (``ReplicaManager``)."""
    batches = [data_batch(o, 2, value_size=50) for o in range(0, LAST + 1, 2)]
    env = await make_env(segments=[batches[0:10], batches[10:]], local=[], local_start=LAST + 1)
    part = await list_offset(env, 11, -6)
    assert (part.error_code, part.offset, part.leader_epoch) == (KafkaError.NONE, -1, -1)


@pytest.mark.parametrize("version", [1, 4, 10, 11])
async def test_timestamps_are_found_in_the_remote_time_indexes_first(
    make_env: EnvFactory, version: int
) -> None:
    env = await make_env()
    # Record o has timestamp BASE + o (tiered and local alike).
    part = await list_offset(env, version, BASE_TIMESTAMP + 7)
    assert (part.offset, part.timestamp) == (7, BASE_TIMESTAMP + 7)
    part = await list_offset(env, version, BASE_TIMESTAMP + 35)
    assert (part.offset, part.timestamp) == (35, BASE_TIMESTAMP + 35)
    part = await list_offset(env, version, BASE_TIMESTAMP + 1000)
    assert part.offset == -1


async def test_a_failing_store_makes_timestamp_lookups_retriable(make_env: EnvFactory) -> None:
    env = await make_env()
    env.storage.error = RemoteStorageError("down", retriable=True)
    part = await list_offset(env, 4, BASE_TIMESTAMP + 7)
    assert part.error_code == KafkaError.KAFKA_STORAGE_ERROR


async def test_broker_errors_stand(make_env: EnvFactory) -> None:
    env = await make_env()
    env.model.error = KafkaError.NOT_LEADER_OR_FOLLOWER
    part = await list_offset(env, 4, -2)
    assert part.error_code == KafkaError.NOT_LEADER_OR_FOLLOWER


# -- OffsetForLeaderEpoch ------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
async def test_epochs_only_the_remote_tier_knows(make_env: EnvFactory, version: int) -> None:
    tiered = [data_batch(0, 5, epoch=0), data_batch(5, 5, epoch=1)]
    local = [data_batch(10, 5, epoch=2)]
    env = await make_env(segments=[tiered], local=local, local_start=10)
    env.model.lineage = (
        EpochEntry(epoch=0, start_offset=0),
        EpochEntry(epoch=1, start_offset=5),
        EpochEntry(epoch=2, start_offset=10),
    )
    answers = []
    for epoch in (0, 1, 2):
        response = await env.client.call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            offset_for_leader_epoch_request(version, epoch, topic=TOPIC),
        )
        part = response.topics[0].partitions[0]
        answers.append((part.leader_epoch, part.end_offset))
    # The broker alone would say (0, 10) and (1, 10): it forgot where epoch 1 began.
    assert answers == [(0, 5), (1, 10), (2, 15)]


# -- Metadata ------------------------------------------------------------------------------


async def test_metadata_responses_teach_the_current_topic_ids(make_env: EnvFactory) -> None:
    env = await make_env()
    interceptor = MetadataTopicIds(env.path.topic_ids)
    body_class = response_class(ApiKey.METADATA, 12)
    topic_class = nested_class(body_class, "topics")
    newer = uuid.uuid4()
    response = build(
        body_class,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=(
            build(
                topic_class,
                error_code=KafkaError.NONE,
                name=TOPIC,
                topic_id=newer,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=0,
            ),
        ),
    )
    call = metadata_call(12)
    assert await through(interceptor, call, response) is response
    assert env.path.partitions.partition(topic=TOPIC, topic_id=None, partition=0) is None
    assert env.path.partitions.partition(topic=None, topic_id=TP.topic_id, partition=0) == TP
