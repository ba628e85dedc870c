"""Azurite and fake-gcs-server as embedded servers: the Azure and GCS backends' tests.

Each runs from its pinned install (:mod:`proxy.embedded.emulators`) on a free loopback port
with its data in its work directory, is ready once its REST API answers, and is stopped by
PID. :class:`AzureInfo` and :class:`GcsInfo` carry what a test needs to reach it, including
the ``remote.log.storage.*`` settings of a container or bucket in it.

Azurite serves the blob service only (``azurite-blob``), with its well-known development
account (``devstoreaccount1``) and Shared Key; with a certificate it serves HTTPS and also
accepts OAuth bearer tokens (``--oauth basic``: any token for the storage audience, its
signature unchecked), which is how the workload-identity path is tested. fake-gcs-server
serves the GCS JSON API over HTTP, without authentication.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from proxy.embedded.emulators import (
    AZURITE,
    FAKE_GCS_SERVER,
    Emulator,
    EmulatorError,
    ensure_emulator,
)
from proxy.embedded.ports import LOOPBACK, free_port
from proxy.embedded.process import ManagedProcess, ServerStartError
from proxy.embedded.server import EmbeddedServer, retry_on_early_exit

__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "AzureInfo", "Azurite", "FakeGcs", "GcsInfo"]

AZURITE_ACCOUNT: Final = "devstoreaccount1"
AZURITE_KEY: Final = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's well-known development account and its key (public, in Azurite's docs)."""
_STARTUP_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AzureInfo:
    """A running Azurite blob service."""

    endpoint: str
    """``http(s)://127.0.0.1:PORT/devstoreaccount1``: the account's blob service URL."""
    account: str
    key: str

    def settings(self, container: str) -> dict[str, Any]:
        """``remote.log.storage.*`` settings of ``container`` with the Shared Key."""
        return {
            "remote.log.storage.backend": "azure",
            "remote.log.storage.azure.container": container,
            "remote.log.storage.azure.account.name": self.account,
            "remote.log.storage.azure.account.key": self.key,
            "remote.log.storage.azure.endpoint": self.endpoint,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GcsInfo:
    """A running fake-gcs-server."""

    endpoint: str

    def settings(self, bucket: str) -> dict[str, Any]:
        """``remote.log.storage.*`` settings of ``bucket``, without credentials."""
        return {
            "remote.log.storage.backend": "gcs",
            "remote.log.storage.gcs.bucket": bucket,
            "remote.log.storage.gcs.endpoint": self.endpoint,
            "remote.log.storage.gcs.credentials.anonymous": True,
        }


class Azurite(EmbeddedServer):
    """Azurite's blob service; HTTPS with OAuth when given a certificate and its key."""

    name = "azurite"

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
    ) -> None:
        super().__init__(work_dir)
        self._tls = (cert, key) if cert is not None and key is not None else None
        self._port: int | None = None
        self.startup_seconds = 0.0

    @property
    def info(self) -> AzureInfo:
        """:raises RuntimeError: the server has never been started."""
        if self._port is None:
            raise RuntimeError("Azurite has not been started")
        scheme = "https" if self._tls else "http"
        return AzureInfo(
            endpoint=f"{scheme}://{LOOPBACK}:{self._port}/{AZURITE_ACCOUNT}",
            account=AZURITE_ACCOUNT,
            key=AZURITE_KEY,
        )

    def start(self) -> AzureInfo:
        """Start and wait until the blob service answers.

        :raises ServerStartError: Azurite is missing or was not ready in time.
        """
        if self.running:
            return self.info
        binary = _installed(AZURITE)
        return retry_on_early_exit(lambda: self._start_once(binary, free_port()))

    def _start_once(self, binary: Path, port: int) -> AzureInfo:
        argv = [
            str(binary),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(port),
            "--location",
            str(self.work_dir / "data"),
            "--silent",
            "--skipApiVersionCheck",
            "--disableTelemetry",
        ]
        if self._tls is not None:
            argv += ["--cert", str(self._tls[0]), "--key", str(self._tls[1]), "--oauth", "basic"]
        self._process = ManagedProcess("azurite", argv, log_path=self.log_path, cwd=self.work_dir)
        self._port = port
        self._process.start()
        self.startup_seconds = self._process.wait_ready(
            lambda: _answers(port, tls=self._tls is not None), timeout_s=_STARTUP_TIMEOUT_S
        )
        return self.info

    def create_container(self, name: str) -> None:
        """Create container ``name`` (Shared Key, through the product's own signing)."""
        _azure_request(self.info, "PUT", f"/{name}?restype=container")

    def delete_container(self, name: str) -> None:
        """Delete container ``name`` and its blobs."""
        _azure_request(self.info, "DELETE", f"/{name}?restype=container")


class FakeGcs(EmbeddedServer):
    """fake-gcs-server over HTTP, objects kept in its work directory."""

    name = "fake-gcs-server"

    def __init__(self, *, work_dir: Path | None = None) -> None:
        super().__init__(work_dir)
        self._port: int | None = None
        self.startup_seconds = 0.0

    @property
    def info(self) -> GcsInfo:
        """:raises RuntimeError: the server has never been started."""
        if self._port is None:
            raise RuntimeError("fake-gcs-server has not been started")
        return GcsInfo(endpoint=f"http://{LOOPBACK}:{self._port}")

    def start(self) -> GcsInfo:
        """Start and wait until the JSON API answers.

        :raises ServerStartError: fake-gcs-server is missing or was not ready in time.
        """
        if self.running:
            return self.info
        binary = _installed(FAKE_GCS_SERVER)
        return retry_on_early_exit(lambda: self._start_once(binary, free_port()))

    def _start_once(self, binary: Path, port: int) -> GcsInfo:
        root = self.work_dir / "data"
        argv = [
            str(binary),
            "-scheme",
            "http",
            "-host",
            LOOPBACK,
            "-port",
            str(port),
            "-public-host",
            f"{LOOPBACK}:{port}",
            "-external-url",
            f"http://{LOOPBACK}:{port}",
            "-backend",
            "filesystem",
            "-filesystem-root",
            str(root),
            "-log-level",
            "warn",
        ]
        self._process = ManagedProcess(
            "fake-gcs-server", argv, log_path=self.log_path, cwd=self.work_dir
        )
        self._port = port
        self._process.start()
        self.startup_seconds = self._process.wait_ready(
            lambda: _answers(port, tls=False, path="/storage/v1/b"), timeout_s=_STARTUP_TIMEOUT_S
        )
        return self.info

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name``."""
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.info.endpoint}/storage/v1/b",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()


def _installed(emulator: Emulator) -> Path:
    try:
        return ensure_emulator(emulator)
    except EmulatorError as err:
        raise ServerStartError(str(err)) from err


def _answers(port: int, *, tls: bool, path: str = "/") -> bool:
    """Whether an HTTP server answers on ``port`` (any status)."""
    if tls:
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            LOOPBACK, port, timeout=2, context=ssl._create_unverified_context()
        )
    else:
        connection = http.client.HTTPConnection(LOOPBACK, port, timeout=2)
    try:
        connection.request("GET", path)
        connection.getresponse().read()
        return True
    finally:
        connection.close()


def _azure_request(info: AzureInfo, method: str, path: str) -> None:
    """One Shared-Key request to the account (container set-up for the tests)."""
    import base64  # noqa: PLC0415
    from email.utils import formatdate  # noqa: PLC0415

    from storage.rsm.azure_auth import API_VERSION, shared_key_signature  # noqa: PLC0415

    url = f"{info.endpoint}{path}"
    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": API_VERSION}
    if method == "PUT":
        # urllib would add a form Content-Type to a body: sign the one sent.
        headers["Content-Length"] = "0"
        headers["Content-Type"] = "application/octet-stream"
    headers["Authorization"] = shared_key_signature(
        account=info.account,
        key=base64.b64decode(info.key),
        method=method,
        url=url,
        headers=headers,
    )
    request = urllib.request.Request(
        url, method=method, headers=headers, data=b"" if method == "PUT" else None
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()
