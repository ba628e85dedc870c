"""Which topics are tiered, and how: per-topic policy with Kafka's topic-config names.

A broker that knows nothing of tiered storage cannot hold ``remote.storage.enable`` or
``local.retention.ms`` for us, so the policy lives in tierproxy's config file, with the names
Kafka gives these topic configs. Top-level keys are defaults for every topic; ``[[topics]]``
tables override them for the topics whose name matches ``pattern`` (a Python regular
expression matched against the whole name, as Kafka's pattern subscriptions do)::

    remote.storage.enable = false
    segment.bytes = 134217728

    [[topics]]
    pattern = "orders|payments-.*"
    remote.storage.enable = true
    local.retention.ms = 3600000
    retention.ms = 2592000000

The first matching table wins. Where the file says nothing, the broker's own topic configs
(DescribeConfigs) fill in, so ``retention.ms`` set on the broker with ``kafka-configs.sh``
also bounds the remote tier. Precedence, strongest first:

1. the first ``[[topics]]`` table whose pattern matches;
2. a value set on the topic itself at the broker (DescribeConfigs source ``DYNAMIC_TOPIC_CONFIG``);
3. the file's top-level value;
4. any other value the broker reports (its broker-wide or default value);
5. Kafka's default.

Compacted topics (``cleanup.policy`` containing ``compact``) are refused: KIP-405 leaves
them out, because compaction rewrites old segments that would already be in the remote tier.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage.config import ConfigError, Problems, describe, from_settings, setting

__all__ = [
    "BrokerConfigValue",
    "TopicPolicy",
    "TopicRule",
    "TopicRules",
    "compile_rules",
    "refusal_reason",
    "resolve_policy",
]

_DAY_MS = 24 * 60 * 60 * 1000
_MIN_SEGMENT_BYTES = 14
"""Kafka's lower bound for ``segment.bytes`` (``LegacyRecord.RECORD_OVERHEAD_V0``)."""
_USE_TOTAL = -2
"""Kafka's ``local.retention.*`` value meaning "same as ``retention.*``"."""
_UNLIMITED = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPolicy:
    """How one topic is tiered: Kafka's topic configs that the pipeline acts on.

    :raises ConfigError: for a value Kafka would reject (a segment size below 14 bytes, a
        local retention longer than the total retention, ...).
    """

    remote_storage_enable: bool = setting(
        "remote.storage.enable",
        False,
        "Copy closed ranges of the topic to the remote tier.",
        kafka="remote.storage.enable",
    )
    segment_bytes: int = setting(
        "segment.bytes",
        1024 * 1024 * 1024,
        "A remote segment closes before it would exceed this many bytes.",
        kafka="segment.bytes",
    )
    segment_ms: int = setting(
        "segment.ms",
        7 * _DAY_MS,
        "A remote segment closes once its first batch is older than this, so that quiet "
        "topics are tiered too.",
        kafka="segment.ms",
    )
    retention_ms: int = setting(
        "retention.ms",
        7 * _DAY_MS,
        "Age after which remote segments are deleted (-1: never). Covers the whole log, "
        "remote and local.",
        kafka="retention.ms",
    )
    retention_bytes: int = setting(
        "retention.bytes",
        _UNLIMITED,
        "Size of the whole log (remote and local) above which the oldest remote segments "
        "are deleted (-1: no limit).",
        kafka="retention.bytes",
    )
    local_retention_ms: int = setting(
        "local.retention.ms",
        _USE_TOTAL,
        "Age after which tiered data may leave the broker (DeleteRecords); -2: retention.ms.",
        kafka="local.retention.ms",
    )
    local_retention_bytes: int = setting(
        "local.retention.bytes",
        _USE_TOTAL,
        "Local size above which the oldest tiered data may leave the broker; -2: retention.bytes.",
        kafka="local.retention.bytes",
    )
    remote_log_copy_disable: bool = setting(
        "remote.log.copy.disable",
        False,
        "Stop copying: the remote tier becomes read-only, remote retention still applies and "
        "local data follows the broker's retention (KIP-950).",
        kafka="remote.log.copy.disable",
    )
    remote_log_delete_on_disable: bool = setting(
        "remote.log.delete.on.disable",
        False,
        "When remote.storage.enable is false, delete the topic's remote segments (KIP-950).",
        kafka="remote.log.delete.on.disable",
    )
    cleanup_policy: str = setting(
        "cleanup.policy",
        "delete",
        "Kafka's cleanup policy; topics with compact are never tiered.",
        kafka="cleanup.policy",
    )

    def __post_init__(self) -> None:
        if self.segment_bytes < _MIN_SEGMENT_BYTES:
            raise ConfigError(f"segment.bytes must be at least {_MIN_SEGMENT_BYTES}")
        if self.segment_ms < 1:
            raise ConfigError("segment.ms must be at least 1")
        for key, value, low in (
            ("retention.ms", self.retention_ms, _UNLIMITED),
            ("retention.bytes", self.retention_bytes, _UNLIMITED),
            ("local.retention.ms", self.local_retention_ms, _USE_TOTAL),
            ("local.retention.bytes", self.local_retention_bytes, _USE_TOTAL),
        ):
            if value < low:
                raise ConfigError(f"{key} must be at least {low}, not {value}")
        for key, local, total in (
            ("ms", self.effective_local_retention_ms, self.retention_ms),
            ("bytes", self.effective_local_retention_bytes, self.retention_bytes),
        ):
            if total != _UNLIMITED and (local == _UNLIMITED or local > total):
                raise ConfigError(
                    f"local.retention.{key} ({local}) must not exceed retention.{key} ({total})"
                )

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms`` with -2 resolved to ``retention.ms`` (-1: unlimited)."""
        if self.local_retention_ms == _USE_TOTAL:
            return self.retention_ms
        return self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes`` with -2 resolved to ``retention.bytes`` (-1: unlimited)."""
        if self.local_retention_bytes == _USE_TOTAL:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def is_compacted(self) -> bool:
        return "compact" in _policy_words(self.cleanup_policy)

    @property
    def copies(self) -> bool:
        """Whether new data of this topic is copied to the remote tier."""
        return self.remote_storage_enable and not self.remote_log_copy_disable

    @property
    def manages_local_retention(self) -> bool:
        """Whether the pipeline advances the broker's log start for this topic.

        With copying disabled KIP-950 hands local data back to the topic-wide retention,
        which the broker applies on its own.
        """
        return self.copies

    @property
    def deletes_remote_data(self) -> bool:
        """Whether every remote segment of the topic is to be deleted (KIP-950 disablement)."""
        return not self.remote_storage_enable and self.remote_log_delete_on_disable


def _policy_words(value: str) -> set[str]:
    return {word.strip().lower() for word in value.split(",")}


_POLICY_KEYS: dict[str, dataclasses.Field[Any]] = {
    info.key: field
    for info, field in zip(describe(TopicPolicy), dataclasses.fields(TopicPolicy), strict=True)
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigValue:
    """One topic config as the broker's DescribeConfigs reports it."""

    value: str | None
    is_topic_override: bool
    """Set on the topic itself (source ``DYNAMIC_TOPIC_CONFIG``), not inherited."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRule:
    """One ``[[topics]]`` table: a name pattern and the settings it overrides."""

    pattern: re.Pattern[str]
    settings: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRules:
    """The policy part of a config file: top-level defaults and ``[[topics]]`` rules."""

    defaults: Mapping[str, Any]
    rules: tuple[TopicRule, ...]

    def matching(self, topic: str) -> TopicRule | None:
        """The first rule whose pattern matches the whole topic name."""
        return next((r for r in self.rules if r.pattern.fullmatch(topic)), None)


def compile_rules(flat: Mapping[str, Any]) -> TopicRules:
    """Read the policy settings out of a flattened config file.

    :raises ConfigError: for top-level policy values Kafka would refuse, and for ``[[topics]]``
        tables without a valid ``pattern``, with a key that is not a topic setting (so that
        typos do not silently tier nothing) or with values Kafka would refuse: every one of
        them (:class:`~storage.config.ConfigProblems`).
    """
    problems = Problems()
    defaults = {key: flat[key] for key in _POLICY_KEYS if key in flat}
    valid_defaults = problems.build(TopicPolicy, defaults) is not None
    tables = flat.get("topics", ())
    if not isinstance(tables, Sequence) or isinstance(tables, str):
        problems.add("topics must be an array of tables ([[topics]])")
        tables = ()
    rules = []
    for number, table in enumerate(tables, start=1):
        rule = _rule(number, table, defaults if valid_defaults else {}, problems)
        if rule is not None:
            rules.append(rule)
    problems.raise_if_any()
    return TopicRules(defaults=defaults, rules=tuple(rules))


def _rule(
    number: int, table: Any, defaults: Mapping[str, Any], problems: Problems
) -> TopicRule | None:
    """The ``[[topics]]`` table numbered ``number``, or ``None`` with its problems noted."""
    if not isinstance(table, Mapping):
        problems.add(f"[[topics]] entry {number} is not a table")
        return None
    pattern = table.get("pattern")
    if not isinstance(pattern, str):
        problems.add(f"[[topics]] entry {number} needs a pattern string")
        return None
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        problems.add(f"[[topics]] pattern {pattern!r} is invalid: {err}")
        return None
    settings = {k: v for k, v in table.items() if k != "pattern"}
    where = f"[[topics]] pattern {pattern!r}"
    problems.unknown(settings, [TopicPolicy], where=where)
    if problems.build(TopicPolicy, {**defaults, **settings}, where=where) is None:
        return None
    return TopicRule(pattern=compiled, settings=settings)


def resolve_policy(
    topic: str, rules: TopicRules, broker: Mapping[str, BrokerConfigValue] | None = None
) -> TopicPolicy:
    """The policy of ``topic``: the file's rules over the broker's configs over Kafka's defaults.

    :param broker: the topic's configs from DescribeConfigs, or ``None`` where the broker does
        not expose them.
    :raises ConfigError: when the merged values are inconsistent (for example a broker
        ``retention.ms`` below the file's ``local.retention.ms``); the message names the topic.
    """
    broker = broker or {}
    merged: dict[str, Any] = {}
    for key, field in _POLICY_KEYS.items():
        reported = broker.get(key)
        if reported is not None and reported.value is not None and not reported.is_topic_override:
            merged[key] = _parse_broker_value(key, reported.value, field.default)
    merged.update(rules.defaults)
    for key, field in _POLICY_KEYS.items():
        reported = broker.get(key)
        if reported is not None and reported.value is not None and reported.is_topic_override:
            merged[key] = _parse_broker_value(key, reported.value, field.default)
    rule = rules.matching(topic)
    if rule is not None:
        merged.update(rule.settings)
    try:
        return from_settings(TopicPolicy, merged)
    except ConfigError as err:
        raise ConfigError(f"topic {topic!r}: {err}") from err


def refusal_reason(topic: str, policy: TopicPolicy) -> str | None:
    """Why ``topic`` cannot be tiered although the policy asks for it, or ``None``."""
    if policy.remote_storage_enable and policy.is_compacted:
        return (
            f"topic {topic!r} has cleanup.policy={policy.cleanup_policy}: compacted topics "
            "cannot be tiered (KIP-405 non-goal), so it is left alone"
        )
    return None


def _parse_broker_value(key: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        return value.strip().lower() == "true"
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError as err:
            raise ConfigError(f"broker reports {key}={value!r}, not an integer") from err
    return value
