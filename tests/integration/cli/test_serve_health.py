"""``tierproxy serve``'s HTTP endpoint tells the truth, is not an open door, and an address
it cannot bind stops it with one line.

Against Apache Kafka (and SeaweedFS for the remote tier), the proxy as the real command:

- ``/livez`` is answered by the event loop, with its lag; ``/readyz`` aggregates named checks
  (listeners, broker, and with the remote tier its metadata view and its storage), each
  with a reason, and fails while the broker or the storage is away;
- ``/metrics`` can require basic or bearer credentials (read from a file and from the
  environment) over HTTPS, while the probes stay open;
- a taken metrics port or listener port exits 2 with one line, no traceback.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerInfo, S3Info, SeaweedFS, free_port
from proxy.embedded.ports import LOOPBACK
from proxy.embedded.tierproxy import (
    TierproxyServer,
    proxy_process,
    storage_settings,
    write_config,
)
from tests.certificates import Pki
from tests.conditions import wait_until

pytestmark = [pytest.mark.integration]

CHECK_INTERVAL_MS = 500


def get(
    url: str, *, headers: Mapping[str, str] | None = None, tls: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    """Status and body of a GET (an HTTP error status is an answer too)."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def health(proxy: TierproxyServer, path: str, **options: Any) -> tuple[int, dict[str, Any]]:
    scheme = "https" if options.get("tls") else "http"
    status, body = get(f"{scheme}://{proxy.host}:{proxy.metrics_port}{path}", **options)
    return status, json.loads(body)


def ready(proxy: TierproxyServer) -> bool:
    return health(proxy, "/readyz")[0] == 200


@pytest.fixture
def started(broker: BrokerInfo, tmp_path: Path) -> Iterator[TierproxyServer]:
    proxy = TierproxyServer(
        config=write_config(
            tmp_path / "proxy.toml", {"health.check.interval.ms": CHECK_INTERVAL_MS}
        ),
        log_path=tmp_path / "proxy.log",
        bootstrap=broker.bootstrap,
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def test_livez_and_readyz_of_a_serving_proxy(started: TierproxyServer) -> None:
    status, live = health(started, "/livez")
    assert status == 200, live
    assert live["status"] == "ok"
    assert 0 <= live["loop_answer_s"] < 5
    assert "loop_lag_s" in live
    wait_until(lambda: ready(started), timeout_s=30, what="/readyz answers 200")
    status, readiness = health(started, "/readyz")
    assert readiness["status"] == "ok"
    assert set(readiness["checks"]) == {"listeners", "broker"}
    assert all(check["ok"] for check in readiness["checks"].values()), readiness
    assert started.metric("tierproxy_connections_total") >= 1
    assert get(f"http://{started.host}:{started.metrics_port}/nothing")[0] == 404


def test_readyz_fails_while_no_broker_answers_and_livez_still_answers(tmp_path: Path) -> None:
    nothing_there = free_port()
    proxy = TierproxyServer(
        config=write_config(
            tmp_path / "proxy.toml", {"health.check.interval.ms": CHECK_INTERVAL_MS}
        ),
        log_path=tmp_path / "proxy.log",
        bootstrap=f"{LOOPBACK}:{nothing_there}",
    )
    proxy.process.start()
    try:
        wait_until(lambda: _answers(proxy, "/livez") == 200, timeout_s=60, what="/livez answers")
        wait_until(
            lambda: (
                health(proxy, "/readyz")[1]["checks"]["listeners"]["reason"] != "not started yet"
            ),
            timeout_s=60,
            what="the server has added its checks",
        )
        status, readiness = health(proxy, "/readyz")
        assert status == 503
        assert readiness["status"] == "fail"
        assert not readiness["checks"]["broker"]["ok"]
        assert readiness["checks"]["listeners"]["reason"] == "the brokers are not known yet"
        assert "broker:" in readiness["reason"]
    finally:
        proxy.stop()


def test_readyz_fails_while_the_proxy_is_still_connecting(tmp_path: Path) -> None:
    """A bootstrap address that accepts connections and never answers holds the proxy in
    its first login to the cluster, before its server exists: not ready, though alive."""
    with socket.create_server((LOOPBACK, 0)) as silent:
        proxy = TierproxyServer(
            config=write_config(
                tmp_path / "proxy.toml", {"health.check.interval.ms": CHECK_INTERVAL_MS}
            ),
            log_path=tmp_path / "proxy.log",
            bootstrap=f"{LOOPBACK}:{silent.getsockname()[1]}",
        )
        proxy.process.start()
        try:
            wait_until(
                lambda: _answers(proxy, "/livez") == 200, timeout_s=60, what="/livez answers"
            )
            status, readiness = health(proxy, "/readyz")
            assert status == 503, readiness
            assert readiness["checks"]["listeners"] == {"ok": False, "reason": "not started yet"}
        finally:
            proxy.stop()


def _answers(proxy: TierproxyServer, path: str) -> int | None:
    try:
        return health(proxy, path)[0]
    except OSError:
        return None


def test_readyz_follows_the_remote_storage(
    broker: BrokerInfo, s3: S3Info, s3_bucket: str, seaweedfs: SeaweedFS, tmp_path: Path
) -> None:
    proxy = proxy_process(
        broker,
        tmp_path,
        {
            **storage_settings(s3, s3_bucket, f"__health_{os.getpid()}_{free_port()}"),
            "health.check.interval.ms": CHECK_INTERVAL_MS,
        },
    )
    proxy.start()
    try:
        wait_until(lambda: ready(proxy), timeout_s=60, what="/readyz answers 200")
        checks = health(proxy, "/readyz")[1]["checks"]
        assert set(checks) == {
            "listeners",
            "broker",
            "remote_metadata",
            "remote_storage",
            "remote_objects",
        }
        seaweedfs.stop()
        wait_until(lambda: not ready(proxy), timeout_s=60, what="/readyz fails without S3")
        status, readiness = health(proxy, "/readyz")
        assert status == 503
        assert not readiness["checks"]["remote_storage"]["ok"]
        assert readiness["checks"]["broker"]["ok"]
        assert health(proxy, "/livez")[0] == 200
        seaweedfs.start()
        wait_until(lambda: ready(proxy), timeout_s=60, what="/readyz back to 200 with S3")
    finally:
        proxy.stop()


def test_metrics_over_https_need_credentials_and_probes_do_not(
    broker: BrokerInfo, pki: Pki, tmp_path: Path
) -> None:
    password_file = tmp_path / "metrics-password"
    password_file.write_text("s3cret\n", encoding="utf-8")
    env = {**os.environ, "TIERPROXY_METRICS_BEARER_TOKEN": "token-from-env"}
    proxy = TierproxyServer(
        config=write_config(
            tmp_path / "proxy.toml",
            {
                "metrics.ssl.certificate.location": str(pki.proxy.certificate),
                "metrics.ssl.key.location": str(pki.proxy.key),
                "metrics.basic.auth.username": "prometheus",
                "metrics.basic.auth.password.file": str(password_file),
            },
        ),
        log_path=tmp_path / "proxy.log",
        bootstrap=broker.bootstrap,
        env=env,
    )
    proxy.start()
    tls = ssl.create_default_context(cafile=str(pki.ca))
    url = f"https://{proxy.host}:{proxy.metrics_port}/metrics"
    basic = base64.b64encode(b"prometheus:s3cret").decode()
    wrong = base64.b64encode(b"prometheus:guess").decode()
    try:
        assert get(url, tls=tls)[0] == 401
        assert get(url, tls=tls, headers={"Authorization": f"Basic {wrong}"})[0] == 401
        assert get(url, tls=tls, headers={"Authorization": "Bearer nope"})[0] == 401
        status, body = get(url, tls=tls, headers={"Authorization": f"Basic {basic}"})
        assert status == 200
        assert b"tierproxy_connections_total" in body
        assert get(url, tls=tls, headers={"Authorization": "Bearer token-from-env"})[0] == 200
        assert health(proxy, "/livez", tls=tls)[0] == 200
        with pytest.raises(OSError):
            get(f"http://{proxy.host}:{proxy.metrics_port}/metrics")
        assert "s3cret" not in proxy.process.log_path.read_text(encoding="utf-8")
    finally:
        proxy.stop()


def serve_exit(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.create_server((LOOPBACK, 0)) as holder:
        yield int(holder.getsockname()[1])


def one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_a_taken_metrics_port_exits_2_with_one_line(broker: BrokerInfo, taken_port: int) -> None:
    result = serve_exit(
        "--bootstrap",
        broker.bootstrap,
        "--listen",
        f"{LOOPBACK}:0",
        "--metrics-port",
        str(taken_port),
    )
    line = one_line_failure(result)
    assert line.startswith(f"tierproxy serve: cannot serve metrics on 127.0.0.1:{taken_port}"), line


def test_a_taken_listener_port_exits_2_with_one_line(broker: BrokerInfo, taken_port: int) -> None:
    result = serve_exit("--bootstrap", broker.bootstrap, "--listen", f"{LOOPBACK}:{taken_port}")
    line = one_line_failure(result)
    assert line.startswith(f"tierproxy serve: cannot listen on {LOOPBACK}:{taken_port}"), line
