"""Say which ACL tierproxy's own principal lacks when the broker refuses it.

Kafka answers TOPIC_AUTHORIZATION_FAILED without naming the operation it denied, but each
request needs exactly one operation on the topic (Kafka's "Operations and Resources on
Protocols" table): Fetch needs READ, Produce WRITE, DeleteRecords DELETE, DescribeConfigs
DESCRIBE_CONFIGS, Metadata and ListOffsets DESCRIBE. An operator reading the pipeline's
report or the proxy's log then knows which ACL to add, for which principal, on what.
"""

from __future__ import annotations

from typing import Final

from storage.kafka_security import KafkaSecurityConfig

__all__ = ["OPERATIONS", "denied", "principal_of"]

OPERATIONS: Final = {
    "Fetch": "READ",
    "Produce": "WRITE",
    "AddPartitionsToTxn": "WRITE",
    "DeleteRecords": "DELETE",
    "DescribeConfigs": "DESCRIBE_CONFIGS",
    "Metadata": "DESCRIBE",
    "ListOffsets": "DESCRIBE",
}
"""The topic operation each request needs, by Kafka's request name."""


def principal_of(security: KafkaSecurityConfig) -> str:
    """The principal the broker sees for tierproxy's own connections, as ACLs name it."""
    if security.sasl and security.sasl_mechanism != "OAUTHBEARER":
        return f"User:{security.sasl_username}"
    if security.sasl:
        return f"the OAUTHBEARER principal of client {security.sasl_oauthbearer_client_id}"
    if security.ssl_certificate_location:
        return "the principal of tierproxy's client certificate"
    return "User:ANONYMOUS"


def denied(request: str, topic: str, principal: str) -> str:
    """The message for a refused ``request`` (a key of :data:`OPERATIONS`) on ``topic``."""
    return (
        f"{principal} lacks {OPERATIONS[request]} on topic {topic!r} ({request} answered "
        "TOPIC_AUTHORIZATION_FAILED); add that ACL (docs/operations.md lists what each part needs)"
    )
