"""Spark's Python workers for the pipeline fork from a daemon that already imported the
task modules and PySpark's worker (:mod:`storage.tiering.spark_daemon`), so no worker pays
for those imports, and whose zip importers re-read an archive only when it changed."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_SCRIPT = """
from storage.tiering.job import build_spark

def inherited(items):
    import os, sys, zipimport
    parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
    zips = {type(f).__name__ for f in sys.path_importer_cache.values()
            if isinstance(f, zipimport.zipimporter)}
    yield ("storage.kafka_client" in sys.modules, "storage.tiering.tier_stage" in sys.modules,
           parent[2].decode(), tuple(sorted(zips)))

spark = build_spark("local[1]")
print(sorted(set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(inherited).collect())))
spark.stop()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_fork_from_the_daemon_with_the_task_modules_imported() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=180, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == (
        "[(True, True, 'storage.tiering.spark_daemon', ('_StatCheckedZipImporter',))]"
    ), run.stdout[-3000:]
