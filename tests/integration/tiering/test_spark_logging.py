"""``tierproxy tier``'s Spark says only what an operator acts on.

Spark's default log4j profile prints start-up banners, a hostname warning and Hadoop's
native-library notice on every run, and the JVM its incubator-module notice; the pipeline
routes the JVM's logging through its own profile (WARN, one line each), filters that one
launcher line, and names Spark's master and UI once in its own log. The JVM's lines and the
Python workers' are in the pipeline's ``log.format``, as its own are.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.log_lines import parse_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DOTTED = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")
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


PROBE = """
import logging, sys
from storage.log_format import configure
configure("INFO", sys.argv[1])
from storage.tiering.job import build_spark
spark = build_spark("local[1]")
probe = spark._jvm.org.apache.logging.log4j.LogManager.getLogger("org.example.Probe")
probe.warn('a "quoted" warning\\nsecond line')
probe.error("with a cause", spark._jvm.java.lang.IllegalStateException("boom"))
def work(x):
    logging.getLogger("storage.tiering.probe").warning("from a worker %d", x)
    return x
assert spark.sparkContext.parallelize([1, 2], 1).map(work).sum() == 3
spark.stop()
"""


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_the_jvm_and_the_python_workers_log_in_the_pipelines_format(fmt: str) -> None:
    """Spark's JVM (through the pipeline's log4j profile for ``fmt``) and its Python workers
    (configured by the pipeline's daemon) write lines the pipeline's own parser reads."""
    run = subprocess.run(
        [sys.executable, "-c", PROBE, fmt],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]

    lines = parse_log(run.stderr, fmt)  # every line, or it fails

    assert all(DOTTED.match(str(line["event"])) for line in lines), run.stderr[-3000:]
    jvm = [line for line in lines if line["logger"] == "org.example.Probe"]
    assert [(line["level"], line["msg"]) for line in jvm] == [
        ("warning", 'a "quoted" warning\nsecond line'),
        ("error", "with a cause"),
    ]
    assert "IllegalStateException: boom" in jvm[1]["exc"]
    workers = [line["msg"] for line in lines if line["logger"] == "storage.tiering.probe"]
    assert sorted(workers) == ["from a worker 1", "from a worker 2"]
    assert any(line["event"] == "tiering.spark.started" for line in lines)
