"""bench.jvm_threads: a broker's threads sorted into roles by their full names."""

from __future__ import annotations

import os

from bench.jvm_threads import ROLES, JvmThreads, _role


def test_kafka_thread_names_sort_into_roles() -> None:
    assert _role("data-plane-kafka-network-thread-1-ListenerName(PLAINTEXT)-PLAINTEXT-0") == (
        "network"
    )
    assert _role("data-plane-kafka-request-handler-3") == "handlers"
    assert _role("C2 CompilerThread0") == "jit"
    assert _role("C1 CompilerThre") == "jit"  # a name /proc cut at 15 characters
    assert _role("data-plane-kafk") == "other"  # cut: no longer tells which
    assert _role("kafka-scheduler-0") == "other"


def test_a_process_not_on_a_jvm_has_all_its_time_in_other() -> None:
    roles = JvmThreads(os.getpid()).cpu_by_role()
    assert set(roles) == set(ROLES)
    assert roles["other"] > 0
    assert roles["network"] == roles["handlers"] == roles["jit"] == 0
