"""The proxy's own ListOffsets before a partition's first Fetch (issue 11, item 5).

:class:`~proxy.remote.broker_offsets.BrokerOffsets` over a scripted lister (a stand-in for
the product's Kafka client, answering as Kafka's ``Partition.fetchOffsetForTimestamp``
does), and the Metadata interceptor that hands it the tiered partitions of an answer.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import KafkaError
from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from protocol.messages import (
    ApiKey,
    build,
    response_class,
)
from protocol.records import parse_batch_header
from proxy.interceptors.metadata_offsets import MetadataOffsets
from proxy.remote.broker_offsets import BrokerOffsets, LedPartition
from proxy.remote.broker_view import BrokerView, PartitionState
from proxy.remote.fetch_plan import PROBE_BYTES
from proxy.remote.offsets import EARLIEST, LATEST, RemoteRange
from storage.kafka_client import READ_COMMITTED, BrokerConnectionError, ListedOffset
from storage.model import TopicIdPartition
from tests.conditions import wait_for
from tests.fakes.clocks import ManualClock
from tests.fakes.kafka_requests import metadata_request
from tests.fakes.kafka_responses import metadata_topics
from tests.fakes.record_batches import batches_of
from tests.unit.proxy.conftest import through
from tests.unit.proxy.remote.env import (
    LAST,
    TIERED_END,
    TOPIC,
    Env,
    EnvFactory,
    fetch,
    metadata_call,
    only,
)

TOPIC_ID = uuid.UUID(int=7)
REMOTE_END = 29
HIGH_WATERMARK, LAST_STABLE, LOG_START = 40, 36, 30


def tp(partition: int, topic: str = "tiered") -> TopicIdPartition:
    return TopicIdPartition(topic_id=TOPIC_ID, topic=topic, partition=partition)


@dataclass
class Tier:
    """Remote ranges: partitions of ``tiered`` hold 0-29, any other topic nothing."""

    def remote_range(self, part: TopicIdPartition) -> RemoteRange | None:
        if part.topic != "tiered":
            return None
        return RemoteRange(start=0, end=REMOTE_END, lineage=(EpochEntry(epoch=0, start_offset=0),))

    def partition(
        self, *, topic: str | None, topic_id: uuid.UUID | None, partition: int
    ) -> TopicIdPartition | None:
        if topic_id == TOPIC_ID or topic == "tiered":
            return tp(partition)
        return None


@dataclass
class Lister:
    """Answers ListOffsets as a Kafka leader with every partition at the same offsets."""

    gate: asyncio.Event | None = None
    """Answers wait until it is set (a slow leader)."""
    errors: dict[int, KafkaError] = field(default_factory=dict)
    """Per partition, the error every answer for it carries."""
    raises: Exception | None = None
    asked: list[tuple[int | None, int, int, list[tuple[str, int]]]] = field(default_factory=list)
    """(leader, timestamp, isolation level, partitions) of each request."""

    async def list_offsets(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        isolation_level: int = 0,
    ) -> list[ListedOffset]:
        timestamps = {ts for _t, _p, ts in targets}
        assert len(timestamps) == 1, "one question per request"
        assert len({(t, p) for t, p, _ts in targets}) == len(targets), "INVALID_REQUEST"
        (timestamp,) = timestamps
        self.asked.append((node_id, timestamp, isolation_level, [(t, p) for t, p, _ in targets]))
        if self.gate is not None:
            await self.gate.wait()
        if self.raises is not None:
            raise self.raises
        if timestamp == EARLIEST:
            offset = LOG_START
        elif isolation_level == READ_COMMITTED:
            offset = LAST_STABLE
        else:
            offset = HIGH_WATERMARK
        return [
            ListedOffset(
                topic=t,
                partition=p,
                error=self.errors.get(p, KafkaError.NONE),
                offset=-1 if p in self.errors else offset,
                timestamp=-1,
                leader_epoch=0,
            )
            for t, p, _ts in targets
        ]


def fields(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [
        getattr(record, "tierproxy_fields", {})
        for record in caplog.records
        if record.getMessage() == name
    ]


def offsets(
    lister: Lister | None, view: BrokerView, *, hold_seconds: float = 5, max_partitions: int = 100
) -> BrokerOffsets:
    return BrokerOffsets(
        broker_view=view,
        ranges=Tier(),
        lister=lister,
        hold_seconds=hold_seconds,
        max_partitions=max_partitions,
    )


def led(*partitions: int, leader: int = 1, topic: str = "tiered") -> list[LedPartition]:
    return [LedPartition(tp=tp(p, topic), leader=leader) for p in partitions]


async def test_three_questions_per_leader_seed_the_probe_offsets_and_reachability() -> None:
    lister, view = Lister(), BrokerView()
    learner = offsets(lister, view)
    await learner.learn([*led(0, 1, leader=1), *led(2, leader=2)])

    questions = {(leader, ts, iso, tuple(parts)) for leader, ts, iso, parts in lister.asked}
    assert questions == {
        (1, LATEST, 0, (("tiered", 0), ("tiered", 1))),
        (1, LATEST, READ_COMMITTED, (("tiered", 0), ("tiered", 1))),
        (1, EARLIEST, 0, (("tiered", 0), ("tiered", 1))),
        (2, LATEST, 0, (("tiered", 2),)),
        (2, LATEST, READ_COMMITTED, (("tiered", 2),)),
        (2, EARLIEST, 0, (("tiered", 2),)),
    }
    remote = Tier().remote_range(tp(0))
    assert remote is not None
    for partition in range(3):
        state = view.state(tp(partition))
        assert (state.high_watermark, state.last_stable_offset, state.log_start_offset) == (
            HIGH_WATERMARK,
            LAST_STABLE,
            LOG_START,
        )
        assert state.reaches(remote) is True
    assert learner.asked == 3

    # Known now: a second Metadata answer asks nothing.
    await learner.learn(led(0, 1, 2))
    assert len(lister.asked) == 6


async def test_partitions_without_remote_data_are_not_asked_about() -> None:
    lister = Lister()
    await offsets(lister, BrokerView()).learn(led(0, 1, topic="local-only"))
    assert lister.asked == []


async def test_partitions_the_broker_already_answered_for_are_not_asked_about() -> None:
    lister, view = Lister(), BrokerView()
    remote = Tier().remote_range(tp(0))
    view.learn_offsets(
        tp(0), high_watermark=50, last_stable_offset=50, log_start_offset=25, remote=remote
    )
    await offsets(lister, view).learn(led(0, 1))
    assert {tuple(parts) for *_q, parts in lister.asked} == {(("tiered", 1),)}


async def test_at_most_max_partitions_per_metadata_answer() -> None:
    lister, view = Lister(), BrokerView()
    learner = offsets(lister, view, max_partitions=2)
    await learner.learn(led(0, 1, 2, 3))
    assert {p for *_q, parts in lister.asked for _t, p in parts} == {0, 1}
    assert view.state(tp(2)).high_watermark is None
    learner.reach_probe(tp(2))
    assert learner.reach_probes == 1
    # A later answer asks about the rest.
    await learner.learn(led(0, 1, 2, 3))
    assert view.state(tp(3)).high_watermark == HIGH_WATERMARK


async def test_a_slow_leader_holds_the_answer_only_briefly_and_is_still_learned() -> None:
    lister, view = Lister(gate=asyncio.Event()), BrokerView()
    learner = offsets(lister, view, hold_seconds=0.01)
    await learner.learn(led(0))
    assert view.state(tp(0)).high_watermark is None  # went on without it
    # A second Metadata answer does not ask again: it waits for the same questions.
    await learner.learn(led(0))
    assert len(lister.asked) == 3
    assert lister.gate is not None
    lister.gate.set()
    await wait_for(
        lambda: view.state(tp(0)).high_watermark is not None, what="the late answer learned"
    )
    assert view.state(tp(0)).high_watermark == HIGH_WATERMARK


async def test_error_answers_are_not_raised_and_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(0.0)
    lister, view = Lister(errors={1: KafkaError.TOPIC_AUTHORIZATION_FAILED}), BrokerView()
    learner = BrokerOffsets(
        broker_view=view, ranges=Tier(), lister=lister, retry_after_seconds=30, clock=clock
    )
    with caplog.at_level(logging.DEBUG, logger="tierproxy.fetch"):
        await learner.learn(led(0, 1))
        learner.reach_probe(tp(1))
    assert view.state(tp(0)).high_watermark == HIGH_WATERMARK
    assert view.state(tp(1)).high_watermark is None
    (failed,) = fields(caplog, "broker.offsets.failed")
    assert failed["errors"] == ["TOPIC_AUTHORIZATION_FAILED"]
    (probe,) = fields(caplog, "fetch.reach_probe")
    assert probe["why"] == "its ListOffsets failed: TOPIC_AUTHORIZATION_FAILED"
    # Not asked again until the retry delay has passed.
    await learner.learn(led(1))
    assert len(lister.asked) == 3
    clock.now = 31
    lister.errors.clear()
    await learner.learn(led(1))
    assert view.state(tp(1)).high_watermark == HIGH_WATERMARK


@pytest.mark.parametrize(
    "error",
    [BrokerConnectionError("cannot connect to 127.0.0.1:1"), RuntimeError("a bug")],
)
async def test_failed_requests_are_not_raised(error: Exception) -> None:
    lister, view = Lister(raises=error), BrokerView()
    learner = offsets(lister, view)
    await learner.learn(led(0))
    assert view.state(tp(0)) == view.state(tp(99))  # nothing learned
    await learner.learn(led(0))
    assert len(lister.asked) == 3  # backed off


async def test_a_proxy_without_a_lister_asks_nothing() -> None:
    learner = offsets(None, BrokerView())
    await learner.learn(led(0))
    learner.reach_probe(tp(0))
    assert learner.reach_probes == 1


async def test_close_stops_the_questions_still_running() -> None:
    lister = Lister(gate=asyncio.Event())
    learner = offsets(lister, BrokerView(), hold_seconds=0.01)
    await learner.learn(led(0))
    await learner.close()
    assert len(lister.asked) == 3


def test_answers_fill_in_only_what_no_fetch_answer_said() -> None:
    view, remote = BrokerView(), Tier().remote_range(tp(0))
    view.learn_offsets(
        tp(0), high_watermark=None, last_stable_offset=None, log_start_offset=20, remote=remote
    )
    view.learn_offsets(
        tp(0), high_watermark=45, last_stable_offset=-1, log_start_offset=30, remote=remote
    )
    state = view.state(tp(0))
    assert (state.high_watermark, state.last_stable_offset, state.log_start_offset) == (
        45,
        None,
        20,
    )


offsets_or_none = st.one_of(st.none(), st.integers(min_value=-1, max_value=1_000))


@given(
    known=st.builds(
        PartitionState,
        high_watermark=offsets_or_none,
        last_stable_offset=offsets_or_none,
        log_start_offset=offsets_or_none,
        log_start_at_most=offsets_or_none,
        log_start_after=offsets_or_none,
    ),
    answers=st.tuples(offsets_or_none, offsets_or_none, offsets_or_none),
)
def test_listed_offsets_never_overwrite_what_was_known(
    known: PartitionState, answers: tuple[int | None, int | None, int | None]
) -> None:
    high_watermark, last_stable_offset, log_start_offset = answers
    state = known.filled_in(
        high_watermark=high_watermark,
        last_stable_offset=last_stable_offset,
        log_start_offset=log_start_offset,
    )

    def taken(before: int | None, answered: int | None) -> int | None:
        if before is not None:
            return before
        return answered if answered is not None and answered >= 0 else None

    assert state.high_watermark == taken(known.high_watermark, high_watermark)
    assert state.last_stable_offset == taken(known.last_stable_offset, last_stable_offset)
    log_start_known = (
        known.log_start_offset is not None
        or known.log_start_at_most is not None
        or known.log_start_after is not None
    )
    expected_start = known.log_start_offset if log_start_known else taken(None, log_start_offset)
    assert state.log_start_offset == expected_start
    assert (state.log_start_at_most, state.log_start_after) == (
        known.log_start_at_most,
        known.log_start_after,
    )


# -- the Metadata interceptor ------------------------------------------------------------


def metadata_answer(version: int, topics: list[tuple[str, uuid.UUID, list[tuple[int, int]]]]):
    return build(
        response_class(ApiKey.METADATA, version),
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=metadata_topics(version, topics),
    )


@dataclass
class Learner:
    seen: list[LedPartition] = field(default_factory=list)

    async def learn(self, partitions: Iterable[LedPartition]) -> None:
        self.seen += list(partitions)


@pytest.mark.parametrize("version", [1, 9, 12])
async def test_metadata_answers_name_their_tiered_partitions_with_leaders(version: int) -> None:
    learner = Learner()
    interceptor = MetadataOffsets(partitions=Tier(), learner=learner)
    answer = metadata_answer(
        version,
        [
            ("tiered", TOPIC_ID, [(0, 1), (1, -1), (2, 2)]),
            ("other", uuid.UUID(int=9), [(0, 1)]),
        ],
    )
    call = metadata_call(version)
    assert await through(interceptor, call, answer) is answer
    assert learner.seen == [*led(0, leader=1), *led(2, leader=2)]


# -- through the proxy --------------------------------------------------------------------


def first_probe(env: Env) -> Any:
    return env.broker.fetches()[0].topics[0].partitions[0]


@pytest.mark.parametrize(("metadata_version", "fetch_version"), [(4, 4), (12, 12), (12, 17)])
async def test_after_metadata_through_the_proxy_the_first_probe_reads_nothing(
    make_env: EnvFactory, metadata_version: int, fetch_version: int
) -> None:
    env = await make_env(proxy_asks_offsets=True)
    request = metadata_request(metadata_version, [TOPIC])
    await env.client.call(ApiKey.METADATA, metadata_version, request)
    offset = 0
    for _ in range(3):  # Fetch v4 answers carry no log start: what was asked stays
        part = only(await fetch(env, fetch_version, offset))
        assert part.error_code == KafkaError.NONE
        batches = batches_of(part.records)  # the remote tier's
        assert batches
        offset = parse_batch_header(batches[-1]).next_offset
    assert offset <= TIERED_END + 1
    probes = [fetch.topics[0].partitions[0] for fetch in env.broker.fetches()]
    assert [(p.fetch_offset, p.partition_max_bytes) for p in probes] == [
        (LAST + 1, PROBE_BYTES)
    ] * 3
    assert env.path.broker_offsets.reach_probes == 0


async def test_without_metadata_first_the_first_probe_is_a_reach_probe(
    make_env: EnvFactory,
) -> None:
    env = await make_env(proxy_asks_offsets=True)
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.NONE
    assert batches_of(part.records)
    assert first_probe(env).fetch_offset == TIERED_END + 1
    assert env.path.broker_offsets.reach_probes == 1
    # Its answer taught the broker's offsets: the next probe reads nothing.
    only(await fetch(env, 12, 2))
    assert env.broker.fetches()[1].topics[0].partitions[0].fetch_offset == LAST + 1
    assert env.path.broker_offsets.reach_probes == 1
