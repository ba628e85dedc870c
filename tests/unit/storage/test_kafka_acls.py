"""The message that names a missing ACL."""

from storage.kafka_acls import denied, principal_of
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
