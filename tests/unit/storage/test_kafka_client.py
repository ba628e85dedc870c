"""storage.kafka_client against a scripted in-process broker that speaks the real protocol.

The fake broker decodes each request with :mod:`protocol` and answers with kio responses, so
framing, header versions, version negotiation, pipelining and error handling are exercised
byte for byte; the real brokers are covered by the pipeline's integration tests.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocol.errors import KafkaError
from protocol.messages import (
    ApiKey,
    ErrorCode,
    build,
    nested_class,
    response_class,
)
from protocol.records import Record, build_record_batch
from storage.kafka_client import (
    NO_TOPIC_ID,
    BrokerConnectionError,
    DeleteRecordsUnsupportedError,
    FetchTarget,
    KafkaClient,
    KafkaClientError,
    broker_kind_from_api_versions,
    parse_bootstrap,
)
from tests.fakes.kafka_responses import partition_answers
from tests.fakes.kio_broker import (
    KAFKA_APIS,
    TANSU_APIS,
    KioBroker,
    metadata_answer,
    running,
)
from tests.fakes.kio_handlers import TOPIC_ID, fetch_handler, metadata_handler


@pytest.fixture
async def broker() -> AsyncIterator[KioBroker]:
    async with running(KioBroker(apis=dict(KAFKA_APIS))) as fake:
        yield fake


async def test_versions_are_negotiated_and_the_broker_kind_detected(broker: KioBroker) -> None:
    broker.handlers[ApiKey.METADATA] = metadata_handler(broker.port)
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        assert await client.detect_broker_kind() == "kafka"
        metadata = await client.metadata(["t"])
    topic = metadata.topics["t"]
    assert topic.topic_id == TOPIC_ID
    assert [p.partition for p in topic.partitions] == [0, 1]
    assert topic.partitions[0].leader_epoch == 7
    assert metadata.brokers[1].port == broker.port
    # ApiVersions v3, then Metadata at the newest version both know (12).
    assert broker.received == [(ApiKey.API_VERSIONS, 3), (ApiKey.METADATA, 12)]


def test_broker_kinds_from_api_lists() -> None:
    kafka = {int(k): range(lo, hi + 1) for k, (lo, hi) in KAFKA_APIS.items()}
    tansu = {int(k): range(lo, hi + 1) for k, (lo, hi) in TANSU_APIS.items()}
    assert broker_kind_from_api_versions(kafka, 5) == "kafka"
    assert broker_kind_from_api_versions(tansu, -1) == "tansu"
    assert broker_kind_from_api_versions({0: range(0, 9)}, -1) == "other"


async def test_a_large_fetch_answer_is_decoded_from_its_own_buffer(broker: KioBroker) -> None:
    """Above 64 KiB a response is read into a bytearray of its own, not joined."""
    batch = build_record_batch(
        base_offset=0, records=[Record(value=bytes(1000), timestamp=1)] * 300
    )
    broker.handlers[ApiKey.FETCH] = fetch_handler(batch * 3)
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        (answer,) = await client.fetch(
            None, [FetchTarget(topic="t", partition=3, offset=100, max_bytes=len(batch) * 3)]
        )
    assert len(batch) > 64 * 1024
    assert answer.records == batch * 3


async def test_an_answer_that_cannot_be_decoded_fails_its_request(broker: KioBroker) -> None:
    """Responses are decoded as their frames arrive; a failure goes to the awaiting request
    at once, not after its timeout, and the connection stays usable."""
    good = fetch_handler(b"")
    broker.handlers[ApiKey.FETCH] = lambda request, version: metadata_answer(
        version, brokers={1: broker.port}, topic="t", leaders={0: 1}
    )
    target = FetchTarget(topic="t", partition=0, offset=0, max_bytes=100)
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        with pytest.raises(KafkaClientError, match="cannot decode FETCH"):
            await client.fetch(None, [target])
        broker.handlers[ApiKey.FETCH] = good
        (answer,) = await client.fetch(None, [target])
    assert answer.error == KafkaError.NONE


async def test_fetch_returns_raw_batches_and_offsets(broker: KioBroker) -> None:
    batch = build_record_batch(base_offset=0, records=[Record(value=b"v", timestamp=1)])
    broker.handlers[ApiKey.FETCH] = fetch_handler(batch * 2)
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        (answer,) = await client.fetch(
            None, [FetchTarget(topic="t", partition=3, offset=100, max_bytes=len(batch) + 5)]
        )
    assert answer.records == (batch * 2)[: len(batch) + 5]
    assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (
        110,
        105,
        100,
    )
    assert answer.aborted_transactions == ((9, 100),)
    assert answer.error == KafkaError.NONE
    assert broker.received[-1] == (ApiKey.FETCH, 12)


async def test_pipelined_requests_are_matched_in_order(broker: KioBroker) -> None:
    broker.handlers[ApiKey.FETCH] = fetch_handler(b"")
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        answers = await asyncio.gather(
            *(
                client.fetch(None, [FetchTarget(topic="t", partition=0, offset=o, max_bytes=1)])
                for o in range(20)
            )
        )
    assert [a[0].log_start_offset for a in answers] == list(range(20))


async def test_a_closed_connection_fails_in_flight_requests_and_reconnects(
    broker: KioBroker,
) -> None:
    broker.handlers[ApiKey.FETCH] = fetch_handler(b"")
    broker.close_on = ApiKey.FETCH
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        target = [FetchTarget(topic="t", partition=0, offset=1, max_bytes=1)]
        with pytest.raises(BrokerConnectionError, match="closed"):
            await client.fetch(None, target)
        broker.close_on = None
        (answer,) = await client.fetch(None, target)
        assert answer.log_start_offset == 1
    assert broker.received.count((ApiKey.API_VERSIONS, 3)) == 2


async def test_a_slow_answer_times_out(broker: KioBroker) -> None:
    broker.handlers[ApiKey.FETCH] = fetch_handler(b"")
    broker.delay[ApiKey.FETCH] = 1.0
    async with KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=100) as client:
        with pytest.raises(BrokerConnectionError, match="timed out"):
            await client.fetch(None, [FetchTarget(topic="t", partition=0, offset=0, max_bytes=1)])


async def test_delete_records_is_never_sent_to_tansu(broker: KioBroker) -> None:
    broker.apis = dict(TANSU_APIS)
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        with pytest.raises(DeleteRecordsUnsupportedError, match="tansu"):
            await client.delete_records(None, [("t", 0, 5)])
    assert all(key != ApiKey.DELETE_RECORDS for key, _ in broker.received)


async def test_delete_records_and_list_offsets_on_kafka(broker: KioBroker) -> None:
    def delete(request: Any, version: int) -> Any:
        return partition_answers(
            ApiKey.DELETE_RECORDS,
            version,
            request,
            lambda _topic, p: {"low_watermark": p.offset, "error_code": ErrorCode.none},
        )

    def list_offsets(request: Any, version: int) -> Any:
        return partition_answers(
            ApiKey.LIST_OFFSETS,
            version,
            request,
            lambda _topic, p: {
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -p.timestamp * 10,
                "leader_epoch": 3,
            },
        )

    broker.handlers[ApiKey.DELETE_RECORDS] = delete
    broker.handlers[ApiKey.LIST_OFFSETS] = list_offsets
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        deleted = await client.delete_records(None, [("t", 0, 5), ("t", 1, 7)])
        listed = await client.list_offsets(None, [("t", 0, -2), ("u", 0, -1)])
    assert [(d.partition, d.low_watermark) for d in deleted] == [(0, 5), (1, 7)]
    assert [(o.topic, o.offset, o.leader_epoch) for o in listed] == [("t", 20, 3), ("u", 10, 3)]
    assert (ApiKey.LIST_OFFSETS, 8) in broker.received


async def test_describe_configs_reports_values_sources_and_errors(broker: KioBroker) -> None:
    def describe(request: Any, version: int) -> Any:
        cls = response_class(ApiKey.DESCRIBE_CONFIGS, version)
        result_cls = nested_class(cls, "results")
        config_cls = nested_class(result_cls, "configs")
        results = []
        for resource in request.resources:
            known = resource.resource_name == "t"
            results.append(
                build(
                    result_cls,
                    error_code=ErrorCode.none if known else ErrorCode.unknown_topic_or_partition,
                    error_message=None,
                    resource_type=2,
                    resource_name=resource.resource_name,
                    configs=(
                        build(
                            config_cls,
                            name="retention.ms",
                            value="1000",
                            read_only=False,
                            config_source=1,
                            is_sensitive=False,
                            synonyms=(),
                            documentation=None,
                        ),
                    )
                    if known
                    else (),
                )
            )
        return build(cls, throttle_time=datetime.timedelta(0), results=tuple(results))

    broker.handlers[ApiKey.DESCRIBE_CONFIGS] = describe
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        configs = await client.describe_configs(["t", "gone"])
        assert await client.describe_configs([]) == {}
    found = configs["t"]
    assert isinstance(found, dict)
    assert found["retention.ms"].value == "1000" and found["retention.ms"].is_topic_override
    assert configs["gone"] == KafkaError.UNKNOWN_TOPIC_OR_PARTITION


async def test_no_common_version_is_an_error(broker: KioBroker) -> None:
    broker.apis = {ApiKey.API_VERSIONS: (0, 4), ApiKey.FETCH: (13, 17)}  # names gone in v13
    async with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        with pytest.raises(KafkaClientError, match="no version of FETCH"):
            await client.fetch(None, [FetchTarget(topic="t", partition=0, offset=0, max_bytes=1)])


async def test_unreachable_bootstrap_names_every_server() -> None:
    async with KafkaClient("127.0.0.1:1,127.0.0.1:2", request_timeout_ms=500) as client:
        with pytest.raises(BrokerConnectionError, match=r"127\.0\.0\.1:1.*127\.0\.0\.1:2"):
            await client.metadata(())


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, [::1]:2,") == [("a", 1), ("::1", 2)]
    assert parse_bootstrap(["h:9092"]) == [("h", 9092)]
    with pytest.raises(ValueError, match="host:port"):
        parse_bootstrap("nohost")
    with pytest.raises(ValueError, match="no bootstrap"):
        parse_bootstrap(" , ")
    assert NO_TOPIC_ID.int == 0
