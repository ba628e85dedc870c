"""The ACLs each part needs, as documented, and the message that names a missing one."""

from pathlib import Path

from storage.kafka_acls import REQUIRED_ACLS, acl_table, denied, principal_of, required_acls
from storage.kafka_security import KafkaSecurityConfig


def test_the_message_names_operation_topic_and_principal() -> None:
    message = denied("DeleteRecords", "orders", "User:tiering")

    assert message.startswith("User:tiering lacks DELETE on topic 'orders' (DeleteRecords")


def test_the_principal_follows_the_login() -> None:
    scram = KafkaSecurityConfig(
        security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", sasl_username="tiering"
    )

    assert principal_of(scram) == "User:tiering"
    assert principal_of(KafkaSecurityConfig()) == "User:ANONYMOUS"


def test_the_operators_guide_shows_exactly_the_required_acls() -> None:
    guide = (Path(__file__).parents[3] / "docs" / "operations.md").read_text(encoding="utf-8")
    table = acl_table()
    head = table.splitlines()[0]

    assert head in guide, "docs/operations.md has no ACL table"
    start = guide.index(head)
    end = guide.find("\n\n", start)
    assert guide[start:end] == table, f"replace the table in docs/operations.md with:\n{table}"


def test_every_part_has_rows_and_each_row_is_one_kafka_acl() -> None:
    operations = {"READ", "WRITE", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS"}
    operations |= {"IDEMPOTENT_WRITE", "ALTER"}
    for part in ("serve", "tier", "status"):
        assert required_acls(part)
    for acl in REQUIRED_ACLS:
        assert acl.operation in operations
    unconditional = [(a.part, a.operation, a.resource) for a in REQUIRED_ACLS if not a.only_if]
    assert len(unconditional) == len(set(unconditional)), "a row is listed twice"


def test_no_part_but_the_pipeline_writes_or_deletes() -> None:
    for part in ("serve", "status"):
        granted = {(acl.operation, acl.resource) for acl in required_acls(part, conditional=True)}
        assert not granted & {("WRITE", "metadata topic"), ("DELETE", "tiered topic")}
