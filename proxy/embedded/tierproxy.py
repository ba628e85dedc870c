"""``tierproxy serve`` as a managed subprocess, for the integration tests and ``tierproxy demo``.

The proxy runs as the real command (its own process and core, uvloop, logs to a file), is ready
once it answers ApiVersions, and is stopped by PID. It keeps its ports across a stop and a start,
so a test can restart it in place; :meth:`TierproxyServer.metric` reads its Prometheus endpoint.
:func:`proxy_process` and :func:`storage_settings` give the tiered suites and the benchmarks
one proxy with the remote tier on embedded S3.
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from proxy.embedded.info import BrokerInfo, S3Info
from proxy.embedded.ports import LOOPBACK, free_port
from proxy.embedded.probe import api_versions
from proxy.embedded.process import ManagedProcess

__all__ = ["TierproxyServer", "proxy_process", "storage_settings", "write_config"]

_DEFAULT_START_TIMEOUT_S = 60.0


class TierproxyServer:
    """One ``tierproxy serve`` on loopback ports; not started until :meth:`start`.

    :param config: the TOML file passed with ``--config``.
    :param bootstrap: the upstream broker (``--bootstrap``); None leaves it to ``config``.
    :param port: the listening port, to restart a proxy on the port clients already know;
        a free one when None.
    :param extra_args: more ``serve`` flags, after ours (so later ones win).
    :param listener: the listener's security protocol; for SSL and SASL_SSL the config must
        name the proxy's certificate, and ``client_tls`` is how the readiness probe trusts it.
    :param env: the process's environment (benchmarks run another checkout's proxy with its
        ``PYTHONPATH``); this process's when None.
    :param workers: ``--workers``; 1 (one process, no supervisor) unless a test is about
        workers.
    """

    def __init__(
        self,
        *,
        config: Path,
        log_path: Path,
        bootstrap: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = _DEFAULT_START_TIMEOUT_S,
        listener: str = "PLAINTEXT",
        client_tls: ssl.SSLContext | None = None,
        env: Mapping[str, str] | None = None,
        workers: int = 1,
    ) -> None:
        self.host = LOOPBACK
        self.port = port if port is not None else free_port()
        self.metrics_port = free_port()
        self._start_timeout_s = start_timeout_s
        self._client_tls = client_tls
        scheme = "" if listener == "PLAINTEXT" else f"{listener}://"
        upstream = ["--bootstrap", bootstrap] if bootstrap is not None else []
        self.process = ManagedProcess(
            "tierproxy serve",
            [
                sys.executable,
                "-m",
                "proxy.cli",
                "serve",
                "--config",
                str(config),
                *upstream,
                "--listen",
                f"{scheme}{self.host}:{self.port}",
                "--metrics-port",
                str(self.metrics_port),
                "--workers",
                str(workers),
                *extra_args,
            ],
            log_path=log_path,
            env=env,
        )

    @property
    def bootstrap(self) -> str:
        """What clients dial."""
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        """Launch the proxy and wait until it answers ApiVersions.

        :raises ServerStartError: it exited or did not answer within the start timeout.
        """
        self.process.start()
        self.process.wait_ready(
            lambda: bool(api_versions(self.host, self.port, tls=self._client_tls)),
            timeout_s=self._start_timeout_s,
        )

    def stop(self) -> None:
        """Stop the proxy by PID; idempotent."""
        self.process.stop()

    def kill(self) -> None:
        """SIGKILL the proxy and every worker it started (its process group), as a machine
        or container that dies would; idempotent."""
        self.process.kill()

    def health(self, resource: str) -> tuple[int, dict[str, Any]]:
        """``/livez`` or ``/readyz``: the HTTP status and the JSON body.

        :raises OSError: the endpoint did not answer.
        """
        url = f"http://{self.host}:{self.metrics_port}{resource}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return int(answer.status), dict(json.loads(answer.read()))
        except urllib.error.HTTPError as err:
            with err:
                return int(err.code), dict(json.loads(err.read()))

    def metric(self, name: str, **labels: str) -> float:
        """Sum of every series of ``name`` on the proxy's Prometheus endpoint (only those
        with these ``labels``, if any are given).

        :raises OSError: the endpoint did not answer.
        """
        url = f"http://{self.host}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        wanted = [f'{key}="{value}"' for key, value in labels.items()]
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith((f"{name}{{", f"{name} "))
            and all(label in line.rsplit(" ", 1)[0] for label in wanted)
        )


def write_config(path: Path, settings: Mapping[str, Any]) -> Path:
    """Write flat ``settings`` (Kafka's dotted names) as a TOML config file; returns ``path``.

    A list of mappings (``remote.fetch.client.quotas``) is written as an array of inline
    tables."""
    path.write_text(
        "".join(f"{key} = {_toml(value)}\n" for key, value in settings.items()), encoding="utf-8"
    )
    return path


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Mapping):  # an inline table, keys quoted (they hold dots)
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(str(value))


def storage_settings(s3: S3Info, bucket: str, metadata_topic: str) -> dict[str, Any]:
    """Remote storage and metadata settings shared by the pipeline and the proxy."""
    return {
        "remote.log.storage.backend": "s3",
        "remote.log.storage.s3.bucket": bucket,
        "remote.log.storage.s3.endpoint": s3.endpoint_url,
        "remote.log.storage.s3.region": s3.region,
        "remote.log.storage.s3.access.key.id": s3.access_key,
        "remote.log.storage.s3.secret.access.key": s3.secret_key,
        "remote.log.storage.s3.path.style.access": True,
        "remote.log.storage.retry.max.attempts": 2,
        "remote.log.storage.s3.connect.timeout.ms": 1000,
        "remote.log.storage.s3.read.timeout.ms": 2000,
        "remote.log.metadata.topic.name": metadata_topic,
        "remote.log.metadata.topic.partitions": 3,
    }


def proxy_process(
    broker: BrokerInfo,
    log_dir: Path,
    settings: Mapping[str, Any],
    *,
    port: int | None = None,
    listener: str = "PLAINTEXT",
    client_tls: ssl.SSLContext | None = None,
    env: Mapping[str, str] | None = None,
    workers: int = 1,
) -> TierproxyServer:
    """A (not yet started) ``tierproxy serve`` with the remote tier and ``settings``
    (``listener``, ``client_tls``, ``env`` and ``workers`` as in :class:`TierproxyServer`)."""
    port = port or free_port()
    config = write_config(
        log_dir / f"tierproxy-{port}.toml",
        {"shutdown.timeout.ms": 2000, "remote.log.storage.system.enable": True, **settings},
    )
    return TierproxyServer(
        config=config,
        log_path=log_dir / f"tierproxy-{port}.log",
        bootstrap=broker.bootstrap,
        port=port,
        listener=listener,
        client_tls=client_tls,
        env=env,
        workers=workers,
    )
