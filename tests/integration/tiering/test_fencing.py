"""Two ``tierproxy tier`` on one cluster: one acts, fenced by Kafka, while a producer writes.

Each test runs two pipelines as the real command (their own Spark and Python workers, in
their own process group) on one topic of four partitions, whose tiered data the broker
drops a second later, while a producer writes numbered records:

- both run for ten cycles of the holder and more: the other waits, logging one line;
- the holder is stopped (SIGSTOP, its whole process group) past its hold: the other takes
  over; resumed (SIGCONT), the stopped one writes nothing more;
- the holder is killed in the middle of a copy job: the other takes over.

Then every record must be read exactly once through the proxy from offset 0, the remote log
must have no hole, every object in the bucket must belong to a finished copy, and no
metadata record may have been refused (a reader of the whole metadata topic applies them
all, and so does the proxy).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer

from protocol.metadata_records import decode_metadata_record
from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.process import ManagedProcess, environment
from proxy.embedded.tierproxy import proxy_process, storage_settings
from storage.model import RemoteLogSegmentState
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.rsm.layout import kafka_uuid_string
from tests.integration.tiered.support import (
    LatencyRelay,
    consume_confluent,
    earliest_offsets,
    running,
    watermarks,
)
from tests.integration.tiering.support import (
    metadata_topic_records,
    tier_command,
    tier_config,
    wait_for_line,
)
from tests.integration.tiering.test_pipeline import bucket_keys
from tests.integration.tiering.workload import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1800)]

PARTITIONS = 4
TRANSACTION_TIMEOUT_MS = 10_000
COPY_TIMEOUT_MS = 60_000
UPLOAD_DELAY_S = 0.3
"""How late the object store answers the first pipeline (seven objects a segment)."""
HOLDING = re.compile(r"holding transactional id '[^']+' \(producer id \d+, epoch (\d+)\)")
WAITING = re.compile(r"another pipeline holds transactional id '[^']+' .* since \S+")
CYCLE = re.compile(r"tiering cycle done in")
LOST = re.compile(r"lost transactional id")
_S = RemoteLogSegmentState


@dataclass
class Workload:
    """Numbered records to every partition in turn (keyed by their number), idempotent and
    in order, at about ``rate`` a second, until stopped."""

    bootstrap: str
    topic: str
    rate: float = 400.0
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Stop, flush, and return how many records were written."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not stop"
        return self.sent

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20}
        )
        started = time.monotonic()
        for number in itertools.count():
            if self._stop.is_set():
                break
            ahead = number / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            producer.produce(
                self.topic,
                key=str(number).encode(),
                value=b"v" * 100,
                partition=number % PARTITIONS,
            )
            producer.poll(0)
            self.sent = number + 1
        assert producer.flush(60) == 0


@dataclass(frozen=True)
class Cluster:
    broker: BrokerInfo
    s3: S3Info
    bucket: str
    topic: str
    work: Path

    @property
    def metadata_topic(self) -> str:
        return f"__rlm-{self.topic}"

    def pipeline(self, name: str, storage: LatencyRelay | None = None) -> ManagedProcess:
        """A ``tierproxy tier`` loop of its own (state and spill directories, log), reaching
        the object store through ``storage`` if given."""
        directory = self.work / name
        directory.mkdir()
        endpoint = (
            {}
            if storage is None
            else {"remote.log.storage.s3.endpoint": f"http://127.0.0.1:{storage.port}"}
        )
        config = tier_config(
            directory / "tier.toml",
            self.broker.bootstrap,
            self.s3,
            self.bucket,
            self.topic,
            settings={
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "tiering.copy.timeout.ms": COPY_TIMEOUT_MS,
                "remote.log.metadata.initialization.timeout.ms": 60_000,
                "remote.log.storage.s3.read.timeout.ms": 30_000,
                **endpoint,
            },
            policy={"local.retention.ms": 1000},
        )
        return ManagedProcess(
            f"tierproxy tier ({name})",
            tier_command(config),
            log_path=directory / "tier.log",
            env=environment(TIERPROXY_STATE_DIR=str(directory / "state")),
            stop_grace_s=60,
        )


@pytest.fixture
def cluster(broker: BrokerInfo, s3: S3Info, s3_bucket: str, tmp_path: Path) -> Cluster:
    topic = f"fenced-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    return Cluster(broker=broker, s3=s3, bucket=s3_bucket, topic=topic, work=tmp_path)


@pytest.fixture
def workload(cluster: Cluster) -> Iterator[Workload]:
    producing = Workload(cluster.broker.bootstrap, cluster.topic)
    producing.start()
    yield producing
    producing.stop()


def log_of(process: ManagedProcess) -> str:
    return process.log_path.read_text(errors="replace")


def count(process: ManagedProcess, pattern: re.Pattern[str]) -> int:
    return len(pattern.findall(log_of(process)))


def wait_for_cycles(process: ManagedProcess, cycles: int, *, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while count(process, CYCLE) < cycles:
        assert process.running, log_of(process)[-3000:]
        assert time.monotonic() < deadline, (
            f"fewer than {cycles} cycles:\n{log_of(process)[-3000:]}"
        )
        time.sleep(1)


@pytest.fixture
def slow_storage(cluster: Cluster) -> Iterator[LatencyRelay]:
    """The object store with every answer late, so that uploads take a while to catch."""
    endpoint = urllib.parse.urlsplit(cluster.s3.endpoint_url)
    assert endpoint.hostname is not None and endpoint.port is not None
    relay = LatencyRelay(endpoint.hostname, endpoint.port, delay=UPLOAD_DELAY_S)
    yield relay
    relay.close()


def start_both(
    cluster: Cluster, storage: LatencyRelay | None = None
) -> tuple[ManagedProcess, ManagedProcess]:
    """The first pipeline holding the cluster's tiering (through ``storage``), the second
    waiting for it."""
    first, second = cluster.pipeline("first", storage), cluster.pipeline("second")
    first.start()
    wait_for_line(first, HOLDING, timeout_s=300)
    second.start()
    wait_for_line(second, WAITING, timeout_s=300)
    return first, second


def stop_all(*processes: ManagedProcess) -> None:
    for process in processes:
        if process.pid is not None:
            os.killpg(process.pid, signal.SIGCONT)
        process.stop()


def pipeline_logs_are_clean(*processes: ManagedProcess) -> None:
    for process in processes:
        text = log_of(process)
        assert "skipping metadata record" not in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


async def records_written_after(
    cluster: Cluster, appended_after_ms: int
) -> list[tuple[int, int, int]]:
    """``(partition, offset, event time)`` of every metadata record appended (its batch's
    timestamp) after ``appended_after_ms``, aborted transactions included."""
    records = await metadata_topic_records(cluster.broker.bootstrap, cluster.metadata_topic)
    return [
        (partition, r.offset, decode_metadata_record(r.value or b"").event_timestamp)
        for partition, r in records
        if r.timestamp > appended_after_ms
    ]


async def assert_tiered_exactly_once(cluster: Cluster, written: int) -> None:
    """Every record once through the proxy, no remote hole, no stray object, no refusal."""
    config = RemoteLogMetadataConfig(
        topic_name=cluster.metadata_topic, topic_partitions=3, snapshot_dir=""
    )
    bootstrap = cluster.broker.bootstrap
    async with TopicBasedRemoteLogMetadataManager(config, bootstrap_servers=bootstrap) as rlmm:
        deadline = time.monotonic() + 600
        while True:
            await rlmm.wait_until_caught_up(60)
            problems = await tiering_problems(cluster, rlmm)
            if not problems:
                break
            assert time.monotonic() < deadline, problems
            await asyncio.sleep(2)
        assert rlmm.skipped_records == 0, "a metadata record was refused"
    marks = await asyncio.to_thread(watermarks, bootstrap, cluster.topic, PARTITIONS)
    ends = {partition: end for partition, (_, end) in marks.items()}
    assert sum(ends.values()) == written
    settings = storage_settings(cluster.s3, cluster.bucket, cluster.metadata_topic)
    with running(proxy_process(cluster.broker, cluster.work, settings)) as proxy:
        records = await asyncio.to_thread(
            consume_confluent, proxy.bootstrap, cluster.topic, ends, timeout_s=300
        )
        assert proxy.metric("tierproxy_remote_log_metadata_records_skipped") == 0
    for partition in range(PARTITIONS):
        got = [(offset, key) for p, offset, key, _ in records if p == partition]
        expected = [str(n).encode() for n in range(partition, written, PARTITIONS)]
        assert [offset for offset, _ in got] == list(range(ends[partition]))
        assert [key for _, key in got] == expected


async def tiering_problems(cluster: Cluster, rlmm: TopicBasedRemoteLogMetadataManager) -> str:
    """What is not yet as it must end: "" once every partition is tiered from offset 0
    without a hole up to where the broker's log starts, with nothing unfinished left and
    every object in the bucket a finished copy's."""
    cache = rlmm.cache
    starts = await asyncio.to_thread(
        earliest_offsets, cluster.broker.bootstrap, cluster.topic, PARTITIONS
    )
    finished: set[str] = set()
    for partition in range(PARTITIONS):
        tp = cache.topic_id_partition(cluster.topic, partition)
        if tp is None:
            return f"partition {partition} has no remote segment yet"
        if cache.segments(tp, {_S.COPY_SEGMENT_STARTED, _S.DELETE_SEGMENT_STARTED}):
            return f"partition {partition} has unfinished copies or deletions"
        chain = sorted(cache.segments(tp, {_S.COPY_SEGMENT_FINISHED}), key=lambda s: s.start_offset)
        if chain[0].start_offset != 0:
            return f"partition {partition}'s remote log starts at {chain[0].start_offset}"
        for before, after in itertools.pairwise(chain):
            assert after.start_offset == before.end_offset + 1, (
                f"a hole or overlap: {before}, {after}"
            )
        assert starts[partition] <= chain[-1].end_offset + 1, f"a gap before {starts[partition]}"
        finished |= {kafka_uuid_string(s.segment_id.id) for s in chain}
    strays = [
        key
        for key in await bucket_keys(cluster.s3, cluster.bucket)
        if key.rsplit("/", 1)[-1][21:].split(".")[0] not in finished
    ]
    return f"objects of no finished copy: {strays[:5]}" if strays else ""


async def test_two_pipelines_for_ten_cycles_one_acts_and_the_other_takes_over_on_release(
    cluster: Cluster, workload: Workload
) -> None:
    first, second = start_both(cluster)
    try:
        wait_for_cycles(first, 10)
        assert count(second, WAITING) == 1, "the waiting pipeline logs one line"
        assert count(second, HOLDING) == 0 and count(second, CYCLE) == 0
        first.stop()  # SIGTERM: a rolling update's old pipeline releases its hold
        wait_for_line(second, HOLDING, timeout_s=120)
        wait_for_cycles(second, 2)
        written = workload.stop()
        await assert_tiered_exactly_once(cluster, written)
    finally:
        stop_all(first, second)
    pipeline_logs_are_clean(first, second)


async def test_a_holder_stopped_past_its_hold_writes_nothing_once_resumed(
    cluster: Cluster, workload: Workload, slow_storage: LatencyRelay
) -> None:
    first, second = start_both(cluster, slow_storage)
    try:
        wait_for_cycles(first, 3)
        # The driver, its Spark JVM and its workers, in the middle of an upload.
        stopped_ms = await signal_mid_copy(cluster, first, signal.SIGSTOP)
        assert first.pid is not None
        wait_for_line(second, HOLDING, timeout_s=TRANSACTION_TIMEOUT_MS / 1000 + 120)
        wait_for_cycles(second, 2)
        resumed_ms = int(time.time() * 1000)
        os.killpg(first.pid, signal.SIGCONT)
        wait_for_line(first, LOST, timeout_s=120)
        lost = LOST.search(log_of(first))
        assert lost is not None
        after_lost = lost.start()
        wait_for_line(first, WAITING, after_lost, timeout_s=120)
        wait_for_cycles(second, count(second, CYCLE) + 2)
        written = workload.stop()
        await assert_tiered_exactly_once(cluster, written)
        # Every record of the first pipeline is about a cycle it began before it stopped.
        late = [r for r in await records_written_after(cluster, resumed_ms) if r[2] <= stopped_ms]
        assert not late, f"the resumed pipeline wrote {late}"
        assert not CYCLE.search(log_of(first), after_lost), "the resumed pipeline ran a cycle"
    finally:
        stop_all(first, second)
    pipeline_logs_are_clean(first, second)


async def test_a_holder_killed_mid_copy_is_taken_over(
    cluster: Cluster, workload: Workload, slow_storage: LatencyRelay
) -> None:
    first, second = start_both(cluster, slow_storage)
    try:
        wait_for_cycles(first, 2)
        await signal_mid_copy(cluster, first, signal.SIGKILL)
        wait_for_line(second, HOLDING, timeout_s=TRANSACTION_TIMEOUT_MS / 1000 + 120)
        wait_for_cycles(second, 2)
        written = workload.stop()
        await assert_tiered_exactly_once(cluster, written)
    finally:
        stop_all(first, second)
    pipeline_logs_are_clean(second)


async def signal_mid_copy(
    cluster: Cluster, pipeline: ManagedProcess, signal_number: signal.Signals
) -> int:
    """Send ``signal_number`` to ``pipeline``'s process group once an object of an unfinished
    copy is in the bucket (its copy job is uploading); when (wall-clock ms)."""
    config = RemoteLogMetadataConfig(
        topic_name=cluster.metadata_topic, topic_partitions=3, snapshot_dir=""
    )
    async with TopicBasedRemoteLogMetadataManager(
        config, bootstrap_servers=cluster.broker.bootstrap
    ) as rlmm:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            started = {
                kafka_uuid_string(s.segment_id.id)
                for partition in range(PARTITIONS)
                if (tp := rlmm.cache.topic_id_partition(cluster.topic, partition)) is not None
                for s in rlmm.cache.segments(tp, {_S.COPY_SEGMENT_STARTED})
            }
            keys = await bucket_keys(cluster.s3, cluster.bucket)
            if any(key.rsplit("/", 1)[-1][21:].split(".")[0] in started for key in keys):
                assert pipeline.pid is not None
                sent = int(time.time() * 1000)
                os.killpg(pipeline.pid, signal_number)
                return sent
            await asyncio.sleep(0.05)
    raise AssertionError("no copy was caught uploading")
