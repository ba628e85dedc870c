"""The compose stack as a fixture: engine, base image, images, services up; torn down after.

The ``stack`` fixture (one per module) takes the machine-wide lock of the compose test (one
stack at a time: the published ports and the engine's storage are the machine's), starts
Podman's Docker API service, makes the base image with debootstrap if Podman does not have it
yet, adds the wheels and Kafka's jars the builds need to it, builds the images with
docker-compose and starts kafka, s3, the bucket job, the proxy, the ``replicas`` profile's
second proxy and the pipeline in the file's health-checked order. Afterwards it removes the
project's containers and network and stops the API service, whatever happened; the images
stay, as the cache of the next run.
Each phase's time is written to the terminal.

A missing tool or the wrong user fails the tests: ``make test`` installs podman,
docker-compose and debootstrap with apt and runs as root.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.compose.base_image import debian_image, with_downloads
from tests.compose.engine import HealthChecks, Podman, running_service
from tests.compose.prefetch import kafka_jars, wheels
from tests.compose.stack import PROXIES, Stack

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("podman", "docker-compose", "debootstrap")
LOCK_WAIT_S = 3600.0
HEALTHY_TIMEOUT_S = 300.0
BUILT_SERVICES = ("kafka", "s3", "proxy", "integration")
"""One service per image: the others share these images."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tierproxy/compose`` (``~/.cache/tierproxy/compose`` by default)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tierproxy" / "compose"


def _require_engine() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"the compose test needs {', '.join(missing)}: `make apt-tools` installs them "
            "(apt-get install podman docker-compose debootstrap)",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail(
            "the compose test runs rootful Podman and debootstrap: run it as root", pytrace=False
        )


@contextlib.contextmanager
def _machine_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another compose test held {path} for {LOCK_WAIT_S:.0f} s")
                time.sleep(5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _reporter(config: pytest.Config) -> Callable[[str], None]:
    """Progress lines on the terminal as they happen (past pytest's output capture)."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(message: str) -> None:
        log.info(message)
        if terminal is None:
            return
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            terminal.write_line(f"compose: {message}")

    return say


@contextlib.contextmanager
def _phase(say: Callable[[str], None], what: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    say(f"{what} ({time.monotonic() - started:.0f} s)")


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    _require_engine()
    say = _reporter(request.config)
    cache = cache_dir()
    with (
        _machine_lock(cache / "lock"),
        running_service(Podman(state_dir=cache / "podman")) as podman,
    ):
        # Under the lock no other run is going on: anything of another project was left by a
        # run killed before its teardown.
        for leftover in podman.leftover_projects():
            say(f"removing {leftover}, left by an earlier run: {podman.remove_project(leftover)}")
        with _phase(say, "Debian image ready"):
            debian, made = debian_image(
                podman, packages_file=ROOT / "docker" / "base-packages.txt", cache_dir=cache
            )
        say(f"Debian image {debian} ({'made with debootstrap' if made else 'cached'})")
        with _phase(say, "wheels ready"):
            wheel_dir, fetched = wheels(ROOT, cache)
        say(f"wheels in {wheel_dir} ({'fetched by pip' if fetched else 'cached'})")
        with _phase(say, "base image ready"):
            reference, made = with_downloads(
                podman, debian=debian, wheels=wheel_dir, kafka=kafka_jars(), cache_dir=cache
            )
        say(f"base image {reference} ({'made' if made else 'cached'})")
        project = f"tierproxy-test-{uuid.uuid4().hex[:8]}"
        built = Stack(root=ROOT, project=project, podman=podman, base_image=reference, report=say)
        try:
            with _phase(say, f"images built: {', '.join(BUILT_SERVICES)}"):
                built.build(*BUILT_SERVICES)
            with HealthChecks(podman, project):
                with _phase(say, f"kafka, s3, {', '.join(PROXIES)} and the pipeline up"):
                    built.up(*PROXIES, "tier")
                    for proxy in PROXIES:
                        built.wait_healthy(proxy, timeout_s=HEALTHY_TIMEOUT_S)
                yield built
        finally:
            with _phase(say, f"project {project} removed"):
                left = built.down()
            if left:
                say(f"removed by force after docker-compose down: {left}")
