"""The compose test's base image, made without a container registry.

Two local images, each kept in Podman's storage under a tag that digests what it is made of,
so a later run finds them at once and a change makes a new one:

* ``localhost/tierproxy-debian:<key>``: ``debootstrap --variant=minbase
  --include=<docker/base-packages.txt>`` builds a root file system from Debian's package
  archive, which ``podman import`` turns into an image (the key: suite, mirror, packages).
  Downloaded packages are kept in ``<cache>/debs`` for the next debootstrap;
* ``localhost/tierproxy-base:<key>``: that image plus what the image builds would otherwise
  download (:mod:`tests.compose.prefetch`): the wheels in /prefetched/wheels and Kafka's jars
  in /prefetched/kafka/<version>/libs, where the Dockerfile looks for them.

The Dockerfile builds every image FROM the second (``TIERPROXY_BASE_IMAGE``), as it builds FROM
debian:bookworm-slim for users; the build context stays the repository's few megabytes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from proxy.embedded.kafka_jars import KafkaDistribution
from tests.compose.engine import EngineError, Podman

__all__ = ["SUITE", "debian_image", "package_list", "with_downloads"]

log = logging.getLogger(__name__)

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DEBIAN_REPOSITORY = "localhost/tierproxy-debian"
BASE_REPOSITORY = "localhost/tierproxy-base"
_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_IMPORT_TIMEOUT_S = 600.0


def package_list(path: Path) -> list[str]:
    """The packages a base-packages.txt names (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def image_reference(packages: list[str]) -> str:
    """``localhost/tierproxy-debian:<key>``; the key changes with the suite, mirror or packages."""
    return f"{DEBIAN_REPOSITORY}:{_digest(SUITE, MIRROR, *sorted(packages))}"


def debian_image(podman: Podman, *, packages_file: Path, cache_dir: Path) -> tuple[str, bool]:
    """The Debian image's reference, made first if Podman does not have it; and whether made.

    :raises EngineError: debootstrap or the import failed (their output quoted).
    """
    packages = package_list(packages_file)
    reference = image_reference(packages)
    if podman.image_exists(reference):
        return reference, False
    debs = cache_dir / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        try:
            _debootstrap(rootfs, packages, debs)
            _import(podman, rootfs, reference)
        finally:
            _unmount_below(rootfs)
    log.info("image %s made from %d Debian packages", reference, len(packages))
    return reference, True


def with_downloads(
    podman: Podman, *, debian: str, wheels: Path, kafka: KafkaDistribution, cache_dir: Path
) -> tuple[str, bool]:
    """``debian`` plus the wheels and Kafka's jars in /prefetched; whether it was made now.

    :raises EngineError: the build failed (its output quoted).
    """
    jars = sorted(path.name for path in kafka.libs.glob("*.jar"))
    reference = f"{BASE_REPOSITORY}:{_digest(debian, wheels.name, kafka.version, *jars)}"
    if podman.image_exists(reference):
        return reference, False
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="context-") as work:
        context = Path(work)
        _link_tree(wheels, context / "wheels")
        _link_tree(kafka.libs, context / "kafka" / kafka.version / "libs")
        (context / "Containerfile").write_text(
            f"FROM {debian}\nCOPY wheels/ /prefetched/wheels/\nCOPY kafka/ /prefetched/kafka/\n"
        )
        podman.run(
            "build", "--tag", reference, "--file", str(context / "Containerfile"), str(context)
        )
    log.info("image %s made: %s with the downloads of the image builds", reference, debian)
    return reference, True


def _link_tree(source: Path, target: Path) -> None:
    """Hard links to the files of ``source`` in ``target`` (copies across file systems)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            try:
                os.link(path, target / path.name)
            except OSError:
                shutil.copy2(path, target / path.name)


def _debootstrap(rootfs: Path, packages: list[str], debs: Path) -> None:
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        f"--cache-dir={debs}",
        SUITE,
        str(rootfs),
        MIRROR,
    ]
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=_DEBOOTSTRAP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise EngineError(f"debootstrap timed out after {_DEBOOTSTRAP_TIMEOUT_S} s") from err
    if result.returncode != 0:
        raise EngineError(
            f"debootstrap exited {result.returncode}: "
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    # Package indexes and caches are of no use in an image.
    for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for entry in (rootfs / leftover).glob("*"):
            if entry.is_file():
                entry.unlink()


def _import(podman: Podman, rootfs: Path, reference: str) -> None:
    """``tar`` the root file system (without what the runtime mounts) into ``podman import``."""
    tar = subprocess.Popen(
        [
            "tar",
            "-C",
            str(rootfs),
            "--exclude=./proc/*",
            "--exclude=./sys/*",
            "--exclude=./dev/*",
            "-c",
            ".",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        result = subprocess.run(
            podman.argv("import", "-", reference),
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            env=podman.environment,
            timeout=_IMPORT_TIMEOUT_S,
            check=False,
        )
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
    if result.returncode != 0 or tar.returncode != 0:
        raise EngineError(f"podman import {reference} failed: {result.stderr[-2000:]}")


def _unmount_below(rootfs: Path) -> None:
    """Unmount anything debootstrap left mounted in ``rootfs`` (a failed run leaves /proc)."""
    prefix = f"{rootfs.resolve()}/"
    with open("/proc/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
