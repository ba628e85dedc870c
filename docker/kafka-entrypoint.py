#!/usr/bin/python3
"""Run Apache Kafka (KRaft) from its jars in /opt/kafka/libs, configured by the environment.

Every ``KAFKA_<NAME>`` variable becomes the broker property ``<name>`` the way the apache/kafka
image maps them: lower case, ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``
(``KAFKA_LOG_RETENTION_MS`` -> ``log.retention.ms``). Not properties: ``KAFKA_HEAP_OPTS``
(default ``-Xmx1G``), ``KAFKA_JVM_PERFORMANCE_OPTS`` and ``KAFKA_OPTS`` are JVM options, as for
Kafka's own scripts; ``CLUSTER_ID`` is the KRaft cluster id the data directory is formatted
with (a random one by default). ``log.dirs`` defaults to /var/lib/kafka/data.

The data directory is formatted on the first start only (it then holds ``meta.properties``),
so a restarted container keeps its log. The broker replaces this process (exec), so it gets
the container's stop signal directly.
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

LIBS = "/opt/kafka/libs/*"
PROPERTIES = Path("/var/lib/kafka/server.properties")
DEFAULT_LOG_DIRS = "/var/lib/kafka/data"
JVM_VARIABLES = ("KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_OPTS")
# Kafka's own defaults for these (bin/kafka-run-class.sh, bin/kafka-server-start.sh).
DEFAULT_HEAP = "-Xmx1G"
DEFAULT_PERFORMANCE = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
)

# The jars log through slf4j-simple (the Maven file's binding): one line per event on stderr,
# here with its time.
LOG_TIMESTAMPS = (
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
)


def property_name(variable: str) -> str:
    """``KAFKA_LOG_RETENTION_MS`` -> ``log.retention.ms`` (apache/kafka's mapping)."""
    name = variable.removeprefix("KAFKA_").lower()
    return name.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


def properties(environ: Mapping[str, str]) -> dict[str, str]:
    """The broker properties the environment sets."""
    found = {
        property_name(variable): value
        for variable, value in sorted(environ.items())
        if variable.startswith("KAFKA_") and variable not in JVM_VARIABLES
    }
    found.setdefault("log.dirs", DEFAULT_LOG_DIRS)
    return found


def cluster_id() -> str:
    """A random cluster id in Kafka's ``Uuid.toString()`` form, never starting with a dash."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


def java(environ: Mapping[str, str], main_class: str, *args: str) -> list[str]:
    jvm = [
        *environ.get("KAFKA_HEAP_OPTS", DEFAULT_HEAP).split(),
        *environ.get("KAFKA_JVM_PERFORMANCE_OPTS", DEFAULT_PERFORMANCE).split(),
        *LOG_TIMESTAMPS,
        *environ.get("KAFKA_OPTS", "").split(),
    ]
    return [
        f"{environ.get('JAVA_HOME', '/opt/java')}/bin/java",
        *jvm,
        "-cp",
        LIBS,
        main_class,
        *args,
    ]


def main() -> None:
    settings = properties(os.environ)
    PROPERTIES.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    first_dir = Path(settings["log.dirs"].split(",")[0])
    if not (first_dir / "meta.properties").is_file():
        format_storage = java(
            os.environ,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            os.environ.get("CLUSTER_ID") or cluster_id(),
            "-c",
            str(PROPERTIES),
        )
        subprocess.run(format_storage, check=True)
    argv = java(os.environ, "kafka.Kafka", str(PROPERTIES))
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
