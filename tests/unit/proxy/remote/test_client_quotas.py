"""Client fetch quotas for remote bytes, with Kafka's throttle time (the principals they
apply to: ``tests/unit/proxy/test_identities.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.messages import ApiKey
from proxy.remote.client_quotas import ClientQuotas, QuotaEntity
from tests.fakes.clocks import ManualClock
from tests.fakes.kafka_requests import fetch_request
from tests.unit.proxy.remote.env import TOPIC, Env, EnvFactory, fetch, only


def quotas(clock: ManualClock[float], **bounds: int) -> ClientQuotas:
    return ClientQuotas(
        default_bytes_per_second=1000,
        bounds={
            ("User:alice", "app"): bounds.get("both", 10**9),
            ("User:alice", None): bounds.get("user", 10**9),
            (None, "app"): bounds.get("client", 10**9),
        },
        window_num=11,
        window_seconds=1.0,
        clock=clock,
    )


def test_the_most_specific_bound_applies() -> None:
    q = quotas(ManualClock(1000.0), both=1, user=2, client=3)
    assert q.bound(QuotaEntity(principal="User:alice", client_id="app")) == 1
    assert q.bound(QuotaEntity(principal="User:alice", client_id="other")) == 2
    assert q.bound(QuotaEntity(principal="User:bob", client_id="app")) == 3
    assert q.bound(QuotaEntity(principal=None, client_id="other")) == 1000


def test_a_fetch_over_quota_is_throttled_as_kafka_computes_and_not_counted() -> None:
    clock = ManualClock(1000.0)
    q = quotas(clock)
    entity = QuotaEntity(principal=None, client_id="x")
    assert q.record(entity, 5000) == 0  # 5000 B over the 10 s minimum span: 500 B/s
    # 5000 + 8000 = 13000 B / 10 s = 1300 B/s: (1300 - 1000) / 1000 * 10 s = 3 s.
    assert q.record(entity, 8000) == 3000
    assert q.throttle_time_ms(entity) == 0  # the throttled bytes were not counted
    clock.now += 5
    assert q.record(entity, 1000) == 0


async def test_remote_bytes_over_the_client_quota_are_throttled(make_env: EnvFactory) -> None:
    env = await make_env(client_quota_bytes_per_second=100)
    first = only(await fetch(env, 12, 0))
    assert first.records  # 100 B/s over 10 s: about 1000 bytes fit before the quota bites
    throttled = await fetch_whole(env, 5)
    part = throttled.responses[0].partitions[0]
    assert not part.records
    assert throttled.throttle_time.total_seconds() > 0


async def test_the_brokers_throttle_holds_for_remote_bytes_too(make_env: EnvFactory) -> None:
    env = await make_env()
    await fetch(env, 12, 0)  # learns where the broker's log starts
    env.broker.throttle_ms = 700
    answer = await fetch_whole(env, 4)
    assert not answer.responses[0].partitions[0].records
    assert answer.throttle_time.total_seconds() == pytest.approx(0.7)


async def fetch_whole(env: Env, offset: int) -> Any:
    """A Fetch v12 of partition 0 at ``offset``: the whole response (throttle time too)."""
    request = fetch_request(12, [(TOPIC, 0, offset, 1 << 20)])
    return await env.client.call(ApiKey.FETCH, 12, request)
