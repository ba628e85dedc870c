"""Podman as the compose test's container engine, serving the Docker API on a private socket.

Rootful Podman with storage of its own under the cache directory, so the base image and the
layers of earlier builds are kept between runs and nothing else on the machine is touched;
``podman system service --time=0 unix://<socket>`` serves the Docker API that docker-compose
1.29 drives through ``DOCKER_HOST``. Two traits of the sandboxes this runs in are handled here:

* the sandbox refuses to set ``RLIMIT_NOFILE``, so every ``podman run`` fails ("error setting
  rlimit type 7") unless containers.conf says ``default_ulimits = []``: :class:`Podman` writes
  one and points ``CONTAINERS_CONF`` at it;
* there is no systemd, and Podman schedules health checks with systemd timers: without them
  no check ever runs, a container stays "starting" and ``depends_on: service_healthy`` waits
  forever. :class:`HealthChecks` runs ``podman healthcheck run`` for every running container
  of the project that has a check, at that check's own interval, which is what the timers do.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["EngineError", "HealthChecks", "Podman"]

log = logging.getLogger(__name__)

_SERVICE_START_S = 60.0
_SERVICE_STOP_S = 30.0
_COMMAND_TIMEOUT_S = 600.0
_CONTAINERS_CONF = """\
# Written by tests/compose/engine.py. The sandbox refuses to set RLIMIT_NOFILE, so containers
# keep the limits they inherit.
[containers]
default_ulimits = []
"""


class EngineError(RuntimeError):
    """Podman failed; the message quotes its output."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=5)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(slots=True, kw_only=True)
class Podman:
    """One rootful Podman with private storage, and its Docker API service once started."""

    state_dir: Path
    """Storage, run state and network definitions live below it (kept between runs)."""
    _service: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _service_log: IO[bytes] | None = field(default=None, init=False)

    @property
    def socket(self) -> Path:
        return self.state_dir / "podman.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def environment(self) -> dict[str, str]:
        """The environment every Podman process (and docker-compose) runs with."""
        return {**os.environ, "CONTAINERS_CONF": str(self.state_dir / "containers.conf")}

    def argv(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root",
            str(self.state_dir / "storage"),
            "--runroot",
            str(self.state_dir / "run"),
            "--tmpdir",
            str(self.state_dir / "tmp"),
            "--network-config-dir",
            str(self.state_dir / "networks"),
            *args,
        ]

    def run(
        self, *args: str, check: bool = True, timeout_s: float = _COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run one podman command; its output is returned, and quoted if it fails.

        :raises EngineError: it exited non-zero (with ``check``) or timed out.
        """
        try:
            result = subprocess.run(
                self.argv(*args),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=self.environment,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise EngineError(f"podman {' '.join(args)} timed out after {timeout_s} s") from err
        if check and result.returncode != 0:
            raise EngineError(
                f"podman {' '.join(args)} exited {result.returncode}: {result.stderr[-3000:]}"
            )
        return result

    def image_exists(self, reference: str) -> bool:
        return self.run("image", "exists", reference, check=False).returncode == 0

    def start_service(self) -> None:
        """Start the Docker API service and wait until it answers ``/_ping``.

        :raises EngineError: it exited or did not answer within a minute (its log quoted).
        """
        for directory in ("storage", "run", "tmp", "networks"):
            (self.state_dir / directory).mkdir(parents=True, exist_ok=True)
        (self.state_dir / "containers.conf").write_text(_CONTAINERS_CONF)
        self._stop_stale_service()
        self.socket.unlink(missing_ok=True)
        log_path = self.state_dir / "service.log"
        self._service_log = log_path.open("wb")
        self._service = subprocess.Popen(
            self.argv("system", "service", "--time=0", self.docker_host),
            stdout=self._service_log,
            stderr=subprocess.STDOUT,
            env=self.environment,
        )
        deadline = time.monotonic() + _SERVICE_START_S
        while not self._answers():
            if self._service.poll() is not None or time.monotonic() > deadline:
                self.stop_service()
                raise EngineError(
                    f"podman system service did not answer on {self.socket}: "
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)
        self._pid_file.write_text(str(self._service.pid))
        log.info("podman: Docker API on %s (pid %s)", self.socket, self._service.pid)

    @property
    def _pid_file(self) -> Path:
        return self.state_dir / "service.pid"

    def _stop_stale_service(self) -> None:
        """Stop the API service an earlier run started and could not stop (it was killed).

        Only the process its pid file names, and only if that is still this engine's
        service (its command line names this socket).
        """
        try:
            pid = int(self._pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return
        if b"service" in command and self.docker_host.encode() in command:
            log.warning("podman: stopping the API service an earlier run left (pid %s)", pid)
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + _SERVICE_STOP_S
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)

    def _answers(self) -> bool:
        connection = _UnixConnection(self.socket)
        try:
            connection.request("GET", "/_ping")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def stop_service(self) -> None:
        """Stop the API service (SIGTERM, then SIGKILL after 30 s); no-op if not running."""
        service, self._service = self._service, None
        if service is not None:
            if service.poll() is None:
                service.send_signal(signal.SIGTERM)
                try:
                    service.wait(_SERVICE_STOP_S)
                except subprocess.TimeoutExpired:
                    service.kill()
                    service.wait()
            log.info("podman: API service stopped (exit %s)", service.returncode)
        if self._service_log is not None:
            self._service_log.close()
            self._service_log = None
        self.socket.unlink(missing_ok=True)
        self._pid_file.unlink(missing_ok=True)

    def project_containers(self, project: str, *, running_only: bool = False) -> list[str]:
        """IDs of the containers docker-compose made for ``project``."""
        args = ["ps", "--quiet", "--filter", f"label=com.docker.compose.project={project}"]
        if not running_only:
            args.append("--all")
        return self.run(*args).stdout.split()

    def leftover_projects(self) -> set[str]:
        """The compose projects that still have containers or networks in this engine."""
        label = "com.docker.compose.project"
        containers = self.run(
            "ps", "--all", "--filter", f"label={label}", "--format", "json"
        ).stdout
        networks = self.run("network", "ls", "--format", "json").stdout
        return {
            str(labels[label])
            for item in json.loads(containers or "[]") + json.loads(networks or "[]")
            if (labels := item.get("Labels") or item.get("labels")) and label in labels
        }

    def remove_project(self, project: str) -> list[str]:
        """Remove whatever of ``project`` is left (containers, then its networks); what was."""
        left = self.project_containers(project)
        if left:
            self.run("rm", "--force", "--volumes", *left, check=False)
        networks = self.run(
            "network", "ls", "--quiet", "--filter", f"label=com.docker.compose.project={project}"
        ).stdout.split()
        if networks:
            self.run("network", "rm", "--force", *networks, check=False)
        return left + networks

    def health(self, container: str) -> str:
        """The container's health status ("starting", "healthy", "unhealthy"), or "none"."""
        result = self.run("inspect", "--format", "{{json .State}}", container, check=False)
        if result.returncode != 0:
            return "gone"
        state = json.loads(result.stdout)
        health = state.get("Health") or state.get("Healthcheck") or {}
        return str(health.get("Status") or "none")


@dataclass(slots=True, kw_only=True)
class _Check:
    interval_s: float
    due: float


class HealthChecks:
    """Runs the health checks of a project's running containers until closed (see module)."""

    def __init__(self, podman: Podman, project: str, *, scan_s: float = 1.0) -> None:
        self._podman = podman
        self._project = project
        self._scan_s = scan_s
        self._checks: dict[str, _Check | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="healthchecks", daemon=True)

    def __enter__(self) -> HealthChecks:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.wait(self._scan_s):
            try:
                self._round(self._podman.project_containers(self._project, running_only=True))
            except EngineError as err:  # the engine is going away: next round or the end
                log.debug("health checks: %s", err)

    def _round(self, running: Sequence[str]) -> None:
        now = time.monotonic()
        for container in running:
            if container not in self._checks:
                self._checks[container] = self._check_of(container, now)
            check = self._checks[container]
            if check is None or check.due > now:
                continue
            check.due = now + check.interval_s
            self._podman.run("healthcheck", "run", container, check=False, timeout_s=120)

    def _check_of(self, container: str, now: float) -> _Check | None:
        result = self._podman.run(
            "inspect", "--format", "{{json .Config.Healthcheck}}", container, check=False
        )
        with contextlib.suppress(ValueError):
            config = json.loads(result.stdout or "null")
            if config and config.get("Test") and config["Test"][0] != "NONE":
                interval_ns = int(config.get("Interval") or 30_000_000_000)
                return _Check(interval_s=interval_ns / 1e9, due=now)
        return None


@contextlib.contextmanager
def running_service(podman: Podman) -> Iterator[Podman]:
    """The API service for the duration of the block, stopped whatever happens."""
    podman.start_service()
    try:
        yield podman
    finally:
        podman.stop_service()
