"""A gap between the remote tier and the broker's log: remote data below it is unreachable.

The broker of these tests (the IN-PROCESS SCRIPTED BROKER MODEL, see
:mod:`tests.unit.proxy.remote.env`) deleted offsets 30-33, which were never tiered: the
remote tier holds 0-29, the broker 34-39. Kafka can never show such a gap (its earliest
offset is the first it can serve contiguously), so neither may the proxy: EARLIEST is 34,
a Fetch below 34 is OFFSET_OUT_OF_RANGE, and a consumer that resets to the earliest offset
reads 34-39 once instead of looping over 0-29.
"""

from __future__ import annotations

from prometheus_client import generate_latest

from protocol.errors import KafkaError
from protocol.records import parse_batch_header
from tests.fakes.record_batches import batches_of
from tests.unit.proxy.remote.env import LAST, TIERED_END, TOPIC, EnvFactory, fetch, only
from tests.unit.proxy.remote.test_offsets_interceptors import list_offset

BROKER_START = TIERED_END + 5


async def test_earliest_skips_remote_data_below_the_gap(make_env: EnvFactory) -> None:
    env = await make_env(local_start=BROKER_START)
    for version in (1, 4, 8):
        assert (await list_offset(env, version, -2)).offset == BROKER_START


async def test_fetches_below_the_gap_are_out_of_range(make_env: EnvFactory) -> None:
    env = await make_env(local_start=BROKER_START)
    for offset in (0, 10, TIERED_END):
        part = only(await fetch(env, 12, offset))
        assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE, offset
        assert not part.records
    # Counted where an operator can alert on it: 4 offsets were never tiered (exactly once
    # the broker's log start is known: the consumer's reset asks for it).
    await list_offset(env, 8, -2)
    assert env.metrics is not None
    text = generate_latest(env.metrics.registry).decode()
    assert f'tierproxy_remote_log_gap_records{{topic="{TOPIC}"}} 4.0' in text
    # The first Fetch asked the broker just past the remote tier, not at the client's 0.
    first = env.broker.fetches()[0].topics[0].partitions[0]
    assert first.fetch_offset == TIERED_END + 1


async def test_a_consumer_resetting_to_earliest_reads_everything_after_the_gap_once(
    make_env: EnvFactory,
) -> None:
    env = await make_env(local_start=BROKER_START)
    offset, got = 0, []
    for _ in range(20):
        part = only(await fetch(env, 12, offset))
        if part.error_code == KafkaError.OFFSET_OUT_OF_RANGE:
            offset = (await list_offset(env, 8, -2)).offset  # auto.offset.reset=earliest
            continue
        assert part.error_code == KafkaError.NONE
        batches = batches_of(part.records)
        got += batches
        if not batches:
            continue
        offset = parse_batch_header(batches[-1]).next_offset
        if offset > LAST:
            break
    kept = [b for b in env.all_batches if parse_batch_header(b).base_offset >= BROKER_START]
    assert got == kept


async def test_no_gap_when_the_broker_starts_right_after_the_remote_tier(
    make_env: EnvFactory,
) -> None:
    env = await make_env(local_start=TIERED_END + 1)
    assert (await list_offset(env, 8, -2)).offset == 0
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.NONE and part.records
    assert not env.path.broker_view.gaps()


async def test_the_broker_moving_its_start_past_the_remote_end_closes_the_remote_tier(
    make_env: EnvFactory,
) -> None:
    env = await make_env(local_start=TIERED_END + 1)
    assert only(await fetch(env, 12, 0)).records  # contiguous: served remotely
    env.model.local_start = BROKER_START  # the broker's retention deletes 30-33
    # The proxy only learns of it from the broker; meanwhile no wrong data goes out.
    answers = [only(await fetch(env, 12, 10)) for _ in range(3)]
    assert all(not a.records or a.error_code == KafkaError.NONE for a in answers)
    assert (await list_offset(env, 8, -2)).offset == BROKER_START
    part = only(await fetch(env, 12, 10))
    assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE
