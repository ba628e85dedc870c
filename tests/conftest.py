"""Session fixtures: real servers on 127.0.0.1, started lazily, stopped by PID at the end.

* ``broker`` -> :class:`proxy.embedded.BrokerInfo`: ``KAFKA_BOOTSTRAP`` (external) over
  ``KAFKA_HOME`` (Apache Kafka, KRaft) over Tansu (embedded default). Capabilities are flags on
  it (``supports_delete_records``, ``supports_retention``, ...): skip with ``broker.limitations()``
  or a specific reason when a test needs one. Tests marked ``kafka`` are skipped on Tansu.
* ``s3`` -> :class:`proxy.embedded.S3Info`: ``S3_ENDPOINT`` (with ``S3_ACCESS_KEY``/
  ``S3_SECRET_KEY``/``S3_REGION`` or the ``AWS_*`` variables) over an embedded SeaweedFS.
* ``s3_bucket`` -> a fresh bucket name per test, created on ``s3`` and deleted afterwards.
* ``seaweedfs`` -> the embedded :class:`proxy.embedded.SeaweedFS`, for fault injection:
  ``stop()`` it mid-test and ``start()`` it again (same ports and data); it is restarted after
  the test in any case. Skipped when ``S3_ENDPOINT`` is set.
* ``spark`` -> a ``local[2]`` SparkSession (UI off, 2 shuffle partitions, 1 GiB driver).
* ``unique_topic`` -> a fresh topic name per test; ``new_topic`` -> an async function that
  creates a fresh topic with N partitions (and configs) on ``broker`` and returns its name.

A server is started only when a test first asks for it; the terminal summary says which
servers ran and how long each took to start.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from proxy.embedded import (
    BrokerInfo,
    ExternalS3,
    S3Info,
    SeaweedFS,
    broker_from_env,
    create_bucket,
    create_topic,
    delete_bucket,
    s3_info_from_env,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NewTopic = Callable[..., Awaitable[str]]

# What ran in this session and how long it took to start, for the terminal summary.
_started: dict[str, str] = {}


def _topic_safe(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:limit]


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerInfo]:
    server = broker_from_env(os.environ)
    try:
        info = server.start()
        _started["broker"] = (
            f"external broker at {info.bootstrap} (KAFKA_BOOTSTRAP)"
            if info.kind == "external"
            else f"{info.version} at {info.bootstrap}, ready in {server.startup_seconds:.2f} s"
        )
        yield info
    finally:
        server.close()


@pytest.fixture(scope="session")
def _seaweedfs_server() -> Iterator[SeaweedFS]:
    if os.environ.get("S3_ENDPOINT"):
        pytest.skip("S3_ENDPOINT is set: there is no embedded SeaweedFS to stop and start")
    server = SeaweedFS()
    try:
        info = server.start()
        _started["s3"] = (
            f"SeaweedFS at {info.endpoint_url}, ready in {server.startup_seconds:.2f} s"
        )
        yield server
    finally:
        server.close()


@pytest.fixture
def seaweedfs(_seaweedfs_server: SeaweedFS) -> Iterator[SeaweedFS]:
    yield _seaweedfs_server
    _seaweedfs_server.start()  # a no-op unless the test left it stopped


@pytest.fixture(scope="session")
def s3(request: pytest.FixtureRequest) -> S3Info:
    external = s3_info_from_env(os.environ)
    if external is not None:
        info = ExternalS3(external).start()
        _started["s3"] = f"external S3 at {info.endpoint_url} (S3_ENDPOINT)"
        return info
    server: SeaweedFS = request.getfixturevalue("_seaweedfs_server")
    return server.info


@pytest.fixture
def s3_bucket(s3: S3Info, request: pytest.FixtureRequest) -> Iterator[str]:
    embedded: SeaweedFS | None = (
        request.getfixturevalue("_seaweedfs_server") if s3.kind == "seaweedfs" else None
    )
    name = f"t-{uuid.uuid4().hex[:16]}"
    create_bucket(s3, name)
    yield name
    if embedded is not None:
        embedded.start()  # a no-op unless the test left it stopped
    delete_bucket(s3, name)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    # PySpark's RDD workers take their interpreter from PYSPARK_PYTHON only (not from
    # spark.pyspark.python): without it they run the system python3, without our packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierproxy-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Python workers must be this interpreter (the venv), not whatever python3 is on PATH.
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    _started["spark"] = (
        f"Spark {session.version} local[2], ready in {time.monotonic() - started:.2f} s"
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    return f"{_topic_safe(request.node.name)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def new_topic(broker: BrokerInfo, request: pytest.FixtureRequest) -> NewTopic:
    prefix = _topic_safe(request.node.name)

    async def make(partitions: int = 1, configs: Mapping[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        await create_topic(broker.bootstrap, name, partitions=partitions, configs=configs)
        return name

    return make


@pytest.fixture(autouse=True)
def _skip_kafka_only_on_tansu(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("kafka") is None:
        return
    info: BrokerInfo = request.getfixturevalue("broker")
    if info.kind == "tansu":
        pytest.skip("needs Apache Kafka: set KAFKA_HOME or KAFKA_BOOTSTRAP (running on Tansu)")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _started:
        terminalreporter.section("servers")
        for role, text in _started.items():
            terminalreporter.write_line(f"{role}: {text}")
