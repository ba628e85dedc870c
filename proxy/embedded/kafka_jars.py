"""Apache Kafka's jars, resolved from Maven Central by the pinned Maven project next to this file.

The embedded brokers, Kafka's native tiered storage (``LocalTieredStorage``, in the
``kafka-storage`` test jar) and Kafka's Java tools all run from one directory of jars per
version: ``java -cp '<libs>/*' <main class>``. There is no release tarball and no ``bin/``
script anywhere; a user's own unpacked release (``KAFKA_HOME``) has the same ``libs/`` layout
and is used the same way.

The versions are pinned here and nowhere else: the newest 4.x release whose artifacts are all
on Maven Central, and the newest 3.9.x, which proves "any unmodified broker" for a release
without ListOffsets -4/-5. ``python -m proxy.embedded`` (the Makefile's
``kafka-jars`` target) fetches both once into ``.kafka/<version>/libs`` of the checkout (or
``$TIERPROXY_KAFKA_JARS``); later runs see the stamp file and return at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

__all__ = [
    "KAFKA_3",
    "KAFKA_4",
    "KAFKA_VERSIONS",
    "KafkaDistribution",
    "KafkaJarsError",
    "distribution",
    "ensure_jars",
    "jars_root",
]

KAFKA_4: Final = "4.3.1"
"""Newest 4.x with every artifact on Maven Central (4.4.0 has no ``kafka-tools`` there)."""
KAFKA_3: Final = "3.9.2"
"""Newest 3.x: the "any unmodified broker" line (no ListOffsets v8/v9 sentinels)."""
KAFKA_VERSIONS: Final = (KAFKA_4, KAFKA_3)

_POM: Final = Path(__file__).with_name("maven") / "pom.xml"
_STAMP: Final = ".complete"
_MAVEN_TIMEOUT_S: Final = 900.0
_JAR: Final = re.compile(r"^kafka_[\d.]+-(\d+\.\d+\.\d+)\.jar$")


class KafkaJarsError(RuntimeError):
    """Kafka's jars are not there and could not be fetched (no ``mvn``, no network)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaDistribution:
    """One Kafka version's jars, and the class names of what the tests and the demo run."""

    version: str
    libs: Path

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    def java(self, main_class: str, *args: str, heap: str = "-Xmx256m") -> list[str]:
        """The command line that runs ``main_class`` from these jars."""
        return [_java(), heap, "-cp", self.classpath, main_class, *args]

    @property
    def dump_log_segments(self) -> str:
        # Moved from core (Scala) to the tools module in 4.0.
        if self.major >= 4:
            return "org.apache.kafka.tools.DumpLogSegments"
        return "kafka.tools.DumpLogSegments"

    console_consumer: ClassVar[str] = "org.apache.kafka.tools.consumer.ConsoleConsumer"
    consumer_perf_test: ClassVar[str] = "org.apache.kafka.tools.ConsumerPerformance"
    get_offsets: ClassVar[str] = "org.apache.kafka.tools.GetOffsetShell"
    delete_records: ClassVar[str] = "org.apache.kafka.tools.DeleteRecordsCommand"
    reassign_partitions: ClassVar[str] = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    storage_tool: ClassVar[str] = "kafka.tools.StorageTool"
    server: ClassVar[str] = "kafka.Kafka"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def jars_root() -> Path:
    """Where the versions' jar directories live.

    ``$TIERPROXY_KAFKA_JARS`` if set; else ``.kafka`` in the checkout this package runs from
    (the Makefile's place, ignored by git); else the user's cache directory for an installed
    package.
    """
    if configured := os.environ.get("TIERPROXY_KAFKA_JARS"):
        return Path(configured)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".kafka"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tierproxy" / "kafka"


def distribution(version: str) -> KafkaDistribution:
    """The jars of a pinned ``version`` (not checked: see :func:`ensure_jars`)."""
    return KafkaDistribution(version=version, libs=jars_root() / version / "libs")


def distribution_from_home(kafka_home: Path) -> KafkaDistribution:
    """A user's unpacked release (``KAFKA_HOME``), which has the same ``libs/`` layout.

    :raises KafkaJarsError: ``kafka_home`` has no ``libs/kafka_<scala>-<version>.jar``.
    """
    for jar in sorted((kafka_home / "libs").glob("kafka_*.jar")):
        if match := _JAR.match(jar.name):
            return KafkaDistribution(version=match.group(1), libs=kafka_home / "libs")
    raise KafkaJarsError(f"KAFKA_HOME={kafka_home} has no libs/kafka_<scala>-<version>.jar")


def ensure_jars(version: str, *, log: bool = True) -> KafkaDistribution:
    """The jars of ``version``, fetched with Maven first if they are not there yet.

    The stamp file is written only after Maven succeeded, so an interrupted download is
    redone rather than used half-complete.

    :raises KafkaJarsError: ``mvn`` or ``java`` is missing, or Maven failed (its output quoted).
    """
    found = distribution(version)
    if (found.libs / _STAMP).is_file():
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError(
            f"Apache Kafka {version}'s jars are not in {found.libs} and `mvn` is not installed "
            "to fetch them from Maven Central (apt-get install maven)"
        )
    if found.libs.exists():
        shutil.rmtree(found.libs)
    found.libs.mkdir(parents=True)
    if log:
        print(
            f"fetching Apache Kafka {version} from Maven Central into {found.libs} ...",
            file=sys.stderr,
            flush=True,
        )
    argv = [
        mvn,
        "--batch-mode",
        "--quiet",
        "--file",
        str(_POM),
        "dependency:copy-dependencies",
        f"-Dkafka.version={version}",
        f"-DoutputDirectory={found.libs}",
    ]
    # A spinner while Maven downloads (a minute or two on a fresh machine), on a terminal
    # only: piped into CI logs, rich draws nothing.
    from storage.console import report_console  # noqa: PLC0415 (rich only when fetching)

    console = report_console(stderr=True)
    spinner = console.status(f"Maven: Apache Kafka {version}") if log else None
    try:
        with spinner if spinner is not None else contextlib.nullcontext():
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
            )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise KafkaJarsError(f"fetching Apache Kafka {version} failed: {err}") from err
    if result.returncode != 0:  # checked here to quote Maven's own output
        raise KafkaJarsError(
            f"mvn could not fetch Apache Kafka {version} (exit {result.returncode}):\n"
            f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
        )
    jars = len(list(found.libs.glob("*.jar")))
    (found.libs / _STAMP).write_text(f"{version}: {jars} jars from Maven Central\n")
    if log:
        print(f"Apache Kafka {version}: {jars} jars ready", file=sys.stderr, flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m proxy.embedded``: fetch every pinned version (or those given)."""
    parser = argparse.ArgumentParser(
        prog="python -m proxy.embedded",
        description="Fetch Apache Kafka's jars from Maven Central for the embedded brokers.",
    )
    parser.add_argument(
        "versions",
        nargs="*",
        default=list(KAFKA_VERSIONS),
        help=f"versions to fetch (default: the pinned {', '.join(KAFKA_VERSIONS)})",
    )
    args = parser.parse_args(argv)
    try:
        for version in args.versions:
            found = ensure_jars(version)
            print(f"Apache Kafka {version}: {found.libs}")
    except KafkaJarsError as err:
        print(f"kafka-jars: {err}", file=sys.stderr)
        return 1
    return 0
