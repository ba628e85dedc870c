"""Which broker and which S3 endpoint to use, from the environment.

Broker: ``KAFKA_BOOTSTRAP`` (an external broker, used as is) over ``KAFKA_HOME`` (Apache Kafka
started in KRaft mode from that release) over the embedded Tansu. S3: ``S3_ENDPOINT`` (see
:func:`proxy.embedded.s3.s3_info_from_env` for the credentials) over an embedded SeaweedFS.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from proxy.embedded.info import BrokerInfo, S3Info, probe_broker
from proxy.embedded.kafka import KafkaBroker
from proxy.embedded.probe import KafkaProbeError
from proxy.embedded.process import ServerStartError
from proxy.embedded.s3 import s3_answers, s3_client, s3_info_from_env
from proxy.embedded.seaweedfs import SeaweedFS
from proxy.embedded.server import ClosedOnExit
from proxy.embedded.tansu import TansuBroker

__all__ = ["ExternalBroker", "ExternalS3", "broker_from_env", "s3_from_env"]


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
    environ: Mapping[str, str], *, work_dir: Path | None = None
) -> TansuBroker | KafkaBroker | ExternalBroker:
    """The broker the environment asks for, not yet started."""
    if bootstrap := environ.get("KAFKA_BOOTSTRAP"):
        return ExternalBroker(bootstrap)
    if kafka_home := environ.get("KAFKA_HOME"):
        return KafkaBroker(Path(kafka_home), work_dir=work_dir)
    return TansuBroker(work_dir=work_dir)


def s3_from_env(
    environ: Mapping[str, str], *, work_dir: Path | None = None
) -> SeaweedFS | ExternalS3:
    """The S3 endpoint the environment asks for, not yet started."""
    external = s3_info_from_env(environ)
    if external is not None:
        return ExternalS3(external)
    return SeaweedFS(work_dir=work_dir)
