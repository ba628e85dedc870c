"""The object-store emulators of the tests, pinned and installed once from their registries.

- **Azurite** (Microsoft's Azure Storage emulator), the npm package ``azurite``, run by the
  machine's Node.js (20 or later) as ``azurite-blob``;
- **fake-gcs-server**, the Go module ``github.com/fsouza/fake-gcs-server``, built by the
  machine's Go through the Go module proxy (``go install``).

The versions are pinned here and nowhere else. ``python -m proxy.embedded emulators`` (the
Makefile's ``emulators`` target) installs both into ``$TIERPROXY_EMULATORS`` or
``~/.cache/tierproxy/emulators/<name>-<version>`` once; later runs see the stamp file and
return at once. The test fixtures call :func:`ensure_emulator` too, so a plain ``pytest``
installs what it lacks. Without ``npm`` or ``go`` the emulator cannot be had:
:class:`EmulatorError` says so, and the tests that need it fail in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "AZURITE",
    "EMULATORS",
    "FAKE_GCS_SERVER",
    "Emulator",
    "EmulatorError",
    "emulators_root",
    "ensure_emulator",
    "main",
]

_STAMP: Final = ".complete"
_INSTALL_TIMEOUT_S: Final = 1200.0
"""npm fetches about 400 packages; go builds fake-gcs-server and Google's client libraries
(minutes on two busy cores)."""


class EmulatorError(RuntimeError):
    """An emulator is not installed and could not be (no ``npm``/``go``, no registry)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulator:
    """One pinned emulator: how it is installed and where its executable lands."""

    name: str
    version: str
    tool: str
    """The installer it needs on the PATH (``npm`` or ``go``)."""
    executable: str
    """Path of the executable, relative to its install directory."""

    def directory(self) -> Path:
        return emulators_root() / f"{self.name}-{self.version}"

    def binary(self) -> Path:
        return self.directory() / self.executable

    def install_command(self, directory: Path) -> tuple[list[str], dict[str, str]]:
        """The command (and its extra environment) that installs into ``directory``."""
        if self.tool == "npm":
            return [
                "npm",
                "install",
                "--prefix",
                str(directory),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"{self.name}@{self.version}",
            ], {}
        return (
            ["go", "install", f"github.com/fsouza/{self.name}@{self.version}"],
            {"GOBIN": str(directory / "bin"), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
        )


AZURITE: Final = Emulator(
    name="azurite", version="3.37.0", tool="npm", executable="node_modules/.bin/azurite-blob"
)
FAKE_GCS_SERVER: Final = Emulator(
    name="fake-gcs-server", version="v1.56.1", tool="go", executable="bin/fake-gcs-server"
)
EMULATORS: Final = (AZURITE, FAKE_GCS_SERVER)


def emulators_root() -> Path:
    """``$TIERPROXY_EMULATORS``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)/tierproxy/emulators."""
    if root := os.environ.get("TIERPROXY_EMULATORS"):
        return Path(root)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tierproxy" / "emulators"


def ensure_emulator(emulator: Emulator) -> Path:
    """The emulator's executable, installed now if it is not yet.

    :raises EmulatorError: when its installer is missing or the install failed.
    """
    directory = emulator.directory()
    binary = emulator.binary()
    if (directory / _STAMP).is_file() and binary.is_file():
        return binary
    if shutil.which(emulator.tool) is None:
        raise EmulatorError(
            f"{emulator.name} {emulator.version} is not installed and '{emulator.tool}' is "
            "not on the PATH to install it (make emulators)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    command, extra = emulator.install_command(directory)
    try:
        done = subprocess.run(
            command,
            env={**os.environ, **extra},
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise EmulatorError(f"installing {emulator.name} took over {err.timeout:.0f} s") from err
    if done.returncode != 0 or not binary.is_file():
        raise EmulatorError(
            f"installing {emulator.name} {emulator.version} failed ({' '.join(command)}):\n"
            f"{(done.stderr or done.stdout)[-2000:]}"
        )
    (directory / _STAMP).write_text(emulator.version)
    return binary


def main(argv: list[str]) -> int:
    """``python -m proxy.embedded emulators``: install every pinned emulator."""
    if argv:
        print("usage: python -m proxy.embedded emulators")
        return 2
    status = 0
    for emulator in EMULATORS:
        try:
            print(f"{emulator.name} {emulator.version}: {ensure_emulator(emulator)}")
        except EmulatorError as err:
            print(f"emulators: {err}")
            status = 1
    return status
