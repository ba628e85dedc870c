"""``format("tierproxy")`` from a job run by ``spark-submit`` (PySpark's own launcher) with a
``tierproxy.toml``, as docs/spark.md tells users to run it: the same count as in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import storage.spark_count
from proxy.embedded.tierproxy import write_config
from tests.integration.spark_source.conftest import SourceTopic
from tests.integration.tiered.support import READ_UNCOMMITTED

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_SUBMIT_TIMEOUT_S = 300


def test_a_spark_submit_job_counts_what_the_source_reads_in_process(
    spark: Any, source_topic: SourceTopic, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "tierproxy.toml", source_topic.config)
    reader = spark.read.format("tierproxy").option("subscribe", source_topic.topic)
    for key, value in source_topic.settings.items():
        reader = reader.option(key, value)
    in_process = reader.load().count()
    submit = Path(sys.executable).with_name("spark-submit")
    job = storage.spark_count.__file__
    command: list[str | Path] = [submit, "--master", "local[1]", job, "--master", "local[1]"]
    answer = subprocess.run(
        [*command, "--config", str(config), "--topic", source_topic.topic],
        env={
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=_SUBMIT_TIMEOUT_S,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr[-4000:]
    counted = json.loads(answer.stdout.strip().splitlines()[-1])
    assert counted["records"] == in_process
    assert in_process >= len(source_topic.rows[READ_UNCOMMITTED])
