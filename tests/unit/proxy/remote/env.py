"""The read-path interceptor tests' environment: a real remote tier behind a real proxy in
front of the in-process scripted broker model, and helpers to fetch through it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from protocol.errors import KafkaError
from protocol.headers import RequestHeader
from protocol.messages import ApiKey
from protocol.records import parse_batch_header
from proxy.app import ReadPath, build_read_path, read_path_interceptors, running
from proxy.interceptors.base import Call, ConnectionInfo
from proxy.remote.config import RemoteFetchConfig
from proxy.remote.metrics import RemoteMetrics
from proxy.server import ProxyServer
from storage.kafka_client import ListedOffset
from storage.rsm.local import LocalRemoteStorage
from storage.tiering.config import TieringConfig
from tests.fakes.faulty_storage import MappedFaultyStorage
from tests.fakes.kafka_requests import fetch_request
from tests.fakes.kafka_responses import partitions_of
from tests.fakes.kio_client import KioClient
from tests.fakes.model_broker import ModelBroker, ModelPartition
from tests.fakes.record_batches import batches_of, data_batch
from tests.fakes.tiered_log import TP, TieredLog
from tests.fakes.wire_broker import WireBroker

PIPELINE_CLIENT_ID = TieringConfig().client_id
"""The tiering pipeline's client id, as ``tierproxy serve`` takes it from the settings."""

TOPIC = TP.topic
TIERED_END = 29
"""The default remote tier holds offsets 0-29 (three segments); the broker 30-39."""
LAST = 39


class ModelLister:
    """The proxy's own ListOffsets, answered in-process as the scripted broker answers them
    (the wire is the product's Kafka client's, tested against Apache Kafka)."""

    def __init__(self, broker: ModelBroker) -> None:
        self.broker = broker

    async def list_offsets(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        isolation_level: int = 0,
    ) -> list[ListedOffset]:
        answers = []
        for topic, partition, timestamp in targets:
            model = self.broker.partitions[(topic, partition)]
            offset = model.high_watermark if timestamp == -1 else model.local_start
            answers.append(
                ListedOffset(
                    topic=topic,
                    partition=partition,
                    error=model.error,
                    offset=offset,
                    timestamp=-1,
                    leader_epoch=0,
                )
            )
        return answers


@dataclass
class Env:
    log: TieredLog
    broker: ModelBroker
    model: ModelPartition
    path: ReadPath
    metrics: RemoteMetrics
    running: contextlib.AsyncExitStack
    """Closes the read path's services."""
    proxy: ProxyServer
    client: KioClient
    storage: MappedFaultyStorage
    all_batches: list[bytes]


EnvFactory = Callable[..., Any]


async def fetch(env: Env, version: int, offset: int, **options: Any) -> Any:
    topic: str | uuid.UUID = TP.topic_id if version >= 13 else TOPIC
    max_partition = options.pop("partition_max_bytes", 1 << 20)
    response = await env.client.call(
        ApiKey.FETCH,
        version,
        fetch_request(version, [(topic, 0, offset, max_partition)], **options),
    )
    return response


def metadata_call(version: int) -> Call:
    """A Metadata request of ``version`` on connection 1, as interceptors see it."""
    return Call(
        connection=ConnectionInfo(connection_id=1, client="c", node_id=1),
        header=RequestHeader(
            api_key=ApiKey.METADATA,
            api_version=version,
            correlation_id=1,
            client_id="c",
            header_version=2,
            size=0,
        ),
        request=None,
    )


def only(response: Any) -> Any:
    (part,) = partitions_of(response).values()
    return part


async def consume(env: Env, version: int, **options: Any) -> list[bytes]:
    """Fetch from offset 0 to the high watermark, sessionless; the batches received."""
    offset, got = 0, []
    for _ in range(100):
        part = only(await fetch(env, version, offset, **options))
        assert part.error_code == KafkaError.NONE, part
        batches = batches_of(part.records)
        assert batches, f"no progress at {offset}"
        got += batches
        offset = parse_batch_header(batches[-1]).next_offset
        if offset > LAST:
            return got
    raise AssertionError("did not reach the end")


async def start_env(
    tmp_path: Path,
    fake_broker: WireBroker,
    make_proxy: Any,
    *,
    index: int,
    segments: list[list[bytes]] | None = None,
    local: list[bytes] | None = None,
    local_start: int = TIERED_END + 1,
    untiered: dict[int, list[bytes]] | None = None,
    proxy_asks_offsets: bool = False,
    proxy_settings: dict[str, Any] | None = None,
    **settings: Any,
) -> Env:
    """Tier ``segments``, model the broker with ``local`` from ``local_start``, start a proxy.

    ``untiered`` adds partitions 1, 2, ... of the topic that only the broker holds. With
    ``proxy_asks_offsets`` the broker's Metadata names the topic and the proxy asks the
    broker ListOffsets itself (:class:`ModelLister`) when a Metadata answer passes.
    ``proxy_settings`` are the proxy's own (``ProxyConfig``), ``settings`` the read path's.
    Every Fetch goes to the broker unless ``broker_check_reuse_ms`` says otherwise: these
    tests look at what the broker is asked.
    """
    settings.setdefault("broker_check_reuse_ms", 0)
    if segments is None:
        batches = [data_batch(o, 2, value_size=50) for o in range(0, TIERED_END + 1, 2)]
        segments = [batches[0:5], batches[5:10], batches[10:15]]
    if local is None:
        local = [data_batch(o, 2, value_size=50) for o in range(TIERED_END + 1, LAST + 1, 2)]
    wrappers: list[MappedFaultyStorage] = []

    def wrap(inner: LocalRemoteStorage) -> MappedFaultyStorage:
        wrappers.append(MappedFaultyStorage(inner))
        return wrappers[0]

    log = TieredLog.create(tmp_path / f"remote{index}", chunk_bytes=512, wrap=wrap)
    storage = wrappers[0]
    for batches in segments:
        await log.copy(batches)
    all_batches = [b for batches in segments for b in batches] + local
    model = ModelPartition(batches=all_batches, local_start=local_start)
    partitions = {(TOPIC, 0): model}
    for number, batches in (untiered or {}).items():
        partitions[(TOPIC, number)] = ModelPartition(batches=batches)
    broker = ModelBroker(partitions=partitions, topic_ids={TOPIC: TP.topic_id})
    fake_broker.script = broker.script
    if proxy_asks_offsets:
        fake_broker.topics = {TOPIC: (TP.topic_id, len(partitions))}
    config = RemoteFetchConfig(**settings)
    metrics = RemoteMetrics(CollectorRegistry())
    path = build_read_path(
        config,
        metadata=log.metadata,
        indexes=log.indexes,
        chunks=log.chunks,
        offset_lister=ModelLister(broker) if proxy_asks_offsets else None,
        counters=metrics,
    )
    metrics.watch(path.gauges())
    stack = contextlib.AsyncExitStack()
    await stack.enter_async_context(running(path))
    interceptors = read_path_interceptors(
        path, config=config, publish=log.publish, pipeline_client_id=PIPELINE_CLIENT_ID
    )
    proxy = await make_proxy(fake_broker, interceptors=interceptors, **(proxy_settings or {}))
    client = await KioClient.connect(proxy)
    env = Env(
        log=log,
        broker=broker,
        model=model,
        path=path,
        metrics=metrics,
        running=stack,
        proxy=proxy,
        client=client,
        storage=storage,
        all_batches=all_batches,
    )
    return env
