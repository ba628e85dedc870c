"""Sessionless Fetches answered without the broker while its word is recent
(``remote.fetch.broker.check.reuse.ms``, :mod:`proxy.remote.broker_checks`).

The predicate is checked against a brute-force model; the interceptor in a real proxy in
front of the in-process scripted broker model (see :mod:`tests.unit.proxy.remote.env`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import KafkaError
from protocol.fetch_bodies import FetchPosition, PartitionKey
from protocol.records import parse_batch_header
from proxy.remote.broker_checks import BrokerChecks
from tests.fakes.record_batches import batches_of
from tests.unit.proxy.remote.env import (
    LAST,
    TIERED_END,
    TOPIC,
    Env,
    EnvFactory,
    consume,
    fetch,
    only,
)

_REUSE_FOREVER = 3_600_000
"""A reuse interval no test outlives: whether the broker is asked depends on the rules only."""

_events = st.lists(
    st.tuples(
        st.sampled_from(["checked", "refused", "release"]),
        st.integers(0, 1),  # connection
        st.integers(0, 2),  # partition
        st.integers(-1, 1),  # leader epoch
        st.floats(0, 10),  # time
    ),
    max_size=30,
)


@given(
    events=_events,
    asked=st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 1)), max_size=3),
    now=st.floats(0, 12),
    reuse_ms=st.integers(0, 3000),
)
def test_vouch_matches_a_brute_force_model(
    events: list[tuple[str, int, int, int, float]],
    asked: list[tuple[int, int]],
    now: float,
    reuse_ms: int,
) -> None:
    checks = BrokerChecks(reuse_ms=reuse_ms)
    model: dict[tuple[int, PartitionKey], tuple[float, int]] = {}
    for kind, connection, partition, epoch, at in events:
        key: PartitionKey = (TOPIC, partition)
        if kind == "checked":
            checks.checked(connection, key, leader_epoch=epoch, at=at)
            if reuse_ms:
                model[(connection, key)] = (at, epoch)
        elif kind == "refused":
            checks.refused(connection, key)
            model.pop((connection, key), None)
        else:
            checks.release(connection)
            model = {k: v for k, v in model.items() if k[0] != connection}
    positions = [
        ((TOPIC, partition), FetchPosition(fetch_offset=0, partition_max_bytes=1, **epoch_of(e)))
        for partition, e in asked
    ]
    for connection in (0, 1):
        expected = (
            reuse_ms > 0
            and any(c == connection for c, _key in model)
            and all(
                (check := model.get((connection, key))) is not None
                and check[0] >= now - reuse_ms / 1000
                and check[1] == position.current_leader_epoch
                for key, position in positions
            )
        )
        assert checks.vouch(connection, positions, now=now) == expected


def epoch_of(epoch: int) -> dict[str, int]:
    return {"current_leader_epoch": epoch}


async def test_a_catch_up_consumer_asks_the_broker_only_until_it_has_answered(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    got = await consume(env, 12, partition_max_bytes=600)
    assert got == env.all_batches
    fetches = env.broker.fetches()
    # A reach probe (the broker's log start unknown), one probe that the broker answers
    # without error, then none until the consumer reaches the broker's own log.
    remote_fetches = [
        f for f in fetches if f.topics[0].partitions[0].fetch_offset <= TIERED_END + 1
    ]
    assert len(remote_fetches) == 2, [f.topics[0].partitions[0] for f in fetches]
    assert env.path.broker_checks.answered_alone > 0


async def test_the_brokers_refusal_holds_once_the_reuse_interval_is_over(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=20)
    await fetch(env, 12, 0)
    assert only(await fetch(env, 12, 0)).error_code == KafkaError.NONE  # checked now
    env.model.error = KafkaError.TOPIC_AUTHORIZATION_FAILED  # the ACL is revoked
    await asyncio.sleep(0.05)
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not part.records
    # Refused: nothing is answered without the broker any more.
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED


async def test_within_the_interval_remote_records_are_exactly_the_brokers_would_be(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    await fetch(env, 12, 0)
    await fetch(env, 12, 0)
    asked = len(env.broker.fetches())
    env.model.error = KafkaError.NOT_LEADER_OR_FOLLOWER  # not seen: the broker is not asked
    part = only(await fetch(env, 12, 4))
    assert part.error_code == KafkaError.NONE
    assert batches_of(part.records) == env.all_batches[2:5]
    assert part.high_watermark == LAST + 1
    assert part.log_start_offset == 0
    assert len(env.broker.fetches()) == asked


async def test_a_new_leader_epoch_goes_to_the_broker(make_env: EnvFactory) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    await fetch(env, 12, 0, leader_epoch=0)
    await fetch(env, 12, 0, leader_epoch=0)
    asked = len(env.broker.fetches())
    await fetch(env, 12, 0, leader_epoch=0)
    assert len(env.broker.fetches()) == asked
    env.model.error = KafkaError.FENCED_LEADER_EPOCH
    part = only(await fetch(env, 12, 0, leader_epoch=1))
    assert len(env.broker.fetches()) == asked + 1
    assert part.error_code == KafkaError.FENCED_LEADER_EPOCH


async def test_full_session_fetches_and_throttled_clients_always_ask_the_broker(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    env.broker.throttle_ms = 10
    for _ in range(3):
        await fetch(env, 12, 0)
    assert len(env.broker.fetches()) == 3
    env.broker.throttle_ms = 0
    for _ in range(3):
        response = await fetch(env, 12, 0, session_id=0, session_epoch=0)
        assert batches_of(only(response).records)
    assert len(env.broker.fetches()) == 6
    assert env.path.broker_checks.answered_alone == 0


async def _session_step(env: Env, session: int, epoch: int, offset: int) -> Any:
    """An incremental Fetch listing the partition at ``offset`` (the consumer moved on)."""
    return await fetch(env, 12, offset, session_id=session, session_epoch=epoch)


async def test_a_session_consumer_asks_the_broker_only_until_it_has_answered(
    make_env: EnvFactory,
) -> None:
    """Kafka's Java consumer: one full Fetch, then incremental ones; the proxy answers the
    in-step ones alone, and the broker still sees its own session's epochs in sequence."""
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    first = await fetch(env, 12, 0, session_id=0, session_epoch=0, partition_max_bytes=600)
    session = first.session_id
    got = batches_of(only(first).records)
    offset, epoch = parse_batch_header(got[-1]).next_offset, 1
    while offset <= LAST:
        response = await fetch(
            env, 12, offset, session_id=session, session_epoch=epoch, partition_max_bytes=600
        )
        assert response.error_code == KafkaError.NONE
        assert response.session_id == session
        epoch += 1
        batches = batches_of(only(response).records)
        assert batches, f"no progress at {offset}"
        got += batches
        offset = parse_batch_header(batches[-1]).next_offset
    assert got == env.all_batches
    assert env.path.broker_checks.answered_alone > 0
    incremental = [f.session_epoch for f in env.broker.fetches() if f.session_epoch > 0]
    assert incremental == list(range(1, len(incremental) + 1))
    assert len(incremental) < epoch - 1


async def test_a_partition_left_out_of_an_incremental_answer_counts_as_checked(
    make_env: EnvFactory,
) -> None:
    """Kafka leaves a session partition out of an incremental answer only without news and
    without error: the broker checked it, and the next step may go without the broker."""
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    env.broker.throttle_ms = 10  # a throttled answer vouches for nothing
    session = (await fetch(env, 12, 0, session_id=0, session_epoch=0)).session_id
    env.broker.throttle_ms = 0
    asked = len(env.broker.fetches())
    # The probe, at the broker's high watermark, has no news: the broker leaves it out.
    assert batches_of(only(await _session_step(env, session, 1, 1)).records)
    assert len(env.broker.fetches()) == asked + 1
    alone = env.path.broker_checks.answered_alone
    assert batches_of(only(await _session_step(env, session, 2, 2)).records)
    assert env.path.broker_checks.answered_alone == alone + 1
    assert len(env.broker.fetches()) == asked + 1


async def test_a_wrong_session_epoch_reaches_the_broker_and_ends_the_session(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    session = (await fetch(env, 12, 0, session_id=0, session_epoch=0)).session_id
    await _session_step(env, session, 1, 1)
    await _session_step(env, session, 2, 2)
    alone = env.path.broker_checks.answered_alone
    assert alone > 0
    asked = len(env.broker.fetches())
    response = await _session_step(env, session, 4, 3)  # epoch 3 skipped
    assert response.error_code == KafkaError.INVALID_FETCH_SESSION_EPOCH
    assert len(env.broker.fetches()) == asked + 1
    response = await _session_step(env, session, 5, 3)
    assert response.error_code == KafkaError.FETCH_SESSION_ID_NOT_FOUND
    assert env.path.broker_checks.answered_alone == alone


async def test_a_session_consumer_sees_the_brokers_refusal_once_the_interval_is_over(
    make_env: EnvFactory,
) -> None:
    env = await make_env(broker_check_reuse_ms=20)
    session = (await fetch(env, 12, 0, session_id=0, session_epoch=0)).session_id
    assert only(await _session_step(env, session, 1, 1)).error_code == KafkaError.NONE
    env.model.error = KafkaError.TOPIC_AUTHORIZATION_FAILED  # the ACL is revoked
    await asyncio.sleep(0.05)
    for epoch in (2, 3):
        part = only(await _session_step(env, session, epoch, 1))
        assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert not part.records
    assert env.broker.fetches()[-1].session_epoch == 3 - env.path.broker_checks.answered_alone


async def test_a_partition_beyond_the_remote_tier_goes_to_the_broker(make_env: EnvFactory) -> None:
    env = await make_env(broker_check_reuse_ms=_REUSE_FOREVER)
    await fetch(env, 12, 0)
    await fetch(env, 12, 0)
    asked = len(env.broker.fetches())
    part = only(await fetch(env, 12, TIERED_END + 1))
    assert parse_batch_header(batches_of(part.records)[0]).base_offset == TIERED_END + 1
    assert len(env.broker.fetches()) == asked + 1
