"""The proxy's probes cost Apache Kafka no reads (issue 11, item 5).

A partition the remote tier serves still goes to the broker, as a *probe*: the broker checks
the client's rights and leader epoch for it and reports its offsets. Asked at its high
watermark (its last stable offset for READ_COMMITTED) with a one-byte limit, the broker has
nothing to read there; asked one below, it would read and ship its last batch for every
remote-served partition on every Fetch, since the first partition of a response gets at
least one batch whatever its limit.

A recording relay sits between the proxy and a Kafka broker of this module's own, which
names the relay as its address in Metadata, so every request the proxy sends upstream and
every answer passes through it. A transaction is left open after the tiered range, so the
last stable offset is below the high watermark and the two levels probe at different places.

Kafka's Java consumer fetches in an incremental fetch session (KIP-227): the proxy answers
its in-step Fetches over the remote tier alone, and the Fetches it forwards carry epochs
moved back by their number, so that the broker's own ``FetchSession`` sees them in sequence
(it answers INVALID_FETCH_SESSION_EPOCH to anything else).

That holds from a partition's very first probe when the client asked Metadata through the
same proxy first, as real clients do: the proxy then asks the leaders for the offsets of the
tiered partitions named in the answer (:mod:`proxy.remote.broker_offsets`). A Fetch that
comes without that (a client whose Metadata went through another proxy process) still gets
correct answers: its first probe is a *reach probe* just after the remote tier, where the
broker ships one batch that the proxy drops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from protocol.fetch_bodies import (
    FetchPosition,
    FetchResponseEditor,
    PartitionKey,
    read_fetch_request,
)
from protocol.frames import FrameDecoder
from protocol.headers import parse_request_header, parse_response_header, response_header_version
from protocol.messages import ApiKey, decode_request, decode_response
from protocol.record_reader import records_from
from proxy.embedded import (
    KAFKA_4,
    KafkaBroker,
    S3Info,
    create_bucket,
    delete_bucket,
    ensure_jars,
)
from proxy.embedded.kafka_tools import run_tool
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.tierproxy import TierproxyServer, proxy_process
from proxy.remote.fetch_plan import PROBE_BYTES
from tests.integration.tiered.conftest import build_tiered_topic, proxy_settings
from tests.integration.tiered.support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    LatencyRelay,
    Record,
    TieredTopic,
    by_partition,
    consume_confluent,
    fetch_once,
    running,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_RELAYED = "RELAYED"
RECORD_DIGEST = Path(__file__).parents[2] / "java" / "RecordDigest.java"
_RECORD = re.compile(r"^(\d+) (\d+) ([0-9a-f]{64})$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFetch:
    """One Fetch the proxy sent in a fetch session, and the broker's whole-response answer."""

    connection: int
    session_id: int
    epoch: int
    error: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One probed partition of a Fetch the proxy sent, and the broker's answer to it."""

    partition: int
    read_committed: bool
    fetch_offset: int
    high_watermark: int
    last_stable_offset: int
    record_bytes: int


class Recording:
    """Every chunk through the relay, decoded into probes once the reads are done."""

    def __init__(self) -> None:
        self._chunks: list[tuple[int, bool, bytes]] = []
        self._lock = threading.Lock()

    def tap(self, connection: int, back: bool, data: bytes) -> None:
        with self._lock:
            self._chunks.append((connection, back, data))

    def probes(self) -> list[Probe]:
        return [probe for exchanges in self._fetches() for probe in _probes(exchanges)]

    def session_fetches(self) -> list[SessionFetch]:
        return [
            SessionFetch(
                connection=connection,
                session_id=fetch.request.session_id or fetch.response.session_id,
                epoch=fetch.request.session_epoch,
                error=int(fetch.response.error_code),
            )
            for connection, exchanges in enumerate(self._fetches())
            for fetch in exchanges
            if fetch.version >= 7 and not _sessionless(fetch.request)
        ]

    def _fetches(self) -> list[list[_Fetch]]:
        """Each connection's Fetches and their answers, decoded, in order."""
        with self._lock:
            chunks = list(self._chunks)
        found: list[list[_Fetch]] = []
        for connection in sorted({c for c, _, _ in chunks}):
            requests = _frames(data for c, back, data in chunks if c == connection and not back)
            answers = _frames(data for c, back, data in chunks if c == connection and back)
            exchanges = zip(requests, answers, strict=False)
            found.append([f for r, a in exchanges if (f := _decoded_fetch(r, a)) is not None])
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fetch:
    version: int
    request: Any
    response: Any


def _sessionless(request: Any) -> bool:
    return bool(request.session_id == 0 and request.session_epoch < 0)


def _decoded_fetch(request: bytes, answer: bytes) -> _Fetch | None:
    """A Fetch and its answer, decoded; ``None`` for another API."""
    header = parse_request_header(request)
    if header.api_key != ApiKey.FETCH:
        return None
    version = header.api_version
    header_version = response_header_version(ApiKey.FETCH, version)
    assert header_version is not None
    _, size = parse_response_header(answer, header_version)
    return _Fetch(
        version=version,
        request=decode_request(ApiKey.FETCH, version, memoryview(request)[header.size :]),
        response=decode_response(ApiKey.FETCH, version, memoryview(answer)[size:]),
    )


def _frames(chunks: Iterator[bytes]) -> list[bytes]:
    decoder = FrameDecoder(1 << 30)
    frames: list[bytes] = []
    for chunk in chunks:
        decoder.feed(chunk)
        while (frame := decoder.next_frame()) is not None:
            assert isinstance(frame, bytes), frame
            frames.append(frame)
    return frames


def _probes(fetches: list[_Fetch]) -> list[Probe]:
    """The probes of one connection. In a fetch session the broker leaves unchanged
    partitions out of its answers and the proxy leaves unchanged positions out of its
    requests, so the positions asked are tracked across the connection's Fetches."""
    asked: dict[PartitionKey, FetchPosition] = {}
    found: list[Probe] = []
    for fetch in fetches:
        view = read_fetch_request(fetch.request, fetch.version)
        if view.session_epoch <= 0:  # a full fetch lists every partition
            asked.clear()
        asked.update(view.partitions)
        for key in view.forgotten:
            asked.pop(key, None)
        for part in FetchResponseEditor(fetch.response, fetch.version).partitions():
            position = asked.get(part.key)
            if position is None or position.partition_max_bytes != PROBE_BYTES:
                continue
            found.append(
                Probe(
                    partition=part.key[1],
                    read_committed=view.read_committed,
                    fetch_offset=position.fetch_offset,
                    high_watermark=part.high_watermark,
                    last_stable_offset=part.last_stable_offset,
                    record_bytes=len(part.records),
                )
            )
    return found


@pytest.fixture(scope="module")
def relay() -> Iterator[tuple[LatencyRelay, Recording]]:
    recording = Recording()
    relay = LatencyRelay(LOOPBACK, 0, delay=0.0, tap=recording.tap)  # target: the broker's
    yield relay, recording
    relay.close()


@pytest.fixture(scope="module")
def relayed_broker(
    relay: tuple[LatencyRelay, Recording], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """A broker that advertises the relay on its second listener: a proxy bootstrapped there
    sends everything through the relay; the pipeline and the tests use the first."""
    server = KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=tmp_path_factory.mktemp("relayed-kafka"),
        extra_listeners={_RELAYED: "PLAINTEXT"},
        advertised_ports={_RELAYED: relay[0].port},
    )
    with server:
        server.start()
        host, port = server.listener_bootstrap(_RELAYED).rsplit(":", 1)
        relay[0].target = (host, int(port))
        yield server


@pytest.fixture(scope="module")
def open_transaction_after(
    relayed_broker: KafkaBroker, s3: S3Info, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TieredTopic]:
    """The tiered topic, with a transaction left open after it: LSO < HW on each partition."""
    broker = relayed_broker.info
    bucket = f"probes-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    tiered = build_tiered_topic(broker, s3, spark, bucket, tmp_path_factory.mktemp("spill"))
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"{tiered.topic}-open",
            "transaction.timeout.ms": 900_000,  # open for the whole module
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(tiered.partitions):
        producer.produce(tiered.topic, value=b"undecided", partition=partition)
    assert producer.flush(30) == 0
    try:
        yield tiered
    finally:
        producer.abort_transaction(30)
        delete_bucket(s3, bucket)


def relayed_proxy(
    relay: LatencyRelay, broker: KafkaBroker, tiered: TieredTopic, s3: S3Info, tmp_path: Path
) -> TierproxyServer:
    """A proxy over ``tiered`` that reaches the broker through the recording relay."""
    upstream = dataclasses.replace(broker.info, bootstrap=f"{LOOPBACK}:{relay.port}")
    return proxy_process(upstream, tmp_path, proxy_settings(s3, tiered))


@pytest.mark.parametrize("isolation", [READ_UNCOMMITTED, READ_COMMITTED])
def test_probes_ask_where_the_broker_has_nothing_to_read(
    isolation: str,
    relay: tuple[LatencyRelay, Recording],
    relayed_broker: KafkaBroker,
    open_transaction_after: TieredTopic,
    s3: S3Info,
    tmp_path: Path,
) -> None:
    tiered = open_transaction_after
    recording = relay[1]
    before = len(recording.probes())
    with running(relayed_proxy(relay[0], relayed_broker, tiered, s3, tmp_path)) as proxy:
        got = consume_confluent(
            proxy.bootstrap, tiered.topic, tiered.high_watermarks, isolation=isolation
        )
    ends = tiered.high_watermarks
    records: list[Record] = [r for r in got if r[1] < ends[r[0]]]  # not the open transaction
    assert by_partition(records) == tiered.expected[isolation]  # each record, once

    probes = recording.probes()[before:]
    committed = isolation == READ_COMMITTED
    assert {p.read_committed for p in probes} == {committed}, probes
    assert all(p.last_stable_offset < p.high_watermark for p in probes), probes
    assert {probe.partition for probe in probes} == set(range(tiered.partitions)), probes
    # Every probe, the first of each partition included, asks where the broker has nothing
    # to read, and gets nothing.
    at = [(p.last_stable_offset if committed else p.high_watermark) for p in probes]
    assert [probe.fetch_offset for probe in probes] == at, probes
    assert [probe.record_bytes for probe in probes] == [0] * len(probes), probes


def test_a_java_consumer_in_a_fetch_session_is_answered_alone_in_step(
    relay: tuple[LatencyRelay, Recording],
    relayed_broker: KafkaBroker,
    open_transaction_after: TieredTopic,
    s3: S3Info,
    tmp_path: Path,
) -> None:
    """Kafka's Java consumer, one batch per Fetch (``max.partition.fetch.bytes`` 1): most of
    its Fetches over the remote tier are answered by the proxy alone, the real broker never
    sees an epoch out of sequence, and the consumer gets every offset once."""
    tiered = open_transaction_after
    recording = relay[1]
    before = len(recording.session_fetches())
    with running(relayed_proxy(relay[0], relayed_broker, tiered, s3, tmp_path)) as proxy:
        run = run_tool(
            ensure_jars(KAFKA_4),
            str(RECORD_DIGEST),
            proxy.bootstrap,
            tiered.topic,
            "0",
            READ_UNCOMMITTED,
            "assign",
            "1",
            timeout_s=180,
        )
        alone = proxy.metric("tierproxy_remote_fetch_answered_without_broker_total")
    delivered = [
        (int(m[1]), int(m[2])) for line in run.stdout.splitlines() if (m := _RECORD.match(line))
    ]
    ends = tiered.high_watermarks
    expected = sorted((r[0], r[1]) for r in tiered.expected[READ_UNCOMMITTED])
    assert sorted(r for r in delivered if r[1] < ends[r[0]]) == expected  # each offset once
    assert alone > 0, "every Fetch of the session went to the broker"

    fetches = recording.session_fetches()[before:]
    assert [f for f in fetches if f.error != 0] == [], "the broker refused a session Fetch"
    sessions: dict[tuple[int, int], list[int]] = {}
    for f in fetches:
        if f.epoch > 0:
            sessions.setdefault((f.connection, f.session_id), []).append(f.epoch)
    assert sessions, "no incremental Fetch reached the broker"
    for epochs in sessions.values():
        assert epochs == list(range(1, len(epochs) + 1)), epochs


def test_a_fetch_without_metadata_first_falls_back_to_a_reach_probe(
    relay: tuple[LatencyRelay, Recording],
    relayed_broker: KafkaBroker,
    open_transaction_after: TieredTopic,
    s3: S3Info,
    tmp_path: Path,
) -> None:
    """A Fetch that no Metadata answer through this proxy preceded: the proxy knows none of
    the broker's offsets, probes just after the remote tier, and still answers right."""
    tiered = open_transaction_after
    recording = relay[1]
    before = len(recording.probes())

    async def fetch_each(bootstrap: str) -> dict[int, tuple[int, int, bytes]]:
        return {
            p: await fetch_once(bootstrap, tiered.topic, p, 0) for p in range(tiered.partitions)
        }

    with running(relayed_proxy(relay[0], relayed_broker, tiered, s3, tmp_path)) as proxy:
        answers = asyncio.run(fetch_each(proxy.bootstrap))

    expected = {(r[0], r[1]): r for r in tiered.expected[READ_UNCOMMITTED]}
    for partition, (error, _high_watermark, records) in answers.items():
        assert error == 0, (partition, error)
        got, _next = records_from(records, 0)
        assert got, partition
        assert got[-1].offset < tiered.broker_log_starts[partition]  # the remote tier's
        assert [(partition, r.offset, r.key, r.value) for r in got] == [
            expected[(partition, r.offset)] for r in got
        ]
    # The reach probe: once per partition, where the remote tier ends (here where the
    # broker's log starts), answered with a batch that the client never saw.
    probes = recording.probes()[before:]
    assert {p.partition: p.fetch_offset for p in probes} == tiered.broker_log_starts, probes
    assert all(p.record_bytes > 0 for p in probes), probes
