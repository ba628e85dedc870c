"""Apache Kafka as a single-node KRaft broker, started from an unpacked release in ``KAFKA_HOME``.

Works with Kafka 3.3 to 4.x: the quorum is the static ``controller.quorum.voters`` form, which
every KRaft release accepts, so storage is formatted with ``kafka-storage.sh format -t <id> -c
server.properties`` on every version (``--standalone`` belongs to the dynamic form and is not
needed). The cluster id is generated here as Kafka's ``Uuid.toString()`` (URL-safe base64 of
16 random bytes, unpadded), which saves starting a JVM for ``kafka-storage.sh random-uuid``.

Settings beyond a plain single node, all for tests: retention is checked every second (and the
first check is not delayed by the internal ``log.initial.task.delay.ms``, 30 s by default),
segments are 1 MiB (the smallest Kafka 4 accepts), deleted segment files go after 1 s, and the
internal topics have replication factor 1 and few partitions. Unknown settings only draw a
warning from older releases. The JVM gets a 512 MiB heap unless ``KAFKA_HEAP_OPTS`` is set.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import uuid
from pathlib import Path

from proxy.embedded.info import BrokerInfo, probe_broker
from proxy.embedded.ports import LOOPBACK, free_ports
from proxy.embedded.probe import metadata_brokers
from proxy.embedded.process import ManagedProcess, ServerStartError, environment
from proxy.embedded.server import EmbeddedServer, retry_on_early_exit

__all__ = ["KafkaBroker", "kafka_version"]

_STARTUP_TIMEOUT_S = 120.0
_FORMAT_TIMEOUT_S = 120.0
_NODE_ID = 1
_SEGMENT_BYTES = 1024 * 1024
_JAR = re.compile(r"^kafka_[\d.]+-(\d+\.\d+\.\d+)\.jar$")


def kafka_version(kafka_home: Path) -> str:
    """The release in ``kafka_home`` (from ``libs/kafka_<scala>-<version>.jar``), or "unknown"."""
    for jar in sorted((kafka_home / "libs").glob("kafka_*.jar")):
        match = _JAR.match(jar.name)
        if match:
            return match.group(1)
    return "unknown"


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class KafkaBroker(EmbeddedServer):
    """A combined broker+controller KRaft node on loopback ports, data in the work directory."""

    name = "kafka"

    def __init__(
        self,
        kafka_home: Path,
        *,
        work_dir: Path | None = None,
        startup_timeout_s: float = _STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(work_dir)
        self.kafka_home = kafka_home
        self._startup_timeout_s = startup_timeout_s
        self._info: BrokerInfo | None = None
        self.startup_seconds = 0.0

    @property
    def info(self) -> BrokerInfo:
        """The running broker's address and capabilities.

        :raises RuntimeError: the broker has not been started.
        """
        if self._info is None:
            raise RuntimeError("the Kafka broker has not been started")
        return self._info

    def start(self) -> BrokerInfo:
        """Format storage, start the broker and wait until Metadata lists it.

        :raises ServerStartError: ``KAFKA_HOME`` has no Kafka scripts, formatting failed, or the
            broker did not become ready.
        """
        if self.running:
            return self.info
        start_script = self.kafka_home / "bin" / "kafka-server-start.sh"
        if not start_script.is_file():
            raise ServerStartError(f"KAFKA_HOME={self.kafka_home} has no bin/kafka-server-start.sh")
        return retry_on_early_exit(self._start_once)

    def _start_once(self) -> BrokerInfo:
        port, controller_port = free_ports(2)
        data_dir = self.work_dir / f"data-{port}"
        properties = self.work_dir / f"server-{port}.properties"
        properties.write_text(self._properties(port, controller_port, data_dir))
        env = environment(
            LOG_DIR=str(self.work_dir / "logs"),
            KAFKA_HEAP_OPTS=os.environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx512m"),
        )
        self._format(properties, env)
        self._process = ManagedProcess(
            "kafka",
            [str(self.kafka_home / "bin" / "kafka-server-start.sh"), str(properties)],
            log_path=self.log_path,
            env=env,
            cwd=self.work_dir,
            stop_grace_s=15.0,
        )
        self._process.start()
        self.startup_seconds = self._process.wait_ready(
            lambda: bool(metadata_brokers(LOOPBACK, port, timeout_s=2.0)),
            timeout_s=self._startup_timeout_s,
        )
        self._info = probe_broker(
            kind="kafka", host=LOOPBACK, port=port, version=f"Apache Kafka {self.version}"
        )
        return self._info

    @property
    def version(self) -> str:
        return kafka_version(self.kafka_home)

    def _format(self, properties: Path, env: dict[str, str]) -> None:
        argv = [
            str(self.kafka_home / "bin" / "kafka-storage.sh"),
            "format",
            "-t",
            _cluster_id(),
            "-c",
            str(properties),
        ]
        try:
            result = subprocess.run(
                argv,
                env=env,
                capture_output=True,
                text=True,
                timeout=_FORMAT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ServerStartError(f"kafka-storage.sh format failed: {err}") from err
        if result.returncode != 0:  # checked here to quote the tool's own output
            raise ServerStartError(
                f"kafka-storage.sh format exited with {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )

    @staticmethod
    def _properties(port: int, controller_port: int, data_dir: Path) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(_NODE_ID),
            "controller.quorum.voters": f"{_NODE_ID}@{LOOPBACK}:{controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.check.interval.ms": "1000",
            "log.initial.task.delay.ms": "100",
            "log.segment.bytes": str(_SEGMENT_BYTES),
            "log.segment.delete.delay.ms": "1000",
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())
