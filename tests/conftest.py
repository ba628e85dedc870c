"""Session fixtures: real servers on 127.0.0.1, started lazily, stopped by PID at the end.

* ``brokers`` -> :class:`BrokerPool`: every broker kind the session uses, each started on
  first use and kept until the session ends: ``kafka`` (Apache Kafka 4.x from Maven Central;
  ``KAFKA_HOME`` or ``KAFKA_BOOTSTRAP`` replace it), ``kafka3`` (the pinned 3.9.x) and
  ``tansu``.
* ``broker`` -> :class:`proxy.embedded.BrokerInfo` of the test's ``broker_kind``: ``kafka``
  unless the test (or its module) is marked ``@pytest.mark.brokers("kafka", "kafka3",
  "tansu")``, which runs it once per kind named (test ids end in ``[kafka]`` and so on).
  Capabilities are flags on it (``supports_delete_records``, ...).
* ``s3`` -> :class:`proxy.embedded.S3Info`: ``S3_ENDPOINT`` (with ``S3_ACCESS_KEY``/
  ``S3_SECRET_KEY``/``S3_REGION`` or the ``AWS_*`` variables) over an embedded SeaweedFS.
* ``s3_bucket`` -> a fresh bucket name per test, created on ``s3`` and deleted afterwards.
* ``seaweedfs`` -> the embedded :class:`proxy.embedded.SeaweedFS`, for fault injection:
  ``stop()`` it mid-test and ``start()`` it again (same ports and data); it is restarted after
  the test in any case.
* ``azurite`` -> :class:`proxy.embedded.object_stores.Azurite` (Azure Blob Storage) and
  ``fake_gcs`` -> :class:`proxy.embedded.object_stores.FakeGcs` (Google Cloud Storage), the
  pinned emulators (installed on first use, :mod:`proxy.embedded.emulators`);
  ``azure_container`` and ``gcs_bucket`` -> a fresh container or bucket in them per test.
* ``pki`` -> :class:`tests.certificates.Pki`: a CA made for the session, with broker and
  proxy certificates for localhost/127.0.0.1, a mismatched one and a stranger CA (PEM files).
* ``spark`` -> a ``local[2]`` SparkSession (UI off, 2 shuffle partitions, 1 GiB driver).
* Hypothesis profiles: ``HYPOTHESIS_PROFILE=ci|dev|exhaustive`` (``ci`` when ``CI`` is set,
  else ``dev``).
* ``TIERPROXY_STATE_DIR`` is set to a session temp dir, so no test writes metadata
  snapshots into the working directory.
* ``unique_topic`` -> a fresh topic name per test; ``new_topic`` -> an async function that
  creates a fresh topic with N partitions (and configs) on ``broker`` and returns its name.

A server is started only when a test first asks for it; the terminal summary says which
servers ran and how long each took to start. A server that is missing is never a quiet
skip in CI: :func:`missing_server` fails the test when ``CI`` is set, and ``.ci/run`` also
fails on any skip whose reason starts with "missing server".
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from hypothesis import settings as hypothesis_settings

from proxy.embedded import (
    KAFKA_3,
    KAFKA_4,
    BrokerChoice,
    BrokerInfo,
    ExternalBroker,
    ExternalS3,
    KafkaBroker,
    S3Info,
    SeaweedFS,
    TansuBroker,
    broker_from_env,
    create_bucket,
    create_topic,
    delete_bucket,
    ensure_jars,
    s3_info_from_env,
)
from proxy.embedded.kafka_jars import KafkaDistribution, distribution_from_home
from proxy.embedded.object_stores import AzureInfo, Azurite, FakeGcs, GcsInfo
from proxy.embedded.process import ServerStartError
from proxy.logs import OUR_LOGGERS
from storage.log_format import FORMAT_VARIABLE, LEVEL_VARIABLE
from tests.certificates import Pki, make_pki

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NewTopic = Callable[..., Awaitable[str]]
BrokerServer = KafkaBroker | TansuBroker | ExternalBroker

BROKER_KINDS: tuple[BrokerChoice, ...] = ("kafka", "kafka3", "tansu")
"""Every broker kind, for the pass-through and client-compatibility suites."""
KAFKA_KINDS: tuple[BrokerChoice, ...] = ("kafka", "kafka3")
"""The Apache Kafka lines, for suites that need real deletion (the tiered suites)."""

# Property tests: ``ci`` (the default under CI) is deterministic, so a red build is
# reproducible; ``dev`` explores new examples on every run; ``exhaustive`` runs many more.
# No deadlines: two shared cores make single examples slow now and then, not wrong.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.register_profile("exhaustive", max_examples=2000, deadline=None)
hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

# What ran in this session and how long it took to start, for the terminal summary.
_started: dict[str, str] = {}


def missing_server(what: str) -> NoReturn:
    """Skip a test whose server or tool is missing, except in CI, where that is a failure."""
    reason = f"missing server: {what}"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _topic_safe(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:limit]


class BrokerPool:
    """The session's brokers by kind, each started on first use and stopped at the end."""

    def __init__(self, work_dir: Path) -> None:
        self._work_dir = work_dir
        self._servers: dict[BrokerChoice, BrokerServer] = {}
        self._infos: dict[BrokerChoice, BrokerInfo] = {}

    def get(self, kind: BrokerChoice) -> BrokerInfo:
        """The running broker of ``kind``, started now if it is the first use."""
        if kind not in self._infos:
            server = broker_from_env(os.environ, choice=kind, work_dir=self._work_dir / kind)
            self._servers[kind] = server
            info = server.start()
            self._infos[kind] = info
            _started[f"broker {kind}"] = (
                f"external broker at {info.bootstrap} (KAFKA_BOOTSTRAP)"
                if info.kind == "external"
                else f"{info.version} at {info.bootstrap}, ready in {server.startup_seconds:.2f} s"
            )
        return self._infos[kind]

    def server(self, kind: BrokerChoice) -> BrokerServer:
        """The launcher of ``kind`` (started), for tests that stop or restart it."""
        self.get(kind)
        return self._servers[kind]

    def close(self) -> None:
        for server in self._servers.values():
            server.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests marked ``brokers(...)`` once per broker kind named."""
    marker = metafunc.definition.get_closest_marker("brokers")
    if marker is not None and "broker_kind" in metafunc.fixturenames:
        unknown = set(marker.args) - set(BROKER_KINDS)
        if unknown:
            raise pytest.UsageError(f"unknown broker kinds {sorted(unknown)} in {marker}")
        metafunc.parametrize("broker_kind", marker.args)


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    """The logging state :func:`storage.log_format.configure` changes, put back after every
    test: the loggers and the environment it leaves for child processes. Commands run
    in-process (``proxy.cli.main``) configure logs, and a later test's ``caplog`` must still
    see tierproxy's records at the levels it asks for."""
    root = logging.getLogger()
    saved = [
        (logger, logger.level, list(logger.handlers), logger.propagate)
        for logger in (root, *(logging.getLogger(name) for name in OUR_LOGGERS))
    ]
    environment = {name: os.environ.get(name) for name in (LEVEL_VARIABLE, FORMAT_VARIABLE)}
    try:
        yield
    finally:
        for name, value in environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for logger, level, handlers, propagate in saved:
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            for handler in handlers:
                logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Metadata snapshots (``./tierproxy-state`` by default) go to the session's temp dir,
    for the commands the tests start in-process and as subprocesses alike."""
    os.environ.setdefault("TIERPROXY_STATE_DIR", str(tmp_path_factory.mktemp("tierproxy-state")))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA with broker and proxy certificates for localhost (:mod:`tests.certificates`)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def broker_kind() -> BrokerChoice:
    """The kind of broker a test runs against: ``kafka`` unless parametrized (see above)."""
    return "kafka"


@pytest.fixture(scope="session")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerPool]:
    pool = BrokerPool(tmp_path_factory.mktemp("brokers"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def broker(brokers: BrokerPool, broker_kind: BrokerChoice) -> BrokerInfo:
    return brokers.get(broker_kind)


@pytest.fixture
def kafka_distribution(broker_kind: BrokerChoice) -> KafkaDistribution:
    """The jars of the test's Apache Kafka broker, for Kafka's own tools."""
    if broker_kind == "kafka3":
        return ensure_jars(KAFKA_3)
    if broker_kind == "tansu":
        pytest.fail("Kafka's tools are run against Apache Kafka brokers only")
    if kafka_home := os.environ.get("KAFKA_HOME"):
        return distribution_from_home(Path(kafka_home))
    return ensure_jars(KAFKA_4)


@pytest.fixture(scope="session")
def _seaweedfs_server() -> Iterator[SeaweedFS]:
    if os.environ.get("S3_ENDPOINT"):
        missing_server("S3_ENDPOINT is set: there is no embedded SeaweedFS to stop and start")
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
def _azurite_server() -> Iterator[Azurite]:
    server = Azurite()
    try:
        try:
            info = server.start()
        except ServerStartError as err:
            missing_server(f"Azurite: {err}")
        _started["azure"] = f"Azurite at {info.endpoint}, ready in {server.startup_seconds:.2f} s"
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def azurite(_azurite_server: Azurite) -> AzureInfo:
    return _azurite_server.info


@pytest.fixture
def azure_container(_azurite_server: Azurite) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:16]}"
    _azurite_server.create_container(name)
    yield name
    _azurite_server.delete_container(name)


@pytest.fixture(scope="session")
def _fake_gcs_server() -> Iterator[FakeGcs]:
    server = FakeGcs()
    try:
        try:
            info = server.start()
        except ServerStartError as err:
            missing_server(f"fake-gcs-server: {err}")
        _started["gcs"] = (
            f"fake-gcs-server at {info.endpoint}, ready in {server.startup_seconds:.2f} s"
        )
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def fake_gcs(_fake_gcs_server: FakeGcs) -> GcsInfo:
    return _fake_gcs_server.info


@pytest.fixture
def gcs_bucket(_fake_gcs_server: FakeGcs) -> str:
    """A fresh bucket (fake-gcs-server's data goes with its session directory)."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    _fake_gcs_server.create_bucket(name)
    return name


SPARK_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Resolved by Ivy from Maven Central at session start (cached in ~/.ivy2 afterwards).
4.2.0, the newest release there: Maven Central has no 4.3.0 of the connector (404) for the
installed PySpark 4.3.0."""


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
        # Spark's own Kafka source, the reference of the tierproxy data source's tests.
        .config("spark.jars.packages", SPARK_KAFKA_PACKAGE)
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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _started:
        terminalreporter.section("servers")
        for role, text in _started.items():
            terminalreporter.write_line(f"{role}: {text}")
