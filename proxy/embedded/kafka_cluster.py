"""A three-node Apache Kafka (KRaft) cluster on loopback, for leader elections in tests.

Every node is a :class:`~proxy.embedded.kafka_node.KafkaNode` and a controller voter; each can
be stopped and started on its own, on the same ports and data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from proxy.embedded.info import BrokerInfo, probe_broker
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_node import STARTUP_TIMEOUT_S, KafkaNode, NodePorts, cluster_id
from proxy.embedded.ports import LOOPBACK, free_ports
from proxy.embedded.process import ServerStartError
from proxy.embedded.server import ClosedOnExit, retry_on_early_exit

__all__ = ["KafkaCluster"]

_CLUSTER_HEAP: Final = "-Xms128m -Xmx384m"
"""Smaller than a single broker's heap: three JVMs share the machine."""


class KafkaCluster(ClosedOnExit):
    """``size`` combined KRaft nodes forming one cluster (all are controller voters).

    Each node can be stopped and started on its own (same ports, same data), for leader
    elections and brokers that leave and come back.
    """

    def __init__(
        self,
        distribution: KafkaDistribution,
        *,
        size: int = 3,
        work_dir: Path,
        properties: Mapping[str, str] | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.distribution = distribution
        self.size = size
        self.work_dir = work_dir
        self._extra = dict(properties or {})
        self._startup_timeout_s = startup_timeout_s
        self.nodes: list[KafkaNode] = []
        self.startup_seconds = 0.0
        self._info: BrokerInfo | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def info(self) -> BrokerInfo:
        """The first node's address and the cluster's capabilities.

        :raises RuntimeError: the cluster has not been started.
        """
        if self._info is None:
            raise RuntimeError("the Kafka cluster has not been started")
        return self._info

    def node(self, node_id: int) -> KafkaNode:
        """The node with ``node_id`` (1-based, as in Metadata)."""
        return self.nodes[node_id - 1]

    def start(self) -> BrokerInfo:
        """Start every node and wait until each lists all brokers.

        :raises ServerStartError: a node failed to format or start.
        """
        if not self.nodes:
            retry_on_early_exit(self._first_start)
        else:
            self._launch_all()
        return self.info

    def _first_start(self) -> None:
        ports = free_ports(2 * self.size)
        pairs = [
            NodePorts(broker=ports[2 * i], controller=ports[2 * i + 1]) for i in range(self.size)
        ]
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{p.controller}" for i, p in enumerate(pairs))
        cluster = cluster_id()
        replication = min(3, self.size)
        extra = {
            "default.replication.factor": str(replication),
            "offsets.topic.replication.factor": str(replication),
            "transaction.state.log.replication.factor": str(replication),
            "share.coordinator.state.topic.replication.factor": str(replication),
            **self._extra,
        }
        self.work_dir.mkdir(parents=True, exist_ok=True)
        run_dir = self.work_dir / f"cluster-{pairs[0].broker}"
        run_dir.mkdir()
        nodes = [
            KafkaNode(
                self.distribution,
                node_id=i + 1,
                ports=p,
                voters=voters,
                cluster=cluster,
                work_dir=run_dir,
                properties=extra,
                heap=_CLUSTER_HEAP,
            )
            for i, p in enumerate(pairs)
        ]
        try:
            self.nodes = nodes
            self._launch_all()
        except ServerStartError:
            for node in nodes:
                node.stop()
            self.nodes = []
            raise

    def _launch_all(self) -> None:
        started = time.monotonic()
        for node in self.nodes:
            if not node.running:
                node.launch()
        for node in self.nodes:
            node.wait_ready(brokers=self.size, timeout_s=self._startup_timeout_s)
        self.startup_seconds = time.monotonic() - started
        first = self.nodes[0]
        self._info = probe_broker(
            kind="kafka",
            host=LOOPBACK,
            port=first.port,
            version=f"Apache Kafka {self.distribution.version} ({self.size} nodes)",
        )

    def running_nodes(self) -> Sequence[KafkaNode]:
        return [node for node in self.nodes if node.running]

    def close(self) -> None:
        """Stop every node by PID (the work directory belongs to the caller)."""
        for node in self.nodes:
            node.stop()
