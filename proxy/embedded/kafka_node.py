"""One Apache Kafka KRaft node on loopback: its properties, its storage format, its process.

Every node is a combined broker+controller started as ``java -cp '<libs>/*' kafka.Kafka
server.properties`` from the jars of :mod:`proxy.embedded.kafka_jars` (Maven Central, pinned)
or of a user's ``KAFKA_HOME``; storage is formatted first with ``kafka.tools.StorageTool
format -t <cluster id> -c server.properties``. The quorum is the static
``controller.quorum.voters`` form, which every KRaft release from 3.3 to 4.x accepts. The
cluster id is generated here as Kafka's ``Uuid.toString()`` (URL-safe base64 of 16 random
bytes, unpadded), which saves a JVM start for ``random-uuid``.

Settings beyond a plain node, all for tests: retention is checked every second (and the first
check is not delayed by ``log.initial.task.delay.ms``, 30 s by default), segments are 1 MiB
(the smallest Kafka 4 accepts), deleted segment files go after 1 s, the log cleaner gets a
small dedupe buffer, and internal topics have few partitions (the share-group state topic
included: Kafka 4.x enables share groups, KIP-932, on a freshly formatted cluster). With
``native_tiered`` the node also runs Kafka's own tiered storage (KIP-405 as shipped) on a
local directory (``LocalTieredStorage`` from the ``kafka-storage`` test jar), with the copy
task every 500 ms: the reference that the proxy's answers are compared with.

A node keeps its ports and data across ``stop()`` and ``start()``, so tests can restart a
broker, or stop one of a cluster's nodes to force a leader election, and bring it back.
:mod:`proxy.embedded.kafka` runs one node as a broker, :mod:`proxy.embedded.kafka_cluster`
three as a cluster.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.probe import metadata_brokers
from proxy.embedded.process import ManagedProcess, ServerStartError, environment

__all__ = [
    "NATIVE_TIERED_TOPIC_CONFIGS",
    "STARTUP_TIMEOUT_S",
    "KafkaNode",
    "NodePorts",
    "cluster_id",
    "native_tiered_properties",
]

STARTUP_TIMEOUT_S: Final = 120.0
"""How long a node (or a whole cluster) may take to answer Metadata after its launch."""
_FORMAT_TIMEOUT_S: Final = 120.0
_STOP_GRACE_S: Final = 20.0
_SEGMENT_BYTES: Final = 1024 * 1024
_HEAP: Final = "-Xms128m -Xmx512m"
_LOCAL_TIERED_STORAGE: Final = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
_JVM_LOGGING: Final = (
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.metrics=warn",
    "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaConfig=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config.AbstractConfig=warn",
)

NATIVE_TIERED_TOPIC_CONFIGS: Final = {
    "remote.storage.enable": "true",
    "local.retention.ms": "1000",
    "local.retention.bytes": "1",
}
"""Topic settings that make a native-tiered broker copy every closed segment and then drop
it locally at once: reads below the active segment must come from the remote tier."""


def cluster_id() -> str:
    """A fresh KRaft cluster id in Kafka's ``Uuid.toString()`` form.

    Like Kafka's own ``Uuid.randomUuid()``, it never starts with a dash: one id in 64 would,
    and ``kafka-storage format -t -abc…`` then reads the id as an option and fails.
    """
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePorts:
    """A node's listener ports, kept across restarts."""

    broker: int
    controller: int
    extra: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """More client listeners: name -> (security protocol, port)."""
    advertised: Mapping[str, int] = field(default_factory=dict)
    """Listeners advertised at another port than their own: name -> port."""


def _base_properties(
    *, node_id: int, ports: NodePorts, voters: str, data_dir: Path, replication: int
) -> dict[str, str]:
    client = {"PLAINTEXT": ("PLAINTEXT", ports.broker), **ports.extra}
    bound = ",".join(f"{name}://{LOOPBACK}:{port}" for name, (_, port) in client.items())
    advertised = ",".join(
        f"{name}://{LOOPBACK}:{ports.advertised.get(name, port)}"
        for name, (_, port) in client.items()
    )
    protocols = ",".join(f"{name}:{protocol}" for name, (protocol, _) in client.items())
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"{bound},CONTROLLER://{LOOPBACK}:{ports.controller}",
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{protocols}",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.check.interval.ms": "1000",
        "log.initial.task.delay.ms": "100",
        "log.segment.bytes": str(_SEGMENT_BYTES),
        "log.segment.delete.delay.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        "num.network.threads": "2",
        "num.io.threads": "4",
    }


def native_tiered_properties(storage_dir: Path) -> dict[str, str]:
    """Broker settings for Kafka's own tiered storage on ``storage_dir``."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": _LOCAL_TIERED_STORAGE,
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        "rsm.config.dir": str(storage_dir),
        "remote.log.metadata.manager.impl.prefix": "rlmm.config.",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "500",
    }


class KafkaNode:
    """One KRaft process: fixed ports and data directory, formatted once, restartable."""

    def __init__(
        self,
        distribution: KafkaDistribution,
        *,
        node_id: int,
        ports: NodePorts,
        voters: str,
        cluster: str,
        work_dir: Path,
        properties: Mapping[str, str],
        heap: str = _HEAP,
    ) -> None:
        self.distribution = distribution
        self.node_id = node_id
        self.port = ports.broker
        self.data_dir = work_dir / f"data-{node_id}"
        self.log_path = work_dir / f"kafka-{node_id}.log"
        self._properties_path = work_dir / f"server-{node_id}.properties"
        self._cluster = cluster
        self._heap = heap
        self._formatted = False
        settings = _base_properties(
            node_id=node_id,
            ports=ports,
            voters=voters,
            data_dir=self.data_dir,
            replication=1,
        )
        settings.update(properties)
        self._properties_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self._process = ManagedProcess(
            f"kafka-{node_id}",
            self._argv(),
            log_path=self.log_path,
            env=environment(),
            cwd=work_dir,
            stop_grace_s=_STOP_GRACE_S,
        )

    def _argv(self) -> list[str]:
        command = self.distribution.java(self.distribution.server, str(self._properties_path))
        java, _heap, *rest = command
        return [java, *self._heap.split(), "-Djava.awt.headless=true", *_JVM_LOGGING, *rest]

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def format(self) -> None:
        """Format the data directory for the cluster (once; a restart keeps the data).

        :raises ServerStartError: the storage tool failed (its output quoted).
        """
        if self._formatted:
            return
        argv = self.distribution.java(
            self.distribution.storage_tool,
            "format",
            "-t",
            self._cluster,
            "-c",
            str(self._properties_path),
        )
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=_FORMAT_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ServerStartError(f"kafka storage format failed: {err}") from err
        if result.returncode != 0:  # checked here to quote the tool's own output
            raise ServerStartError(
                f"kafka storage format exited with {result.returncode}:\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
        self._formatted = True

    def launch(self) -> None:
        """Start the JVM (formatting first if needed); does not wait for readiness."""
        self.format()
        self._process.start()

    def wait_ready(self, *, brokers: int, timeout_s: float) -> float:
        """Wait until this node's Metadata lists ``brokers`` brokers; the seconds waited.

        :raises ServerStartError: the JVM exited or the deadline passed (log tail quoted).
        """
        return self._process.wait_ready(
            lambda: len(metadata_brokers(LOOPBACK, self.port, timeout_s=2.0)) >= brokers,
            timeout_s=timeout_s,
        )

    def stop(self) -> None:
        """Stop the JVM by PID (SIGTERM: a controlled shutdown); data and ports are kept."""
        self._process.stop()

    def kill(self) -> None:
        """SIGKILL at once: a crash, no controlled shutdown."""
        pid = self._process.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        self._process.stop()
