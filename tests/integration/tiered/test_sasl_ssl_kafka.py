"""tierproxy on a SASL_SSL Apache Kafka, as an operator runs it (issue 12).

One Kafka 4.3.1 broker with ``StandardAuthorizer``, SCRAM-SHA-512 users and a SASL_SSL
listener whose certificate a CA made by the tests signed (:mod:`tests.certificates`); its
PLAINTEXT listener is the harness's own (super user). Every tierproxy part runs as the
command a user types, from a config file, over SASL_SSL, verifying the broker's certificate
and host name against that CA, each as its own SCRAM user with the ACLs
``docs/operations.md`` lists:

- ``tierproxy tier --once`` (``tiering``) tiers the topic and has the broker delete it locally;
- ``tierproxy status`` (``status``) shows the tiered partition, and no secret;
- ``tierproxy serve`` (``proxy``) follows the metadata topic and discovers brokers over
  SASL_SSL, and listens on SASL_SSL with its own certificate. Clients (librdkafka) connect to
  it with TLS and log in with SCRAM end to end: ``alice`` reads every record, the tiered ones
  from the remote tier; ``mallory`` (no READ) gets TOPIC_AUTHORIZATION_FAILED and makes the
  proxy read nothing from storage;
- with a CA that did not sign the broker's certificate, or a wrong password, ``status`` stops
  at once with one clear line.

Hostname verification against a certificate for another host is in
``tests/unit/storage/test_startup_login.py`` (a second broker just for it would cost a JVM).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import ssl
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]
from cryptography import x509

from protocol.errors import KafkaError
from proxy.embedded import S3Info, create_bucket, delete_bucket
from proxy.embedded.tierproxy import proxy_process, storage_settings
from tests.certificates import Pki
from tests.integration.tiered.scram import (
    MECHANISM,
    RECORDS,
    Topics,
    acl,
    apply_acls,
    consume,
    fetch_from_zero,
    group_acls,
    new_topics,
    password,
    pipeline_acls,
    proxy_acls,
    scram_broker_properties,
    status_acls,
    storage_reads,
)
from tests.integration.tiered.secured import TlsKafka, config_file, sasl_ssl_kafka, tierproxy
from tests.integration.tiered.support import earliest_offsets, running
from tests.log_lines import parse_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # tier --once starts its own Spark

USERS = ("tiering", "status", "proxy", "alice", "mallory")


@dataclasses.dataclass(frozen=True, slots=True)
class Tiered:
    """The topic as ``tierproxy tier --once`` left it, and the files the commands share."""

    topics: Topics
    bucket: str
    work: Path
    output: str
    """What ``tier --once`` printed (stdout and stderr)."""
    stderr: str
    """What it printed on stderr: its log, in JSON, and what Spark's JVM writes."""


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsKafka]:
    work = tmp_path_factory.mktemp("sasl-ssl-kafka")
    with sasl_ssl_kafka(work, pki, USERS, scram_broker_properties("SASL_SSL")) as kafka:
        yield kafka


def login(user: str, ca: Path, secrets: Path) -> dict[str, Any]:
    """``upstream.*`` as ``docs/operations.md`` shows them: SASL_SSL, the CA, a password file."""
    secrets.mkdir(exist_ok=True)
    password_file = secrets / user
    password_file.write_text(password(user) + "\n", encoding="utf-8")
    return {
        "upstream.security.protocol": "SASL_SSL",
        "upstream.ssl.ca.location": str(ca),
        "upstream.sasl.mechanism": MECHANISM,
        "upstream.sasl.username": user,
        "upstream.sasl.password.file": str(password_file),
    }


def shared_settings(kafka: TlsKafka, s3: S3Info, topics: Topics, bucket: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka.sasl_ssl.bootstrap,
        **storage_settings(s3, bucket, topics.metadata),
    }


def proxy_certificate(pki: Pki) -> x509.Certificate:
    """The proxy's own certificate (the first of its chain), not the broker's."""
    return x509.load_pem_x509_certificates(pki.proxy.certificate.read_bytes())[0]


@pytest.fixture(scope="module")
def tiered(
    kafka: TlsKafka,
    s3: S3Info,
    pki: Pki,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tiered]:
    """A topic tiered by ``tierproxy tier --once`` logged in as ``tiering`` over SASL_SSL."""
    work = tmp_path_factory.mktemp("sasl-ssl")
    bucket = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    create_bucket(s3, bucket)
    try:
        yield tier_over_sasl_ssl(kafka, s3, pki, work, bucket)
    finally:
        delete_bucket(s3, bucket)


def tier_over_sasl_ssl(kafka: TlsKafka, s3: S3Info, pki: Pki, work: Path, bucket: str) -> Tiered:
    topics = new_topics(kafka.plaintext, "sasl-ssl")
    apply_acls(kafka.plaintext, pipeline_acls(topics.topic, topics.metadata).values())
    apply_acls(kafka.plaintext, status_acls(topics.topic, topics.metadata).values())
    apply_acls(kafka.plaintext, proxy_acls(topics.topic, topics.metadata).values())
    apply_acls(
        kafka.plaintext,
        [acl("alice", topics.topic, AclOperation.READ), *group_acls("alice", "mallory")],
    )
    settings = {
        **shared_settings(kafka, s3, topics, bucket),
        **login("tiering", pki.ca, work / "secrets"),
        "tiering.spill.dir": str(work / "spill"),
        "log.format": "json",
    }
    config = config_file(work / "tier.toml", settings, topics.topic)
    result = tierproxy("tier", "--once", "--master", "local[1]", "--config", str(config))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return Tiered(
        topics=topics,
        bucket=bucket,
        work=work,
        output=result.stdout + result.stderr,
        stderr=result.stderr,
    )


def test_tier_copies_and_deletes_locally_over_sasl_ssl(kafka: TlsKafka, tiered: Tiered) -> None:
    assert earliest_offsets(kafka.plaintext, tiered.topics.topic, 1)[0] > 0, (
        "no local data was deleted: " + tiered.output[-2000:]
    )
    assert f"{kafka.sasl_ssl.bootstrap}: SASL_SSL SCRAM-SHA-512 as tiering" in tiered.output
    assert password("tiering") not in tiered.output


def test_tier_logs_every_python_record_as_json(tiered: Tiered) -> None:
    # Spark's JVM writes its own lines to the same stderr; everything Python logs is JSON.
    records = parse_log(
        "\n".join(line for line in tiered.stderr.splitlines() if line.startswith("{")), "json"
    )
    assert any(
        record["logger"].startswith("storage.") and record["level"] == "info" for record in records
    ), tiered.stderr[-3000:]
    plain = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ (storage|proxy)\.")
    assert not [line for line in tiered.stderr.splitlines() if plain.match(line)]


def test_status_shows_the_tiered_partition_over_sasl_ssl(
    kafka: TlsKafka, s3: S3Info, pki: Pki, tiered: Tiered
) -> None:
    settings = {
        **shared_settings(kafka, s3, tiered.topics, tiered.bucket),
        **login("status", pki.ca, tiered.work / "secrets"),
    }
    config = config_file(tiered.work / "status.toml", settings, tiered.topics.topic)

    result = tierproxy("status", "--json", "--config", str(config), "--topic", tiered.topics.topic)

    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (row["topic"], row["partition"], row["tiered"]) == (tiered.topics.topic, 0, True)
    assert row["remote_log_start"] == 0
    assert row["segments"] > 0
    assert row["local_log_start"] > 0
    assert row["remote_log_end"] >= row["local_log_start"] - 1
    assert password("status") not in result.stdout + result.stderr


def test_status_refuses_a_broker_certificate_from_another_ca(
    kafka: TlsKafka, s3: S3Info, pki: Pki, tiered: Tiered
) -> None:
    settings = {
        **shared_settings(kafka, s3, tiered.topics, tiered.bucket),
        **login("status", pki.stranger_ca, tiered.work / "secrets"),
    }

    refusal = refused_status(tiered, settings, "stranger-ca")

    assert refusal.startswith(f"tierproxy status: TLS to {kafka.sasl_ssl.bootstrap}: "), refusal
    assert "upstream.ssl.ca.location" in refusal, refusal


def test_status_refuses_a_wrong_password(
    kafka: TlsKafka, s3: S3Info, pki: Pki, tiered: Tiered
) -> None:
    wrong = tiered.work / "wrong-password"
    wrong.write_text("not-the-password\n", encoding="utf-8")
    settings = {
        **shared_settings(kafka, s3, tiered.topics, tiered.bucket),
        **login("status", pki.ca, tiered.work / "secrets"),
        "upstream.sasl.password.file": str(wrong),
    }

    refusal = refused_status(tiered, settings, "wrong-password")

    assert refusal.startswith(
        f"tierproxy status: {kafka.sasl_ssl.bootstrap} refused the SASL/SCRAM-SHA-512 login "
        "as status: "
    ), refusal
    assert "upstream.sasl.*" in refusal, refusal
    assert "not-the-password" not in refusal


def refused_status(tiered: Tiered, settings: Mapping[str, Any], name: str) -> str:
    """What ``status`` printed when it stopped at its login: exactly one line, exit code 2."""
    config = config_file(tiered.work / f"{name}.toml", settings, tiered.topics.topic)
    result = tierproxy("status", "--config", str(config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr.rstrip("\n")


def test_serve_over_sasl_ssl_with_end_to_end_client_logins(
    kafka: TlsKafka, s3: S3Info, pki: Pki, tiered: Tiered, tmp_path: Path
) -> None:
    topic = tiered.topics.topic
    settings = {
        **storage_settings(s3, tiered.bucket, tiered.topics.metadata),
        **login("proxy", pki.ca, tmp_path / "secrets"),
        "ssl.certificate.location": str(pki.proxy.certificate),
        "ssl.key.location": str(pki.proxy.key),
    }
    proxy_trust = ssl.create_default_context(cafile=str(pki.ca))
    proxy = proxy_process(
        kafka.sasl_ssl, tmp_path, settings, listener="SASL_SSL", client_tls=proxy_trust
    )
    client = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    with running(proxy):
        presented = ssl.get_server_certificate((proxy.host, proxy.port), ca_certs=str(pki.ca))
        assert x509.load_pem_x509_certificate(presented.encode()) == proxy_certificate(pki)
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            consume(proxy.bootstrap, topic, "mallory", client, seconds=20)
        # A client that skips Metadata and fetches the tiered range straight away.
        as_mallory = login("mallory", pki.ca, tmp_path / "secrets")
        refused = asyncio.run(fetch_from_zero(proxy.bootstrap, topic, as_mallory))
        assert refused.error == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert refused.records == b""
        assert storage_reads(proxy) == 0, "reads from storage before the broker's refusal"

        assert consume(proxy.bootstrap, topic, "alice", client) == list(range(RECORDS))
        assert storage_reads(proxy) > 0
        assert proxy.metric("tierproxy_remote_fetch_requests_total") > 0
    log = proxy.process.log_path.read_text(encoding="utf-8", errors="replace")
    assert f"{kafka.sasl_ssl.bootstrap}: SASL_SSL SCRAM-SHA-512 as proxy" in log
    assert password("proxy") not in log
