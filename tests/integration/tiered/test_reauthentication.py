"""tierproxy's own connections re-authenticate before their SASL sessions end (KIP-368).

One Apache Kafka 4.3.1 broker with ``connections.max.reauth.ms=5000`` and a SASL_SSL
listener offering SCRAM-SHA-512, PLAIN and OAUTHBEARER (Kafka's default, unsecured JWT
validator; tokens from :class:`~tests.integration.tiered.token_endpoint.TokenEndpoint`, which
live 20 s, so the broker's sessions are sometimes cut short by the token and tokens are
renewed during the test). The broker closes a connection at the first request it reads after
the session expired. For each mechanism, with a process burning a core beside:

- ``tierproxy serve`` (logged in as ``proxy``) follows the metadata topic over more than
  three session lifetimes with the one connection its metadata consumer opened: its log shows
  that connection renewed at least three times, and no retry of the consumer;
- one pipeline (logged in as ``tiering``, the clients of its driver kept across cycles) runs
  five cycles, idle for longer than a session between them, and each copies segments and has
  the broker delete them locally, with no error.

The proxy logs at DEBUG in ``log.format`` (logfmt for one mechanism, JSON for the others):
every line of its log must parse in that format.

The same broker serves a client's OAUTHBEARER login through the proxy (librdkafka's OIDC
login at the same token endpoint): the proxy's quota on remote bytes for user ``alice``
throttles it, as its token's ``sub`` names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from proxy.embedded import S3Info
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings
from storage.tiering.job import open_pipeline, settings_from_flat
from storage.tiering.report import CycleReport
from tests.certificates import Pki
from tests.conditions import wait_until
from tests.integration.tiered.scram import Topics, new_topics, password
from tests.integration.tiered.secured import TlsKafka, sasl_ssl_kafka
from tests.integration.tiered.support import (
    SEGMENT_BYTES,
    client_throttle_seconds,
    earliest_offsets,
    running,
)
from tests.integration.tiered.token_endpoint import TokenEndpoint
from tests.integration.tiering.workload import produce_numbered
from tests.log_lines import process_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SESSION_MS = 5_000
TOKEN_LIFETIME_S = 20
CYCLES = 5
USERS = ("tiering", "proxy", "alice")
MECHANISMS = ("SCRAM-SHA-512", "PLAIN", "OAUTHBEARER")
LOG_FORMATS = {"SCRAM-SHA-512": "logfmt", "PLAIN": "json", "OAUTHBEARER": "json"}
CONSUMER = "client id tierproxy-rlmm-consumer"


def broker_properties() -> dict[str, str]:
    """Three mechanisms on the SASL_SSL listener, and sessions of ``SESSION_MS``."""
    prefix = "listener.name.sasl_ssl"
    plain_users = " ".join(f'user_{user}="{password(user)}"' for user in USERS)
    return {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "connections.max.reauth.ms": str(SESSION_MS),
        f"{prefix}.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{prefix}.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        ),
        f"{prefix}.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";'
        ),
    }


@pytest.fixture(scope="module")
def tokens() -> Iterator[TokenEndpoint]:
    secrets = {user: password(user) for user in USERS}
    with TokenEndpoint(secrets, lifetime_s=TOKEN_LIFETIME_S) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsKafka]:
    work = tmp_path_factory.mktemp("reauth-kafka")
    with sasl_ssl_kafka(work, pki, USERS, broker_properties()) as kafka:
        yield kafka


@contextlib.contextmanager
def cpu_hog() -> Iterator[None]:
    """A process that keeps one core busy until the block ends."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def login(mechanism: str, user: str, pki: Pki, tokens: TokenEndpoint) -> dict[str, Any]:
    """``upstream.*`` for ``user`` over SASL_SSL with ``mechanism``."""
    settings: dict[str, Any] = {
        "upstream.security.protocol": "SASL_SSL",
        "upstream.ssl.ca.location": str(pki.ca),
        "upstream.sasl.mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        return {
            **settings,
            "upstream.sasl.oauthbearer.token.endpoint.url": tokens.url,
            "upstream.sasl.oauthbearer.client.id": user,
            "upstream.sasl.oauthbearer.client.secret": password(user),
        }
    return {**settings, "upstream.sasl.username": user, "upstream.sasl.password": password(user)}


def serve(kafka: TlsKafka, settings: dict[str, Any], pki: Pki, work: Path) -> TierproxyServer:
    listener = {
        "ssl.certificate.location": str(pki.proxy.certificate),
        "ssl.key.location": str(pki.proxy.key),
    }
    return proxy_process(
        kafka.sasl_ssl,
        work,
        {**settings, **listener},
        listener="SASL_SSL",
        client_tls=ssl.create_default_context(cafile=str(pki.ca)),
    )


async def tiering_cycles(
    kafka: TlsKafka,
    topics: Topics,
    settings: dict[str, Any],
    spark: Any,
    spill: Path,
    cycles: int = CYCLES,
) -> list[CycleReport]:
    """``cycles`` cycles of one pipeline, with new records and an idle session between."""
    pipeline_settings = settings_from_flat(
        {
            **settings,
            "bootstrap.servers": kafka.sasl_ssl.bootstrap,
            "tiering.spill.dir": str(spill),
            "topics": [
                {
                    "pattern": topics.topic,
                    "remote.storage.enable": True,
                    "segment.bytes": SEGMENT_BYTES,
                    "segment.ms": 86_400_000,
                    "local.retention.bytes": SEGMENT_BYTES,
                }
            ],
        }
    )
    reports = []
    async with open_pipeline(pipeline_settings, spark) as pipeline:
        for cycle in range(cycles):
            if cycle:
                await asyncio.to_thread(
                    produce_numbered, kafka.plaintext, topics.topic, 500, cycle * 500
                )
                # Longer than a session: the driver's connections wait past its end.
                await asyncio.sleep(1.2 * SESSION_MS / 1000)
            reports.append(await pipeline.run_cycle())
    return reports


def consumer_lines(lines: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines
        if line["logger"] == "storage.kafka_client.connection"
        and str(line.get("msg", "")).startswith(what)
        and CONSUMER in str(line.get("msg", ""))
    ]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_own_connections_renew_their_sessions_under_load(
    mechanism: str,
    kafka: TlsKafka,
    tokens: TokenEndpoint,
    s3: S3Info,
    s3_bucket: str,
    spark: Any,
    pki: Pki,
    tmp_path: Path,
) -> None:
    topics = new_topics(kafka.plaintext, f"reauth-{mechanism.lower()}")
    shared = storage_settings(s3, s3_bucket, topics.metadata)
    fmt = LOG_FORMATS[mechanism]
    proxy_settings = {
        **shared,
        **login(mechanism, "proxy", pki, tokens),
        "log.level": "DEBUG",
        "log.format": fmt,
    }
    tiering = {**shared, **login(mechanism, "tiering", pki, tokens)}
    tokens_before = tokens.issued.copy()

    with cpu_hog(), running(serve(kafka, proxy_settings, pki, tmp_path)) as proxy:
        reports = asyncio.run(
            tiering_cycles(kafka, topics, tiering, spark, tmp_path / f"spill-{uuid.uuid4()}")
        )
        wait_until(
            lambda: len(consumer_lines(process_log(proxy.process, fmt), "re-authenticated")) >= 3,
            timeout_s=120,
            what="three renewals of the metadata consumer's session",
        )
    lines = process_log(proxy.process, fmt)

    for report in reports:
        assert not report.errors, report.errors
        assert report.segments_copied > 0
    assert earliest_offsets(kafka.plaintext, topics.topic, 1)[0] > 0, "nothing deleted locally"
    assert len(consumer_lines(lines, "connected to")) == 1, "the metadata consumer reconnected"
    retries = [line for line in lines if str(line.get("msg", "")).startswith("consuming ")]
    assert retries == [], retries
    if mechanism == "OAUTHBEARER":
        issued = tokens.issued - tokens_before
        assert issued["proxy"] >= 2, "the proxy's token was never renewed"
        assert issued["tiering"] >= 2, "the pipeline's token was never renewed"


def test_an_oauthbearer_client_is_throttled_under_its_tokens_subject(
    kafka: TlsKafka,
    tokens: TokenEndpoint,
    s3: S3Info,
    s3_bucket: str,
    spark: Any,
    pki: Pki,
    tmp_path: Path,
) -> None:
    topics = new_topics(kafka.plaintext, "oauth-client")
    shared = storage_settings(s3, s3_bucket, topics.metadata)
    tiering = {**shared, **login("SCRAM-SHA-512", "tiering", pki, tokens)}
    (report,) = asyncio.run(tiering_cycles(kafka, topics, tiering, spark, tmp_path / "spill", 1))
    assert report.segments_copied > 0, report
    quota = [{"user": "alice", "bytes.per.second": 1000}]
    proxy_settings = {
        **shared,
        **login("SCRAM-SHA-512", "proxy", pki, tokens),
        "remote.fetch.client.quotas": quota,
    }

    with running(serve(kafka, proxy_settings, pki, tmp_path)) as proxy:
        consumer = Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca),
                "sasl.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": tokens.url,
                "sasl.oauthbearer.client.id": "alice",
                "sasl.oauthbearer.client.secret": password("alice"),
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(topics.topic, 0, 0)])

            def throttled() -> bool:
                consumer.poll(0.2)
                return client_throttle_seconds(proxy).get("User:alice", 0.0) > 0

            wait_until(throttled, timeout_s=120, what="a throttle of User:alice")
        finally:
            consumer.close()
