"""A single-node Apache Kafka (KRaft) on loopback for the tests and ``tierproxy demo``.

The node itself (its properties, storage format and process) is
:class:`~proxy.embedded.kafka_node.KafkaNode`; this adds what a test asks of one broker:
extra listeners, TLS, advertised ports, Kafka's native tiered storage, and restarts on the
same ports and data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from proxy.embedded.info import BrokerInfo, probe_broker
from proxy.embedded.kafka_jars import KafkaDistribution
from proxy.embedded.kafka_node import (
    STARTUP_TIMEOUT_S,
    KafkaNode,
    NodePorts,
    cluster_id,
    native_tiered_properties,
)
from proxy.embedded.kafka_tls import BrokerTls
from proxy.embedded.ports import LOOPBACK, free_ports
from proxy.embedded.server import EmbeddedServer, retry_on_early_exit

__all__ = ["KafkaBroker"]


class KafkaBroker(EmbeddedServer):
    """A single-node Kafka (combined broker+controller) on loopback, data in the work directory.

    ``properties`` are added to (and override) the node's settings; ``native_tiered`` switches
    on Kafka's own tiered storage in ``work_dir/tiered-storage``; ``extra_listeners`` (listener
    name -> security protocol, e.g. ``{"SASL_PLAINTEXT": "SASL_PLAINTEXT"}``) adds client
    listeners on free ports beside the PLAINTEXT one that the harness probes
    (:meth:`listener_bootstrap` gives their addresses); ``tls`` is the certificate of the SSL
    and SASL_SSL ones among them; ``advertised_ports`` (listener name -> port) has the broker
    name another port for a listener in Metadata, where a test puts a relay in front of it.
    """

    name = "kafka"

    def __init__(
        self,
        distribution: KafkaDistribution,
        *,
        work_dir: Path | None = None,
        properties: Mapping[str, str] | None = None,
        native_tiered: bool = False,
        extra_listeners: Mapping[str, str] | None = None,
        tls: BrokerTls | None = None,
        advertised_ports: Mapping[str, int] | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(work_dir)
        self.distribution = distribution
        self.native_tiered = native_tiered
        self._extra = {**(tls.properties() if tls else {}), **(properties or {})}
        self._extra_listeners = dict(extra_listeners or {})
        self._advertised_ports = dict(advertised_ports or {})
        self._ports: NodePorts | None = None
        self._startup_timeout_s = startup_timeout_s
        self._node: KafkaNode | None = None
        self._info: BrokerInfo | None = None
        self.startup_seconds = 0.0

    @property
    def version(self) -> str:
        return self.distribution.version

    @property
    def tiered_storage_dir(self) -> Path:
        """Where ``LocalTieredStorage`` keeps the remote segments (``native_tiered`` only)."""
        return self.work_dir / "tiered-storage"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "kafka-1.log"

    @property
    def running(self) -> bool:
        return self._node is not None and self._node.running

    @property
    def pid(self) -> int | None:
        return None if self._node is None else self._node.pid

    @property
    def info(self) -> BrokerInfo:
        """The running broker's address and capabilities.

        :raises RuntimeError: the broker has not been started.
        """
        if self._info is None:
            raise RuntimeError("the Kafka broker has not been started")
        return self._info

    def start(self) -> BrokerInfo:
        """Start the broker (formatting storage the first time) and wait until it serves.

        A broker that was stopped restarts on the same port with its data.

        :raises ServerStartError: formatting failed or the broker did not become ready.
        """
        if self.running:
            return self.info
        if self._node is None:
            return retry_on_early_exit(self._first_start)
        return self._ready(self._node)

    def listener_bootstrap(self, name: str) -> str:
        """``host:port`` of the extra listener ``name``.

        :raises RuntimeError: the broker has not been started.
        :raises KeyError: there is no such listener.
        """
        if self._ports is None:
            raise RuntimeError("the Kafka broker has not been started")
        return f"{LOOPBACK}:{self._ports.extra[name][1]}"

    def _first_start(self) -> BrokerInfo:
        port, controller, *more = free_ports(2 + len(self._extra_listeners))
        ports = NodePorts(
            broker=port,
            controller=controller,
            extra={
                name: (protocol, extra_port)
                for (name, protocol), extra_port in zip(
                    self._extra_listeners.items(), more, strict=True
                )
            },
            advertised=self._advertised_ports,
        )
        properties = dict(self._extra)
        if self.native_tiered:
            self.tiered_storage_dir.mkdir(parents=True, exist_ok=True)
            properties = {**native_tiered_properties(self.tiered_storage_dir), **properties}
        run_dir = self.work_dir / f"node-{port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        node = KafkaNode(
            self.distribution,
            node_id=1,
            ports=ports,
            voters=f"1@{LOOPBACK}:{controller}",
            cluster=cluster_id(),
            work_dir=run_dir,
            properties=properties,
        )
        info = self._ready(node)
        self._node, self._ports = node, ports
        return info

    def _ready(self, node: KafkaNode) -> BrokerInfo:
        node.launch()
        self.startup_seconds = node.wait_ready(brokers=1, timeout_s=self._startup_timeout_s)
        self._info = probe_broker(
            kind="kafka",
            host=LOOPBACK,
            port=node.port,
            version=f"Apache Kafka {self.version}",
        )
        return self._info

    @property
    def node(self) -> KafkaNode:
        """The node's process handle (to read its log or kill it).

        :raises RuntimeError: the broker has not been started.
        """
        if self._node is None:
            raise RuntimeError("the Kafka broker has not been started")
        return self._node

    def stop(self) -> None:
        """Stop the JVM by PID; the port and data stay for a later ``start()``."""
        if self._node is not None:
            self._node.stop()
