"""The GCS backend's credentials from the metadata server, as on GKE with workload identity.

GKE's workload identity (and Compute Engine) hands tokens out through the metadata server;
google-auth's Application Default Credentials find it (``GCE_METADATA_HOST``). Here a small
metadata server on loopback answers as GKE's does, and ``tierproxy``'s start-up check runs in
a process of its own (google-auth reads those variables when it is imported), with no key
file and no gcloud login: it must name the metadata server as its source and send the token
it got to the storage endpoint (a recorder standing in for GCS; fake-gcs-server accepts any
token, and so proves nothing about it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

TOKEN = "ya29.workload-identity-test"
ACCOUNT = "tierproxy@project.iam.gserviceaccount.com"


class _Metadata(BaseHTTPRequestHandler):
    """GKE's metadata server, the parts google-auth asks."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.headers.get("Metadata-Flavor") != "Google":
            self._answer(403, b"missing Metadata-Flavor")
        elif path in ("", "/"):
            self._answer(200, b"")
        elif path == "/computeMetadata/v1/project/project-id":
            self._answer(200, b"tierproxy-test")
        elif path == "/computeMetadata/v1/instance/service-accounts/default/":
            body = {"email": ACCOUNT, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
            self._answer(200, json.dumps(body).encode(), "application/json")
        elif path == "/computeMetadata/v1/instance/service-accounts/default/token":
            token = {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}
            self._answer(200, json.dumps(token).encode(), "application/json")
        else:
            self._answer(404, b"not found")

    def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Storage(BaseHTTPRequestHandler):
    """A GCS listing endpoint that records the Authorization header it is sent."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def metadata_port() -> Iterator[int]:
    yield from _serving(_Metadata)


@pytest.fixture
def storage_port() -> Iterator[int]:
    _Storage.seen = []
    yield from _serving(_Storage)


CHECK = """
import asyncio, json, sys
from storage.config import from_settings
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage
config = from_settings(RemoteStorageConfig, json.loads(sys.argv[1]))
check = asyncio.run(check_remote_storage(config))
print(json.dumps({"credentials": check.credentials, "problem": check.problem}))
"""


def checked_in_a_clean_process(
    settings: dict[str, object], home: Path, metadata_port: int
) -> tuple[dict[str, Any], str]:
    """What :data:`CHECK` says of ``settings`` in a process with nothing of this machine's
    Google Cloud login (``home`` is its home) and the metadata server at ``metadata_port``;
    and its stderr."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "CLOUDSDK_CONFIG": str(home / "gcloud"),  # no gcloud login to fall back on
        "GCE_METADATA_HOST": f"127.0.0.1:{metadata_port}",
        "GCE_METADATA_IP": f"127.0.0.1:{metadata_port}",
        "PYTHONPATH": str(Path(__file__).parents[3]),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(settings)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    check: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return check, done.stderr


def test_gcs_takes_its_token_from_the_metadata_server(
    metadata_port: int, storage_port: int, tmp_path: Path
) -> None:
    settings = {
        "remote.log.storage.backend": "gcs",
        "remote.log.storage.gcs.bucket": "tiered",
        "remote.log.storage.gcs.endpoint": f"http://127.0.0.1:{storage_port}",
        "remote.log.storage.retry.max.attempts": 1,
    }
    check, stderr = checked_in_a_clean_process(settings, tmp_path, metadata_port)
    assert check["problem"] is None, (check, stderr[-2000:])
    assert check["credentials"] == (
        "metadata server (GKE workload identity, Compute Engine) from application default "
        f"credentials ({ACCOUNT})"
    )
    assert _Storage.seen and all(seen == f"Bearer {TOKEN}" for seen in _Storage.seen)


def test_gcs_without_any_credentials_says_where_it_looked(tmp_path: Path) -> None:
    settings = {
        "remote.log.storage.backend": "gcs",
        "remote.log.storage.gcs.bucket": "tiered",
        "remote.log.storage.gcs.endpoint": "http://127.0.0.1:9",
        "remote.log.storage.retry.max.attempts": 1,
    }
    # Nothing listens on port 9: no metadata server.
    check, _stderr = checked_in_a_clean_process(settings, tmp_path, 9)
    assert "no Google Cloud credentials" in check["problem"], check
