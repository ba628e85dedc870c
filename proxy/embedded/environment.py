"""Which broker and which S3 endpoint to use, from the environment.

Broker: Apache Kafka is the default. ``KAFKA_BOOTSTRAP`` (an external broker, used as is) over
``KAFKA_HOME`` (Apache Kafka started in KRaft mode from that release's ``libs/``) over the
pinned 4.x jars from Maven Central (:mod:`proxy.embedded.kafka_jars`). The other broker kinds
are asked for by name: ``kafka3`` (the pinned 3.9.x, always from Maven Central) and ``tansu``
(the embedded Tansu, which never deletes anything). S3: ``S3_ENDPOINT`` (see
:func:`proxy.embedded.s3.s3_info_from_env` for the credentials) over an embedded SeaweedFS.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from proxy.embedded.info import BrokerInfo, S3Info, probe_broker
from proxy.embedded.kafka import KafkaBroker
from proxy.embedded.kafka_jars import KAFKA_3, KAFKA_4, distribution_from_home, ensure_jars
from proxy.embedded.probe import KafkaProbeError
from proxy.embedded.process import ServerStartError
from proxy.embedded.s3 import s3_answers, s3_client, s3_info_from_env
from proxy.embedded.seaweedfs import SeaweedFS
from proxy.embedded.server import ClosedOnExit
from proxy.embedded.tansu import TansuBroker

__all__ = ["BrokerChoice", "ExternalBroker", "ExternalS3", "broker_from_env", "s3_from_env"]

BrokerChoice = Literal["kafka", "kafka3", "tansu"]
"""``kafka``: Apache Kafka 4.x (or the user's, from the environment); ``kafka3``: the pinned
3.9.x; ``tansu``: the embedded Tansu."""


class _Unmanaged(ClosedOnExit):
    """start/stop/close for a server someone else runs: nothing to launch or kill."""

    startup_seconds = 0.0

    def stop(self) -> None:
        """Nothing to stop: the server is not ours."""

    def close(self) -> None:
        """Nothing to clean up: the server is not ours."""


class ExternalBroker(_Unmanaged):
    """A broker at ``bootstrap`` that is already running; ``start()`` only probes it."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",", maxsplit=1)[0].strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"KAFKA_BOOTSTRAP must be host:port, got {bootstrap!r}")
        self._host, self._port = host, int(port)
        self._info: BrokerInfo | None = None

    @property
    def info(self) -> BrokerInfo:
        """The probed broker.

        :raises RuntimeError: :meth:`start` has not been called.
        """
        if self._info is None:
            raise RuntimeError("the external broker has not been probed yet")
        return self._info

    def start(self) -> BrokerInfo:
        """Probe the broker's capabilities.

        :raises ServerStartError: it cannot be reached or does not answer ApiVersions.
        """
        try:
            self._info = probe_broker(
                kind="external", host=self._host, port=self._port, version="external"
            )
        except (OSError, KafkaProbeError) as err:
            raise ServerStartError(
                f"KAFKA_BOOTSTRAP={self._host}:{self._port} does not answer: {err}"
            ) from err
        return self._info


class ExternalS3(_Unmanaged):
    """An S3 endpoint that is already running; ``start()`` checks that it answers."""

    def __init__(self, info: S3Info) -> None:
        self._info = info

    @property
    def info(self) -> S3Info:
        return self._info

    def start(self) -> S3Info:
        """Check that ``ListBuckets`` works with the configured credentials.

        :raises ServerStartError: it does not.
        """
        client = s3_client(self._info, timeout_s=5.0)
        try:
            s3_answers(client)
        except Exception as err:  # botocore raises many unrelated types for "does not answer"
            raise ServerStartError(
                f"S3_ENDPOINT={self._info.endpoint_url} does not answer ListBuckets: {err}"
            ) from err
        finally:
            client.close()
        return self._info


def broker_from_env(
    environ: Mapping[str, str],
    *,
    choice: BrokerChoice = "kafka",
    work_dir: Path | None = None,
) -> TansuBroker | KafkaBroker | ExternalBroker:
    """The broker of kind ``choice``, not yet started; Kafka's jars are fetched if missing.

    :raises proxy.embedded.kafka_jars.KafkaJarsError: Kafka's jars are missing and Maven
        could not fetch them.
    """
    if choice == "tansu":
        return TansuBroker(work_dir=work_dir)
    if choice == "kafka3":
        return KafkaBroker(ensure_jars(KAFKA_3), work_dir=work_dir)
    if bootstrap := environ.get("KAFKA_BOOTSTRAP"):
        return ExternalBroker(bootstrap)
    if kafka_home := environ.get("KAFKA_HOME"):
        return KafkaBroker(distribution_from_home(Path(kafka_home)), work_dir=work_dir)
    return KafkaBroker(ensure_jars(KAFKA_4), work_dir=work_dir)


def s3_from_env(
    environ: Mapping[str, str], *, work_dir: Path | None = None
) -> SeaweedFS | ExternalS3:
    """The S3 endpoint the environment asks for, not yet started."""
    external = s3_info_from_env(environ)
    if external is not None:
        return ExternalS3(external)
    return SeaweedFS(work_dir=work_dir)
