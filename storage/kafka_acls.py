"""The ACLs each part of tierproxy needs, and which one it lacks when the broker refuses it.

:data:`REQUIRED_ACLS` is the one list of what ``serve``, ``tier`` and ``status`` need on the
cluster, as principals of their own: ``docs/operations.md`` shows it as a table
(:func:`acl_table`, checked by a unit test) and the integration tests grant exactly its rows,
so the documentation, the tests and the product cannot drift apart. A new request that needs
a new ACL is a new row.

Kafka answers TOPIC_AUTHORIZATION_FAILED without naming the operation it denied, but each
request needs exactly one operation on the topic (Kafka's "Operations and Resources on
Protocols" table): Fetch needs READ, Produce WRITE, DeleteRecords DELETE, DescribeConfigs
DESCRIBE_CONFIGS, Metadata and ListOffsets DESCRIBE. An operator reading the pipeline's
report or the proxy's log then knows which ACL to add, for which principal, on what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from storage.kafka_security import KafkaSecurityConfig

__all__ = [
    "OPERATIONS",
    "REQUIRED_ACLS",
    "Part",
    "RequiredAcl",
    "Resource",
    "acl_table",
    "denied",
    "principal_of",
    "required_acls",
]

Part = Literal["serve", "tier", "status"]
"""The command whose own principal needs the ACL (one principal per part)."""
Resource = Literal["tiered topic", "metadata topic", "cluster", "transactional id"]
"""What the ACL is on: each topic tiered by ``[[topics]]``, the topic of
``remote.log.metadata.topic.name``, the cluster, or the pipeline's transactional id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequiredAcl:
    """One ALLOW ACL a part needs: ``operation`` (Kafka's AclOperation name) on ``resource``."""

    part: Part
    operation: str
    resource: Resource
    why: str
    only_if: str = ""
    """The condition under which it is needed; empty: always."""


REQUIRED_ACLS: Final[tuple[RequiredAcl, ...]] = (
    RequiredAcl(
        part="tier",
        operation="READ",
        resource="tiered topic",
        why="copy closed ranges (Fetch)",
    ),
    RequiredAcl(
        part="tier",
        operation="DESCRIBE_CONFIGS",
        resource="tiered topic",
        why="the broker's retention and segment settings",
    ),
    RequiredAcl(
        part="tier",
        operation="DELETE",
        resource="tiered topic",
        why="DeleteRecords once a range is in the remote tier",
    ),
    RequiredAcl(
        part="tier",
        operation="READ",
        resource="metadata topic",
        why="consume segment metadata",
    ),
    RequiredAcl(
        part="tier",
        operation="WRITE",
        resource="metadata topic",
        why="publish segment metadata (WRITE also lets its idempotent producer get a "
        "producer id, KIP-679)",
    ),
    RequiredAcl(
        part="tier",
        operation="WRITE",
        resource="transactional id",
        why="hold the cluster's tiering, one pipeline at a time: InitProducerId, its "
        "transactions, DescribeTransactions (WRITE implies DESCRIBE; `--transactional-id` in "
        "`kafka-acls`, name `tierproxy-tiering.<metadata topic>` unless `transactional.id` "
        "is set)",
    ),
    RequiredAcl(
        part="tier",
        operation="DESCRIBE_CONFIGS",
        resource="metadata topic",
        why="check that its retention.ms is -1, as Kafka's is",
    ),
    RequiredAcl(
        part="tier",
        operation="CREATE",
        resource="metadata topic",
        why="create it with the configured partitions, replication and retention",
        only_if="tierproxy creates the topic (else create it beforehand)",
    ),
    RequiredAcl(
        part="tier",
        operation="DESCRIBE_CONFIGS",
        resource="cluster",
        why="check that the broker runs no native tiered storage that would read the topic",
        only_if="remote.log.metadata.topic.name is Kafka's own __remote_log_metadata",
    ),
    RequiredAcl(
        part="serve",
        operation="READ",
        resource="metadata topic",
        why="follow the segment metadata",
    ),
    RequiredAcl(
        part="serve",
        operation="DESCRIBE_CONFIGS",
        resource="metadata topic",
        why="check that its retention.ms is -1, as Kafka's is",
    ),
    RequiredAcl(
        part="serve",
        operation="DESCRIBE",
        resource="tiered topic",
        why="topic ids, to tell a re-created topic from its namesake; ListOffsets of its own, "
        "so a partition's first probe reads nothing",
    ),
    RequiredAcl(
        part="serve",
        operation="DESCRIBE_CONFIGS",
        resource="cluster",
        why="check that the broker runs no native tiered storage that would read the topic",
        only_if="remote.log.metadata.topic.name is Kafka's own __remote_log_metadata",
    ),
    RequiredAcl(
        part="status",
        operation="READ",
        resource="tiered topic",
        why="the broker's log start and end",
    ),
    RequiredAcl(
        part="status",
        operation="DESCRIBE_CONFIGS",
        resource="tiered topic",
        why="the broker's retention and segment settings",
    ),
    RequiredAcl(
        part="status",
        operation="READ",
        resource="metadata topic",
        why="the remote log",
    ),
    RequiredAcl(
        part="status",
        operation="DESCRIBE_CONFIGS",
        resource="metadata topic",
        why="check that its retention.ms is -1, as Kafka's is",
    ),
    RequiredAcl(
        part="status",
        operation="DESCRIBE_CONFIGS",
        resource="cluster",
        why="check that the broker runs no native tiered storage that would read the topic",
        only_if="remote.log.metadata.topic.name is Kafka's own __remote_log_metadata",
    ),
)
"""Everything each part needs, and nothing more (the integration tests grant exactly the
unconditional rows, one principal per part)."""

_TABLE_HEAD: Final = "| principal | operation | resource | needed for |\n| --- | --- | --- | --- |"


def required_acls(part: Part, *, conditional: bool = False) -> tuple[RequiredAcl, ...]:
    """The rows of ``part``: those needed always, and the conditional ones if asked."""
    return tuple(
        acl for acl in REQUIRED_ACLS if acl.part == part and (conditional or not acl.only_if)
    )


def acl_table() -> str:
    """:data:`REQUIRED_ACLS` as the Markdown table of ``docs/operations.md``."""
    rows = [
        f"| `{acl.part}` | {acl.operation} | {_RESOURCE_TEXT[acl.resource]} | {acl.why}"
        + (f"; only if {acl.only_if}" if acl.only_if else "")
        + " |"
        for acl in REQUIRED_ACLS
    ]
    return "\n".join([_TABLE_HEAD, *rows])


_RESOURCE_TEXT: Final[dict[Resource, str]] = {
    "tiered topic": "each tiered topic",
    "metadata topic": "metadata topic",
    "cluster": "cluster",
    "transactional id": "the pipeline's transactional id",
}

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
