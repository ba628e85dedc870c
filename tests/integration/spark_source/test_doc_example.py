"""docs/spark.md's first example, run exactly as printed, as a user runs it.

The example's code block is taken from the page unchanged and run as a script by this
virtualenv's interpreter, from a directory holding the ``tierproxy.toml`` it names (the
harness's Apache Kafka and SeaweedFS), with a ``PATH`` whose ``python3`` is not this
virtualenv's and without ``PYSPARK_PYTHON``: Spark's Python workers must still run an
interpreter that has tierproxy. The topic it subscribes to is created, filled and tiered by
the real pipeline, after which the broker deletes the tiered range: the counts it shows can
only come from the remote tier and the broker's tail together.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from proxy.embedded import BrokerInfo, S3Info
from proxy.embedded.tierproxy import storage_settings, write_config
from tests.integration.spark_source.conftest import consume_rows, produce_with_headers
from tests.integration.tiered.support import (
    READ_COMMITTED,
    earliest_offsets,
    high_watermarks,
    tier_topic,
)
from tests.integration.tiering.workload import create_topic, delete_topic, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DOC = Path(__file__).parents[3] / "docs" / "spark.md"
PARTITIONS = 2
_RUN_TIMEOUT_S = 300


def first_python_block(page: Path) -> str:
    """The first ```python block of ``page``, as printed."""
    found = re.search(r"^```python\n(.*?)^```$", page.read_text(encoding="utf-8"), re.M | re.S)
    assert found is not None, f"{page} has no python block"
    return found.group(1)


def _option(code: str, name: str) -> str:
    found = re.search(rf'\.option\("{name}", "([^"]+)"\)', code)
    assert found is not None, f"the example sets no {name}"
    return found.group(1)


def _without_this_virtualenv(path: str) -> str:
    """``path`` without the directory of this interpreter's scripts."""
    scripts = Path(sys.executable).parent
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and Path(d) != scripts)


def test_the_smallest_example_reads_the_tiered_topic_as_printed(
    broker: BrokerInfo, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    code = first_python_block(DOC)
    topic, config_name = _option(code, "subscribe"), _option(code, "config")
    create_topic(broker.bootstrap, topic, PARTITIONS)  # refused if a test made it already
    try:
        # As the data source's other tests have it: every codec, transactions, headers.
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=200)
        produce_with_headers(broker.bootstrap, topic, 300)
        produce_mixed(broker.bootstrap, topic, PARTITIONS, records=50)
        ends = high_watermarks(broker.bootstrap, topic, PARTITIONS)
        committed = Counter(
            row[3] for row in consume_rows(broker.bootstrap, topic, ends, READ_COMMITTED)
        )
        metadata_topic = f"__rlm-doc-{uuid.uuid4().hex[:8]}"
        report = asyncio.run(
            tier_topic(
                broker,
                s3,
                spark,
                topic=topic,
                bucket=s3_bucket,
                metadata_topic=metadata_topic,
                spill=tmp_path / "spill",
                **{"local.retention.ms": 1, "retention.ms": -1},
            )
        )
        assert report.segments_copied >= PARTITIONS * 3, report
        starts = earliest_offsets(broker.bootstrap, topic, PARTITIONS)
        assert all(start > 0 for start in starts.values()), starts  # the broker deleted

        work = tmp_path / "job"
        work.mkdir()
        settings = {"bootstrap.servers": broker.bootstrap}
        write_config(work / config_name, settings | storage_settings(s3, s3_bucket, metadata_topic))
        (work / "example.py").write_text(code, encoding="utf-8")
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV"}
        }
        env["PATH"] = _without_this_virtualenv(env.get("PATH", ""))
        path_python = subprocess.run(
            ["python3", "-c", "import storage"], cwd=work, env=env, capture_output=True, check=False
        )
        assert path_python.returncode != 0, "the PATH's python3 has tierproxy: nothing to show"

        run = subprocess.run(
            [sys.executable, "example.py"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=_RUN_TIMEOUT_S,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        shown = {
            int(partition): int(count)
            for partition, count in re.findall(r"^\|\s*(\d+)\|\s*(\d+)\|$", run.stdout, re.M)
        }
        assert shown == committed, run.stdout  # the example reads read_committed
    finally:
        delete_topic(broker.bootstrap, topic)
