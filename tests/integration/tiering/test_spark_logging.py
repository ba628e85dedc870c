"""``tierproxy tier``'s Spark says only what an operator acts on.

Spark's default log4j profile prints start-up banners, a hostname warning and Hadoop's
native-library notice on every run, and the JVM its incubator-module notice; the pipeline
routes the JVM's logging through its own profile (WARN, one line each), filters that one
launcher line, and names Spark's master and UI once in its own log.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NOISE = (
    "Using incubator modules",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "NativeCodeLoader",
    "resolves to a loopback address",
    "Closing down clientserver connection",
)


def test_spark_starts_without_its_start_up_noise() -> None:
    script = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from storage.tiering.job import build_spark\n"
        "spark = build_spark('local[1]')\n"
        "assert spark.range(3).count() == 3\n"
        "spark.stop()\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=False
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert [line for line in NOISE if line in output] == [], output[-3000:]
    assert "Spark 4" in output and " on local[1]" in output, output[-3000:]
