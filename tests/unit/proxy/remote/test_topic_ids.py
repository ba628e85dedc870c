"""A re-created topic never gets its deleted namesake's tiered data, whatever Metadata
version its clients use (the proxy then asks the broker itself)."""

from __future__ import annotations

import uuid

from proxy.remote.topic_ids import TopicIds
from storage.model import RemotePartitionDeleteState
from tests.conditions import wait_for
from tests.fakes.tiered_log import TP
from tests.unit.proxy.remote.env import TOPIC, EnvFactory, fetch, only


async def test_names_asked_without_ids_are_looked_up_at_once() -> None:
    asked: list[list[str]] = []
    current = uuid.uuid4()

    async def lookup(names: list[str]) -> dict[str, uuid.UUID]:
        asked.append(names)
        return {name: current for name in names if name == "orders"}

    ids = TopicIds(lookup=lookup, tiered_names=lambda: ["orders"], refresh_seconds=3600)
    ids.start()
    try:
        await wait_for(lambda: ids.current("orders") == current, what="the first round")
        ids.want(["payments"])
        await wait_for(lambda: len(asked) == 2, what="the wanted name's lookup")
        assert asked[-1] == ["orders", "payments"]
    finally:
        await ids.close()


async def test_a_lookup_that_fails_is_retried_not_fatal() -> None:
    calls = 0

    async def lookup(names: list[str]) -> dict[str, uuid.UUID]:
        nonlocal calls
        calls += 1
        raise OSError("the broker is away")

    ids = TopicIds(lookup=lookup, tiered_names=lambda: ["orders"], refresh_seconds=0.01)
    ids.start()
    try:
        await wait_for(lambda: calls >= 3, what="retries")
        assert ids.current("orders") is None
    finally:
        await ids.close()


async def test_the_brokers_current_id_keeps_the_old_topics_data_away(
    make_env: EnvFactory,
) -> None:
    env = await make_env()
    assert only(await fetch(env, 12, 0)).records
    env.path.topic_ids.observe(TOPIC, uuid.uuid4())  # re-created: the name has a new id
    part = only(await fetch(env, 4, 0))  # Fetch v4 names the topic
    assert not part.records


async def test_ids_marked_for_deletion_never_answer_for_the_name(make_env: EnvFactory) -> None:
    env = await make_env()
    env.log.metadata.update_partition_delete(
        TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, epoch=0, event_timestamp=0
    )
    assert env.path.partitions.partition(topic=TOPIC, topic_id=None, partition=0) is None
