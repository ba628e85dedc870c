"""A secured Apache Kafka with tierproxy's users (see :mod:`tests.integration.tiered.scram`):
the broker (SASL_PLAINTEXT, or SASL_SSL with the tests' CA), the ``upstream.*`` login of each
tierproxy part, and a pipeline cycle as ``tiering``. Shared by the tests of least privilege,
of the broker checks' reuse, of SASL_SSL and of re-authentication."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from proxy.embedded import KAFKA_4, BrokerInfo, KafkaBroker, S3Info, ensure_jars
from proxy.embedded.kafka_tls import BrokerTls
from proxy.embedded.tierproxy import write_config
from storage.tiering.report import CycleReport
from tests.certificates import Pki
from tests.integration.tiered.scram import (
    MECHANISM,
    Topics,
    create_users,
    password,
    scram_broker_properties,
)
from tests.integration.tiered.support import SEGMENT_BYTES, CycleTarget, run_cycle

COMMAND_TIMEOUT_S = 240

USERS = ("tiering", "status", "proxy", "alice", "mallory")
CLIENT_SECURITY = {"security.protocol": "SASL_PLAINTEXT"}


@dataclasses.dataclass(frozen=True, slots=True)
class SecuredKafka:
    plaintext: str
    """The super user's listener (the test's admin)."""
    sasl: BrokerInfo
    """The SCRAM listener, where tierproxy and the clients log in."""


@contextlib.contextmanager
def secured_kafka(work: Path) -> Iterator[SecuredKafka]:
    """A broker with a SASL_PLAINTEXT SCRAM listener and every user of :data:`USERS`."""
    with KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=work / "kafka",
        properties=scram_broker_properties("SASL_PLAINTEXT"),
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
    ) as server:
        info = server.start()
        create_users(info.bootstrap, USERS)
        sasl_bootstrap = server.listener_bootstrap("SASL_PLAINTEXT")
        _host, port = sasl_bootstrap.rsplit(":", 1)
        yield SecuredKafka(
            plaintext=info.bootstrap,
            sasl=dataclasses.replace(info, bootstrap=sasl_bootstrap, port=int(port)),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class TlsKafka:
    plaintext: str
    """The super user's listener (the test's admin)."""
    sasl_ssl: BrokerInfo
    """The SASL_SSL listener, where tierproxy and the clients log in."""


@contextlib.contextmanager
def sasl_ssl_kafka(
    work: Path, pki: Pki, users: Iterable[str], properties: Mapping[str, str]
) -> Iterator[TlsKafka]:
    """A broker with ``properties`` and a SASL_SSL listener whose certificate ``pki``'s CA
    signed, and SCRAM credentials for ``users``."""
    with KafkaBroker(
        ensure_jars(KAFKA_4),
        work_dir=work,
        properties=dict(properties),
        extra_listeners={"SASL_SSL": "SASL_SSL"},
        tls=BrokerTls(keystore=pki.broker.keystore),
    ) as server:
        info = server.start()
        create_users(info.bootstrap, users)
        bootstrap = server.listener_bootstrap("SASL_SSL")
        yield TlsKafka(
            plaintext=info.bootstrap,
            sasl_ssl=dataclasses.replace(
                info, bootstrap=bootstrap, port=int(bootstrap.rsplit(":", 1)[1])
            ),
        )


def login(user: str) -> dict[str, Any]:
    """The ``upstream.*`` settings of a tierproxy part that logs in as ``user``."""
    return {
        "upstream.security.protocol": "SASL_PLAINTEXT",
        "upstream.sasl.mechanism": MECHANISM,
        "upstream.sasl.username": user,
        "upstream.sasl.password": password(user),
    }


def cycle(
    secured: SecuredKafka, s3: S3Info, spark: Any, bucket: str, topics: Topics, spill: Path
) -> CycleReport:
    """One pipeline cycle over ``topics.topic``, logged in as ``tiering``."""
    target = CycleTarget(
        topic=topics.topic, bucket=bucket, metadata_topic=topics.metadata, spill=spill
    )
    policy = {"local.retention.bytes": SEGMENT_BYTES}
    return asyncio.run(
        run_cycle(secured.sasl, s3, spark, target, policy, settings=login("tiering"))
    )


def config_file(path: Path, settings: Mapping[str, Any], topic: str) -> Path:
    """A tierproxy config file: ``settings`` and a ``[[topics]]`` table tiering ``topic``."""
    write_config(path, settings)
    with path.open("a", encoding="utf-8") as file:
        file.write(
            f'[[topics]]\npattern = "{topic}"\nremote.storage.enable = true\n'
            f"segment.bytes = {SEGMENT_BYTES}\nlocal.retention.bytes = {SEGMENT_BYTES}\n"
        )
    return path


def tierproxy(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``tierproxy ARGS`` as a user would (this interpreter, the worktree's code)."""
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
