"""docker-compose 1.29 on the repository's docker-compose.yml, as one project of the test.

Every command runs with the project's name (unique per run, so a leftover of an earlier run
is never mistaken for this one), ``DOCKER_HOST`` at the engine's socket and the variables the
file reads: ``TIERPROXY_BASE_IMAGE`` (the local base image),
``TIERPROXY_ADVERTISED_HOST=proxy`` and ``TIERPROXY_ADVERTISED_HOST_2=proxy-2`` (the clients
run inside the stack). Nothing else differs from what a user runs. Every command enables the
``integration`` and ``replicas`` profiles; the stack check's steps run as
``docker-compose --profile integration --profile replicas run --rm --no-deps integration
<step>`` (the harness brings the services up itself, in its own order).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.compose.engine import EngineError, Podman

__all__ = ["BOTH_PROXIES_BOOTSTRAP", "PROXIES", "ComposeError", "Stack", "podman_lost_exit_race"]

log = logging.getLogger(__name__)

_COMMAND_TIMEOUT_S = 900.0
_BUILD_TIMEOUT_S = 2400.0
_POLL_S = 1.0
_UP_ATTEMPTS = 3
PROFILES = ("integration", "replicas")
PROXIES = ("proxy", "proxy-2")
"""The proxy services: the proxy and the ``replicas`` profile's second instance."""
BOTH_PROXIES_BOOTSTRAP = "proxy:19092,proxy-2:29092"
"""The proxy and the ``replicas`` profile's second one as the stack's clients reach them."""


class ComposeError(AssertionError):
    """A docker-compose command failed; the message quotes what it printed."""


_EXIT_RACE = re.compile(r"read /proc/\d+/cgroup: no such process")


def podman_lost_exit_race(output: str) -> bool:
    """Whether Podman 4.3 answered a container's start with an error because the process had
    exited before Podman read its cgroup (the bucket job can finish within milliseconds).
    The container is left created or exited; ``up`` again starts it (the job is idempotent)."""
    return _EXIT_RACE.search(output) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    root: Path
    project: str
    podman: Podman
    base_image: str
    report: Callable[[str], None] = field(default=log.info)
    """Where a line per step, restart and start goes (the terminal, in the test)."""

    @property
    def environment(self) -> dict[str, str]:
        env = {
            **self.podman.environment,
            "DOCKER_HOST": self.podman.docker_host,
            "COMPOSE_PROJECT_NAME": self.project,
            "TIERPROXY_BASE_IMAGE": self.base_image,
            "TIERPROXY_ADVERTISED_HOST": "proxy",
            "TIERPROXY_ADVERTISED_HOST_2": "proxy-2",
        }
        # docker-compose builds through the docker CLI where it is installed; without it,
        # through its own client library. Either way the engine is the one at DOCKER_HOST.
        env.setdefault("COMPOSE_DOCKER_CLI_BUILD", "1" if shutil.which("docker") else "0")
        return env

    def argv(self, *args: str) -> list[str]:
        return [
            "docker-compose",
            "--project-directory",
            str(self.root),
            "--file",
            str(self.root / "docker-compose.yml"),
            *(option for profile in PROFILES for option in ("--profile", profile)),
            *args,
        ]

    def compose(
        self, *args: str, timeout_s: float = _COMMAND_TIMEOUT_S, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run one docker-compose command to its end.

        :raises ComposeError: it failed (with ``check``) or timed out; its output quoted.
        """
        started = time.monotonic()
        try:
            result = subprocess.run(
                self.argv(*args),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=self.environment,
                cwd=self.root,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise ComposeError(
                f"docker-compose {' '.join(args)} did not finish in {timeout_s:.0f} s:\n"
                f"{_text(err.stdout)}{_text(err.stderr)}"
            ) from err
        log.info(
            "docker-compose %s: exit %s in %.1f s\n%s%s",
            " ".join(args),
            result.returncode,
            time.monotonic() - started,
            result.stdout[-4000:],
            result.stderr[-4000:],
        )
        if check and result.returncode != 0:
            raise ComposeError(
                f"docker-compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
        return result

    def build(self, *services: str) -> None:
        """Build the services' images one after the other: concurrent builds of the shared
        stages duplicate their layers, and Podman's layer cache then misses at random."""
        self.compose("build", *services, timeout_s=_BUILD_TIMEOUT_S)

    def up(self, *services: str, dependencies: bool = True) -> None:
        """Start ``services``, and first what they depend on in the file's health-checked
        order unless ``dependencies`` is false (they run already).

        ``up`` runs again, at most ``_UP_ATTEMPTS`` times in all, when Podman lost the race
        with a container that exited as it started (:func:`podman_lost_exit_race`): ``up``
        leaves what runs alone and starts the rest.
        """
        started = time.monotonic()
        argv = ("up", "--detach", "--no-build", *([] if dependencies else ["--no-deps"]))
        for attempt in range(1, _UP_ATTEMPTS + 1):
            try:
                self.compose(*argv, *services)
                break
            except ComposeError as err:
                if attempt == _UP_ATTEMPTS or not podman_lost_exit_race(str(err)):
                    raise
                self.report(f"up again: Podman lost a container's exit ({err})")
        self.report(f"started {', '.join(services)} ({time.monotonic() - started:.0f} s)")

    def container(self, service: str) -> str:
        ids = self.compose("ps", "--quiet", service).stdout.split()
        if len(ids) != 1:
            raise ComposeError(f"service {service} has containers {ids}, not one")
        return ids[0]

    def wait_healthy(self, service: str, *, timeout_s: float) -> float:
        """Seconds until the service's container is healthy.

        :raises ComposeError: it was not within ``timeout_s``, or became unhealthy or went
            away (its log quoted).
        """
        container = self.container(service)
        started = time.monotonic()
        while (status := self.podman.health(container)) != "healthy":
            if status in ("unhealthy", "gone") or time.monotonic() - started > timeout_s:
                raise ComposeError(
                    f"service {service} is {status} after {time.monotonic() - started:.0f} s; "
                    f"its log:\n{self.logs(service)}"
                )
            time.sleep(_POLL_S)
        return time.monotonic() - started

    def restart(self, service: str) -> None:
        self._timed("restart", service, "restarted")

    def stop(self, service: str) -> None:
        """Stop the service's container as ``docker-compose stop`` does: SIGTERM, then
        SIGKILL after its ``stop_grace_period``."""
        self._timed("stop", service, "stopped")

    def start(self, service: str) -> None:
        self._timed("start", service, "started")

    def _timed(self, command: str, service: str, done: str) -> None:
        """``docker-compose <command> <service>``, reported with its duration."""
        started = time.monotonic()
        self.compose(command, service)
        self.report(f"{service} {done} ({time.monotonic() - started:.0f} s)")

    def logs(self, *services: str, tail: int = 60) -> str:
        result = self.compose("logs", "--no-color", f"--tail={tail}", *services, check=False)
        return result.stdout[-8000:]

    def step(
        self,
        *args: str,
        environment: Mapping[str, str] | None = None,
        timeout_s: float = _COMMAND_TIMEOUT_S,
    ) -> str:
        """Run one step of the stack check (with ``environment`` set in its container on top
        of the service's); what it printed.

        :raises ComposeError: the step failed (its output and the services' logs quoted).
        """
        started = time.monotonic()
        result = self.compose(*_run_step(args, environment or {}), timeout_s=timeout_s, check=False)
        if result.returncode != 0:
            raise ComposeError(
                f"stack check step {' '.join(args)} failed (exit {result.returncode}):\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}\n"
                f"--- services ---\n{self.logs(*PROXIES, 'tier', 'kafka')}"
            )
        said = result.stdout.strip().splitlines()
        self.report(f"{said[-1] if said else args[0]} ({time.monotonic() - started:.0f} s)")
        return result.stdout

    def start_step(
        self, *args: str, environment: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start a step without waiting for it (its output line by line on ``stdout``)."""
        return subprocess.Popen(
            self.argv(*_run_step(args, environment or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.environment,
            cwd=self.root,
        )

    def down(self) -> list[str]:
        """Remove the project's containers and networks, whatever state they are in; what the
        engine still had of it afterwards (removed by force)."""
        try:
            # Nothing of the test's data is kept: no grace for a clean shutdown.
            self.compose("down", "--volumes", "--remove-orphans", "--timeout", "3")
        except ComposeError as err:
            log.warning("docker-compose down failed: %s", err)
        try:
            return self.podman.remove_project(self.project)
        except EngineError as err:
            log.warning("removing what is left of %s failed: %s", self.project, err)
            return []


def _run_step(args: Sequence[str], environment: Mapping[str, str]) -> list[str]:
    """The docker-compose arguments that run one step of the stack check."""
    variables = [option for item in environment.items() for option in ("-e", "=".join(item))]
    return ["run", "--rm", "--no-deps", "-T", *variables, "integration", *args]


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")[-4000:]
    return (output or "")[-4000:]
