"""``tierproxy serve`` as a managed subprocess, for the integration tests and ``tierproxy demo``.

The proxy runs as the real command (its own process and core, uvloop, logs to a file), is ready
once it answers ApiVersions, and is stopped by PID. It keeps its ports across a stop and a start,
so a test can restart it in place; :meth:`TierproxyServer.metric` reads its Prometheus endpoint.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from proxy.embedded.ports import LOOPBACK, free_port
from proxy.embedded.probe import api_versions
from proxy.embedded.process import ManagedProcess

__all__ = ["TierproxyServer", "write_config"]

_DEFAULT_START_TIMEOUT_S = 60.0


class TierproxyServer:
    """One ``tierproxy serve`` on loopback ports; not started until :meth:`start`.

    :param config: the TOML file passed with ``--config``.
    :param bootstrap: the upstream broker (``--bootstrap``); None leaves it to ``config``.
    :param port: the listening port, to restart a proxy on the port clients already know;
        a free one when None.
    :param extra_args: more ``serve`` flags, after ours (so later ones win).
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
    ) -> None:
        self.host = LOOPBACK
        self.port = port if port is not None else free_port()
        self.metrics_port = free_port()
        self._start_timeout_s = start_timeout_s
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
                f"{self.host}:{self.port}",
                "--metrics-port",
                str(self.metrics_port),
                *extra_args,
            ],
            log_path=log_path,
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
            lambda: bool(api_versions(self.host, self.port)), timeout_s=self._start_timeout_s
        )

    def stop(self) -> None:
        """Stop the proxy by PID; idempotent."""
        self.process.stop()

    def metric(self, name: str) -> float:
        """Sum of every series of ``name`` on the proxy's Prometheus endpoint.

        :raises OSError: the endpoint did not answer.
        """
        url = f"http://{self.host}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith((f"{name}{{", f"{name} "))
        )


def write_config(path: Path, settings: Mapping[str, Any]) -> Path:
    """Write flat ``settings`` (Kafka's dotted names) as a TOML config file; returns ``path``."""
    path.write_text(
        "".join(f"{key} = {_toml(value)}\n" for key, value in settings.items()), encoding="utf-8"
    )
    return path


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))
