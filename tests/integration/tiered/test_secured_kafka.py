"""tierproxy on a secured Apache Kafka: SCRAM users, ``StandardAuthorizer``, least privilege.

One broker with a PLAINTEXT listener (the harness's readiness probe and the test's own admin,
``User:ANONYMOUS`` as super user) and a SASL_PLAINTEXT listener with SCRAM-SHA-512, where
every tierproxy part and every client logs in as its own user:

- ``tiering`` (the pipeline) has exactly the ACLs ``docs/operations.md`` lists, and tiers a
  topic; with any one of them taken away the cycle fails with a message naming it;
- ``proxy`` (``tierproxy serve``'s own connections) has exactly its documented ACLs;
- ``alice`` may read the topic through the proxy and gets every record, the tiered ones from
  the remote tier;
- ``mallory`` may not: TOPIC_AUTHORIZATION_FAILED, and the proxy reads nothing from storage
  on her behalf (issue 11.14).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

from protocol.errors import KafkaError
from proxy.embedded import S3Info
from proxy.embedded.tierproxy import proxy_process, storage_settings, write_config
from tests.conditions import wait_until
from tests.integration.tiered.scram import (
    RECORDS,
    Topics,
    acl,
    apply_acls,
    consume,
    fetch_from_zero,
    group_acls,
    new_topics,
    pipeline_acls,
    proxy_acls,
    status_acls,
    storage_reads,
)
from tests.integration.tiered.secured import (
    CLIENT_SECURITY,
    SecuredKafka,
    config_file,
    cycle,
    login,
    tierproxy,
)
from tests.integration.tiered.support import earliest_offsets, running
from tests.log_lines import parse_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_least_privilege_tiering_and_reads_through_the_proxy(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    topic, metadata_topic = topics.topic, topics.metadata
    apply_acls(secured.plaintext, pipeline_acls(topic, metadata_topic).values())
    apply_acls(secured.plaintext, proxy_acls(topic, metadata_topic).values())
    apply_acls(
        secured.plaintext,
        [acl("alice", topic, AclOperation.READ), *group_acls("alice", "mallory")],
    )

    report = cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill")

    assert not report.errors, report.errors
    assert report.segments_copied > 0
    assert earliest_offsets(secured.plaintext, topic, 1)[0] > 0, "no local data was deleted"
    settings = {**storage_settings(s3, s3_bucket, metadata_topic), **login("proxy")}
    with running(proxy_process(secured.sasl, tmp_path, settings)) as proxy:
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            consume(proxy.bootstrap, topic, "mallory", CLIENT_SECURITY, seconds=20)
        # A client that skips Metadata and fetches the tiered range straight away.
        refused = asyncio.run(fetch_from_zero(proxy.bootstrap, topic, login("mallory")))
        assert refused.error == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert refused.records == b""
        assert storage_reads(proxy) == 0, "reads from storage before the broker's refusal"

        assert consume(proxy.bootstrap, topic, "alice", CLIENT_SECURITY) == list(range(RECORDS))
        assert storage_reads(proxy) > 0


@pytest.mark.parametrize(
    "missing", list(pipeline_acls("topic", "metadata")), ids=lambda text: text.replace(" ", "-")
)
def test_the_pipeline_names_the_acl_it_lacks(
    missing: str, secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    granted = pipeline_acls(topics.topic, topics.metadata)
    del granted[missing]
    apply_acls(secured.plaintext, granted.values())

    try:
        messages = " ".join(cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill").errors)
    except Exception as err:
        messages = f"{type(err).__name__}: {err}"

    operation = missing.split(" on ", maxsplit=1)[0]
    resource = "TransactionalId" if missing.endswith("transactional id") else "topic"
    assert f"User:tiering lacks {operation} on {resource}" in messages, messages


def command_settings(
    secured: SecuredKafka, s3: S3Info, bucket: str, topics: Topics
) -> dict[str, Any]:
    return {
        "bootstrap.servers": secured.sasl.bootstrap,
        **storage_settings(s3, bucket, topics.metadata),
    }


def named(missing: str, topics: Topics) -> str:
    """What ``denied`` says of a missing ACL named as the ACL tables key it."""
    operation, resource = missing.split(" on the ")
    name = topics.metadata if resource == "metadata topic" else topics.topic
    return f"lacks {operation} on topic {name!r}"


@pytest.mark.parametrize(
    "missing", list(status_acls("topic", "metadata")), ids=lambda text: text.replace(" ", "-")
)
def test_status_names_the_acl_it_lacks(
    missing: str, secured: SecuredKafka, s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    granted = status_acls(topics.topic, topics.metadata)
    del granted[missing]
    apply_acls(secured.plaintext, granted.values())
    settings = {**command_settings(secured, s3, s3_bucket, topics), **login("status")}

    result = tierproxy(
        "status", "--config", str(config_file(tmp_path / "s.toml", settings, topics.topic))
    )

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"User:status {named(missing, topics)}" in output, output
    assert "Traceback" not in output


def test_status_needs_nothing_more_than_its_acls_and_logs_in_its_format(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    apply_acls(secured.plaintext, status_acls(topics.topic, topics.metadata).values())
    settings = {
        **command_settings(secured, s3, s3_bucket, topics),
        **login("status"),
        "log.level": "INFO",
        "log.format": "json",
    }

    result = tierproxy(
        "status",
        "--config",
        str(config_file(tmp_path / "s.toml", settings, topics.topic)),
        "--json",
    )

    assert result.returncode == 0, result.stdout + result.stderr
    lines = parse_log(result.stderr, "json")  # every line of stderr is a JSON log line
    assert any(
        line["level"] == "info" and line.get("msg", "").startswith("connected to the cluster at")
        for line in lines
    ), result.stderr


@pytest.mark.parametrize(
    "missing",
    [what for what in proxy_acls("topic", "metadata") if what.endswith("metadata topic")],
    ids=lambda text: text.replace(" ", "-"),
)
def test_serve_stops_at_start_naming_the_acl_it_lacks_on_the_metadata_topic(
    missing: str, secured: SecuredKafka, s3: S3Info, s3_bucket: str, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    granted = proxy_acls(topics.topic, topics.metadata)
    del granted[missing]
    apply_acls(secured.plaintext, granted.values())
    settings = {
        **command_settings(secured, s3, s3_bucket, topics),
        **login("proxy"),
        "remote.log.storage.system.enable": True,
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.format": "logfmt",
    }

    result = tierproxy("serve", "--config", str(write_config(tmp_path / "serve.toml", settings)))

    assert result.returncode == 2, result.stderr
    refusal = result.stderr.splitlines()[-1]
    assert refusal.startswith(f"tierproxy serve: User:proxy {named(missing, topics)}"), refusal
    assert "Traceback" not in result.stderr
    parse_log("\n".join(result.stderr.splitlines()[:-1]), "logfmt")  # every log line


def test_serve_warns_of_a_tiered_topic_it_may_not_describe(
    secured: SecuredKafka, s3: S3Info, s3_bucket: str, spark: Any, tmp_path: Path
) -> None:
    topics = new_topics(secured.plaintext, "secured")
    apply_acls(secured.plaintext, pipeline_acls(topics.topic, topics.metadata).values())
    granted = proxy_acls(topics.topic, topics.metadata)
    del granted["DESCRIBE on the tiered topic"]
    apply_acls(secured.plaintext, granted.values())
    assert not cycle(secured, s3, spark, s3_bucket, topics, tmp_path / "spill").errors
    settings = {
        **storage_settings(s3, s3_bucket, topics.metadata),
        **login("proxy"),
        "log.format": "json",
    }

    with running(proxy_process(secured.sasl, tmp_path, settings)) as proxy:
        wait_until(
            lambda: (
                f"User:proxy lacks DESCRIBE on topic {topics.topic!r}" in proxy.process.log_tail()
            ),
            timeout_s=120,
            what="a warning naming the missing DESCRIBE",
        )
