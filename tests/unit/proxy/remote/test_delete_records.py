"""An operator's DeleteRecords through the proxy deletes from the whole log, remote tier
included (the IN-PROCESS SCRIPTED BROKER MODEL, see :mod:`tests.unit.proxy.remote.env`:
the remote tier holds 0-29, the broker 30-39)."""

from __future__ import annotations

import datetime
from typing import Any

from protocol.errors import KafkaError
from protocol.messages import ApiKey, build, nested_class, request_class
from protocol.records import parse_batch_header
from tests.fakes.kio_client import KioClient
from tests.fakes.record_batches import batches_of
from tests.fakes.tiered_log import TP
from tests.unit.proxy.remote.env import LAST, TIERED_END, TOPIC, EnvFactory, fetch, only
from tests.unit.proxy.remote.test_offsets_interceptors import list_offset


async def delete_records(client: KioClient, offset: int, client_id: str = "ops") -> Any:
    body_class = request_class(ApiKey.DELETE_RECORDS, 2)
    topic_class = nested_class(body_class, "topics")
    partition_class = nested_class(topic_class, "partitions")
    request = build(
        body_class,
        topics=(
            topic_class(
                name=TOPIC, partitions=(partition_class(partition_index=0, offset=offset),)
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
    )
    response = await client.call(ApiKey.DELETE_RECORDS, 2, request, client_id=client_id)
    return response.topics[0].partitions[0]


async def test_deleting_into_the_remote_tier_stops_serving_below_it(
    make_env: EnvFactory,
) -> None:
    env = await make_env()
    answer = await delete_records(env.client, 12)
    assert (answer.error_code, answer.low_watermark) == (KafkaError.NONE, 12)
    assert env.log.metadata.log_start_offset(TP) == 12  # recorded for every proxy
    assert (await list_offset(env, 8, -2)).offset == 12
    below = only(await fetch(env, 12, 5))
    assert below.error_code == KafkaError.OFFSET_OUT_OF_RANGE
    at = only(await fetch(env, 12, 12))
    assert at.error_code == KafkaError.NONE
    assert parse_batch_header(batches_of(at.records)[0]).base_offset == 12
    assert at.log_start_offset == 12


async def test_deleting_past_the_remote_tier_moves_the_broker_too(make_env: EnvFactory) -> None:
    env = await make_env()
    answer = await delete_records(env.client, TIERED_END + 3)
    assert answer.low_watermark == TIERED_END + 3
    assert env.model.local_start == TIERED_END + 3
    assert (await list_offset(env, 8, -2)).offset == TIERED_END + 3
    assert only(await fetch(env, 12, 0)).error_code == KafkaError.OFFSET_OUT_OF_RANGE


async def test_deleting_below_the_start_changes_nothing(make_env: EnvFactory) -> None:
    env = await make_env()
    await delete_records(env.client, 4)
    answer = await delete_records(env.client, 2)
    assert answer.low_watermark == 4
    assert env.log.metadata.log_start_offset(TP) == 4


async def test_the_pipelines_own_deletions_leave_the_remote_tier_alone(
    make_env: EnvFactory,
) -> None:
    env = await make_env(local_start=0)
    answer = await delete_records(env.client, TIERED_END + 1, client_id="tierproxy-tiering")
    assert answer.low_watermark == TIERED_END + 1
    assert env.log.metadata.log_start_offset(TP) == 0
    assert only(await fetch(env, 12, 0)).records


async def test_a_refused_deletion_records_nothing(make_env: EnvFactory) -> None:
    env = await make_env()
    answer = await delete_records(env.client, LAST + 10)
    assert answer.error_code == KafkaError.OFFSET_OUT_OF_RANGE
    assert env.log.metadata.log_start_offset(TP) == 0
