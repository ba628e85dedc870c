"""Share groups (KIP-932) through the proxy, on a three-node Apache Kafka cluster.

Kafka 4.x enables share groups on a freshly formatted cluster (feature ``share.version``), and
ShareFetch and ShareAcknowledge answers name a moved partition leader in ``node_endpoints``
with the broker's own host and port. Kafka's Java ``KafkaShareConsumer`` reads a topic through
the proxy while the leader of a partition moves twice: it is stopped (a controlled shutdown
hands leadership to a follower), then comes back and a preferred election gives leadership back
to it while the interim leader still runs and answers NOT_LEADER_OR_FOLLOWER with the endpoint
of the new one. The consumer must read every record, and no broker address may ever reach it:
its network client logs every response it receives (``NetworkClient`` at DEBUG), and every
host and port in them, and every address it connects to, must be the proxy's.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from proxy.embedded import KAFKA_4, ensure_jars
from proxy.embedded.kafka_cluster import KafkaCluster
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_tools import run_tool
from proxy.embedded.tierproxy import TierproxyServer
from tests.conditions import wait_until
from tests.integration.proxy.conftest import start_proxy

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 1500
RECORD_DIGEST = Path(__file__).parents[2] / "java" / "RecordDigest.java"
CLUSTER_CHANGE_S: Final = 120.0
"""How long a leader move may take (a JVM stopping or starting, an election): generous, the
machine is busy; a condition that holds ends the wait at once."""
_RECORD_LINE = re.compile(r"^(\d+) (\d+) ([0-9a-f]{64})$")
_ADDRESS_IN_RESPONSE = re.compile(r"host='([^']*)', port=(-?\d+)")
_CONNECTION = re.compile(r"Initiating connection to node .* using address \S*:(\d+)")
_ENDPOINTS_RECEIVED = re.compile(
    r"Received SHARE_(?:FETCH|ACKNOWLEDGE) response .*nodeEndpoints=\[N"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(ensure_jars(KAFKA_4), work_dir=tmp_path_factory.mktemp("share")) as nodes:
        nodes.start()
        yield nodes


@pytest.fixture
def proxy(cluster: KafkaCluster, tmp_path: Path) -> Iterator[TierproxyServer]:
    server = start_proxy(dataclasses.replace(cluster.info, bootstrap=cluster.bootstrap), tmp_path)
    yield server
    server.stop()


def produce(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    for future in admin.create_topics([new]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 200 + b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def records_of(lines: list[str]) -> list[tuple[str, ...]]:
    return [match.groups() for line in lines if (match := _RECORD_LINE.match(line))]


def read_directly(cluster: KafkaCluster, topic: str) -> list[tuple[str, ...]]:
    """What ``RecordDigest.java`` reads of every partition of ``topic`` from the brokers
    themselves, assigned (no group)."""
    run = run_tool(
        cluster.distribution,
        str(RECORD_DIGEST),
        cluster.bootstrap,
        topic,
        "0",
        "read_committed",
        "assign",
        timeout_s=180,
    )
    return records_of(run.stdout.splitlines())


def partition_zero(cluster: KafkaCluster, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and in-sync replicas, asked of a running node directly."""
    node = cluster.running_nodes()[0]
    metadata = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
    part = metadata.topics[topic].partitions[0]
    return int(part.leader), [int(r) for r in part.isrs]


class JavaShareReader:
    """``RecordDigest.java`` in share mode: its standard output read line by line, its
    standard error (the network client's log) kept in a file."""

    def __init__(
        self, distribution: KafkaDistribution, bootstrap: str, topic: str, log: Path
    ) -> None:
        group = f"share-{uuid.uuid4().hex[:8]}"
        java, heap, *rest = distribution.java(
            str(RECORD_DIGEST),
            bootstrap,
            topic,
            str(RECORDS),
            "read_committed",
            "share",
            group,
            "pause",
        )
        self.log = log
        self._log_file = log.open("w")
        self._process = subprocess.Popen(
            [
                java,
                heap,
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.NetworkClient=debug",
                *rest,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        assert self._process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,))
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("")  # end of output

    def wait_for(self, prefix: str) -> str:
        """The next line that starts with ``prefix``, collecting the lines before it."""
        deadline = time.monotonic() + CLUSTER_CHANGE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line
            if not line and self._process.poll() is not None:
                raise AssertionError(f"the share consumer ended before {prefix!r}")
            self.output.append(line)
        raise AssertionError(f"the share consumer printed no {prefix!r} in time")

    def go_on(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(30)
        self._reader.join(30)
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        self._log_file.close()


def move_leader_away(cluster: KafkaCluster, topic: str) -> int:
    """Stop partition 0's leader; wait until another node leads it. The stopped node's id."""
    leader, _isr = partition_zero(cluster, topic)
    cluster.node(leader).stop()
    wait_until(
        lambda: partition_zero(cluster, topic)[0] not in (leader, -1),
        timeout_s=CLUSTER_CHANGE_S,
        what=f"a new leader of {topic}-0 after node {leader} stopped",
    )
    return leader


def bring_leader_back(cluster: KafkaCluster, topic: str, preferred: int) -> None:
    """Restart ``preferred``; once it is in sync, elect it leader of partition 0 again (the
    interim leader keeps running)."""
    cluster.start()
    wait_until(
        lambda: preferred in partition_zero(cluster, topic)[1],
        timeout_s=CLUSTER_CHANGE_S,
        what=f"node {preferred} back in sync for {topic}-0",
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def elected() -> bool:
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
        return partition_zero(cluster, topic)[0] == preferred

    wait_until(elected, timeout_s=CLUSTER_CHANGE_S, what=f"node {preferred} leads {topic}-0")


def test_a_share_consumer_reads_everything_across_leader_moves_and_sees_only_proxy_addresses(
    cluster: KafkaCluster, proxy: TierproxyServer, tmp_path: Path
) -> None:
    topic = f"share-{uuid.uuid4().hex[:8]}"
    produce(cluster.bootstrap, topic)
    expected = sorted(set(read_directly(cluster, topic)))
    assert len(expected) == RECORDS
    proxy_ports = {proxy.port + i for i in range(cluster.size)}
    broker_ports = {node.port for node in cluster.nodes}

    reader = JavaShareReader(cluster.distribution, proxy.bootstrap, topic, tmp_path / "java.log")
    try:
        reader.wait_for("paused")
        stopped = move_leader_away(cluster, topic)
        reader.go_on()
        reader.wait_for("paused")
        bring_leader_back(cluster, topic, stopped)
        reader.go_on()
        done = reader.wait_for("done")
    finally:
        reader.close()

    assert done == f"done {RECORDS}"
    assert sorted(set(records_of(reader.output))) == expected
    log = reader.log.read_text()
    # Ports of 0 and -1 stand for no node (a coordinator not found yet, say).
    seen = {int(port) for _host, port in _ADDRESS_IN_RESPONSE.findall(log) if int(port) > 0}
    connected = {int(port) for port in _CONNECTION.findall(log)}
    assert seen, "the network client logged no address"
    assert seen | connected <= proxy_ports, (seen | connected) & broker_ports
    assert _ENDPOINTS_RECEIVED.search(log), "no share answer named a moved leader"


def read_in_share_group(
    distribution: KafkaDistribution, bootstrap: str, topic: str, group: str, records: int
) -> list[tuple[str, ...]]:
    """What ``RecordDigest.java`` reads in share group ``group``, stopping at ``records``."""
    run = run_tool(
        distribution,
        str(RECORD_DIGEST),
        bootstrap,
        topic,
        str(records),
        "read_committed",
        "share",
        group,
        timeout_s=180,
    )
    return records_of(run.stdout.splitlines())


def test_a_share_group_behind_the_brokers_log_start_goes_on_from_it(
    cluster: KafkaCluster, proxy: TierproxyServer
) -> None:
    """A share group reads only the broker's log (ShareFetch never reaches the remote tier).
    When the pipeline's DeleteRecords moves the log start past the group's start offset (its
    members were away), Kafka moves the group's start offset to the new log start: the records
    in between are not delivered to the group, the rest are, each with its own data."""
    topic = f"behind-{uuid.uuid4().hex[:8]}"
    produce(cluster.bootstrap, topic)
    by_offset = {(p, o): digest for p, o, digest in read_directly(cluster, topic)}
    group = f"behind-{uuid.uuid4().hex[:8]}"
    first = read_in_share_group(cluster.distribution, proxy.bootstrap, topic, group, 300)
    assert len({(p, o) for p, o, _ in first}) >= 300
    new_start = 600
    assert all(int(o) < new_start for _p, o, _d in first)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, p, new_start) for p in range(PARTITIONS)])
    for future in deleted.values():
        future.result(30)
    remaining = RECORDS - PARTITIONS * new_start
    second = read_in_share_group(cluster.distribution, proxy.bootstrap, topic, group, remaining)
    assert sorted({(p, o) for p, o, _ in second}) == sorted(
        (p, o) for p, o in by_offset if int(o) >= new_start
    )
    assert all(by_offset[(p, o)] == digest for p, o, digest in second)
