"""Per-topic tiering policy: file rules over broker configs over Kafka's defaults."""

from __future__ import annotations

import pytest

from storage.config import ConfigError
from storage.tiering.config import TieringConfig
from storage.tiering.policy import (
    BrokerConfigValue,
    TopicPolicy,
    compile_rules,
    refusal_reason,
    resolve_policy,
)


def topic_value(value: str) -> BrokerConfigValue:
    return BrokerConfigValue(value=value, is_topic_override=True)


def broker_value(value: str) -> BrokerConfigValue:
    return BrokerConfigValue(value=value, is_topic_override=False)


def test_kafka_defaults_without_any_setting() -> None:
    policy = resolve_policy("t", compile_rules({}))
    assert policy == TopicPolicy()
    assert not policy.copies
    assert policy.effective_local_retention_ms == policy.retention_ms == 7 * 86_400_000


def test_first_matching_rule_wins_over_top_level_defaults() -> None:
    rules = compile_rules(
        {
            "segment.bytes": 1000,
            "topics": [
                {"pattern": "orders|pay-.*", "remote.storage.enable": True, "segment.ms": 5},
                {"pattern": ".*", "remote.storage.enable": True, "segment.bytes": 70},
            ],
        }
    )
    orders = resolve_policy("orders", rules)
    assert (orders.remote_storage_enable, orders.segment_bytes, orders.segment_ms) == (
        True,
        1000,
        5,
    )
    assert resolve_policy("pay-eu", rules).segment_ms == 5
    assert resolve_policy("pay", rules).segment_bytes == 70  # full match only
    assert resolve_policy("ordersX", rules).segment_bytes == 70


def test_precedence_between_file_and_broker() -> None:
    rules = compile_rules(
        {
            "retention.ms": 5000,
            "topics": [{"pattern": "special", "retention.ms": 9000}],
        }
    )
    inherited = {"retention.ms": broker_value("1000"), "segment.bytes": broker_value("2048")}
    overridden = {"retention.ms": topic_value("3000")}
    # File top level beats the broker's inherited value, which beats Kafka's default.
    policy = resolve_policy("t", rules, inherited)
    assert (policy.retention_ms, policy.segment_bytes) == (5000, 2048)
    # A value set on the topic at the broker beats the file's top level...
    assert resolve_policy("t", rules, overridden).retention_ms == 3000
    # ...but not a matching [[topics]] rule.
    assert resolve_policy("special", rules, overridden).retention_ms == 9000


def test_broker_booleans_and_compaction_refusal() -> None:
    rules = compile_rules({"remote.storage.enable": True})
    policy = resolve_policy("c", rules, {"cleanup.policy": topic_value("compact,delete")})
    assert policy.is_compacted
    reason = refusal_reason("c", policy)
    assert reason is not None and "compacted" in reason
    copy_off = resolve_policy("t", rules, {"remote.log.copy.disable": topic_value("TRUE")})
    assert copy_off.remote_log_copy_disable and not copy_off.copies
    assert refusal_reason("t", copy_off) is None


@pytest.mark.parametrize(
    ("flat", "message"),
    [
        ({"topics": [{"remote.storage.enable": True}]}, "pattern"),
        ({"topics": [{"pattern": "("}]}, "invalid"),
        ({"topics": [{"pattern": "x", "segment.byte": 1}]}, "segment.byte"),
        ({"segment.bytes": 3}, "at least 14"),
        ({"retention.ms": 1000, "local.retention.ms": 2000}, "must not exceed"),
        ({"retention.bytes": 10, "local.retention.bytes": -1}, "must not exceed"),
        ({"segment.ms": "soon"}, 'segment.ms = "soon": expected an integer'),
    ],
)
def test_bad_settings_are_refused(flat: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_rules(flat)


def test_inconsistent_merge_names_the_topic() -> None:
    rules = compile_rules({"local.retention.ms": 5000})
    with pytest.raises(ConfigError, match="'t'"):
        resolve_policy("t", rules, {"retention.ms": topic_value("1000")})
    with pytest.raises(ConfigError, match="not an integer"):
        resolve_policy("t", rules, {"segment.bytes": topic_value("big")})


def test_disablement_deletes_only_when_asked() -> None:
    keep = TopicPolicy(remote_storage_enable=False)
    drop = TopicPolicy(remote_storage_enable=False, remote_log_delete_on_disable=True)
    assert not keep.deletes_remote_data and drop.deletes_remote_data
    assert not TopicPolicy(
        remote_storage_enable=True, remote_log_delete_on_disable=True
    ).deletes_remote_data


def test_tiering_config_checks_ranges() -> None:
    assert TieringConfig().spill_root.name == "tierproxy-tiering"
    with pytest.raises(ConfigError, match=r"tiering\.broker\.kind"):
        TieringConfig(broker_kind="redpanda")
    with pytest.raises(ConfigError, match="at least 1"):
        TieringConfig(task_max_bytes=0)
