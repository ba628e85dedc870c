"""The Fetch interceptor in a real proxy in front of an IN-PROCESS SCRIPTED BROKER MODEL.

The remote tier is real (segment builder, local-directory RSM, metadata cache, caches); the
broker is :mod:`tests.fakes.model_broker`, whose local log starts after the
tiered range, so consumers from offset 0 take the OFFSET_OUT_OF_RANGE branch.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import uuid
from typing import Any

import pytest

from protocol.errors import KafkaError
from protocol.headers import encode_request_header
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, encode_request
from protocol.records import ControlType, parse_batch_header
from storage.model import RemoteLogSegmentState as S
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.layout import RemoteLayout
from tests.conditions import wait_for
from tests.fakes.kafka_requests import fetch_request
from tests.fakes.kafka_responses import partitions_of
from tests.fakes.kio_client import KioClient
from tests.fakes.model_broker import ModelPartition
from tests.fakes.record_batches import batches_of, data_batch, marker
from tests.unit.proxy.remote.env import (
    LAST,
    TIERED_END,
    TOPIC,
    EnvFactory,
    consume,
    fetch,
    only,
)


@pytest.mark.parametrize("version", INTERCEPTED_VERSIONS[ApiKey.FETCH])
async def test_consumers_from_offset_0_get_every_batch_once(
    make_env: EnvFactory, version: int
) -> None:
    env = await make_env()
    assert await consume(env, version) == env.all_batches


async def test_out_of_range_partitions_get_remote_batches_with_the_whole_log_start(
    make_env: EnvFactory,
) -> None:
    env = await make_env()
    first = only(await fetch(env, 12, 3))
    assert first.error_code == KafkaError.NONE
    assert batches_of(first.records) == env.all_batches[1:5]  # one segment per read
    assert first.log_start_offset == 0
    assert first.preferred_read_replica == -1
    # The first Fetch probes just past the remote tier, to learn whether the broker's log
    # joins it: the broker's real offsets come back with the remote records.
    assert (first.high_watermark, first.last_stable_offset) == (LAST + 1, LAST + 1)
    forwarded = env.broker.fetches()[-1].topics[0].partitions[0]
    assert (forwarded.fetch_offset, forwarded.partition_max_bytes) == (TIERED_END + 1, 1)
    second = only(await fetch(env, 12, 10))
    assert (second.high_watermark, second.last_stable_offset) == (LAST + 1, LAST + 1)
    assert second.log_start_offset == 0
    assert batches_of(second.records)[0] == env.all_batches[5]
    # From now on the probe goes to the high watermark, where the broker has nothing to read.
    forwarded = env.broker.fetches()[-1].topics[0].partitions[0]
    assert (forwarded.fetch_offset, forwarded.partition_max_bytes) == (LAST + 1, 1)
    assert env.broker.fetches()[-1].min_bytes == 0
    # Past the remote tier the broker serves the client's own position again.
    local = only(await fetch(env, 12, TIERED_END + 1))
    assert batches_of(local.records) == env.all_batches[15:]
    assert local.log_start_offset == 0
    assert env.broker.fetches()[-1].topics[0].partitions[0].fetch_offset == TIERED_END + 1


async def test_offsets_outside_the_tiers_stay_out_of_range(make_env: EnvFactory) -> None:
    env = await make_env(local_start=TIERED_END + 1)
    part = only(await fetch(env, 12, LAST + 5))
    assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE
    assert not part.records


async def test_byte_limits_hold_across_the_response(make_env: EnvFactory) -> None:
    env = await make_env()
    size = len(env.all_batches[0])
    part = only(await fetch(env, 12, 0, partition_max_bytes=3 * size + 5))
    assert batches_of(part.records) == env.all_batches[0:3]
    part = only(await fetch(env, 12, 0, max_bytes=2 * size))
    assert batches_of(part.records) == env.all_batches[0:2]
    # KIP-74: an otherwise empty response carries the first batch, however large.
    part = only(await fetch(env, 12, 0, max_bytes=1, partition_max_bytes=1))
    assert batches_of(part.records) == env.all_batches[0:1]


async def test_offload_serves_tiered_ranges_the_broker_still_has(make_env: EnvFactory) -> None:
    env = await make_env(local_start=0, offload_enable=True)
    assert await consume(env, 12) == env.all_batches
    served = [
        f.topics[0].partitions[0]
        for f in env.broker.fetches()
        if f.topics[0].partitions[0].partition_max_bytes == 1
    ]
    assert served, "the broker was never spared a tiered read"
    assert {p.fetch_offset for p in served} <= {TIERED_END + 1, LAST + 1}


async def test_offload_lag_threshold(make_env: EnvFactory) -> None:
    env = await make_env(local_start=0, offload_enable=True, offload_min_lag_records=25)
    await fetch(env, 12, 0)  # learns the high watermark from the broker
    await fetch(env, 12, 20)
    assert env.broker.fetches()[-1].topics[0].partitions[0].fetch_offset == 20
    await fetch(env, 12, 10)
    assert env.broker.fetches()[-1].topics[0].partitions[0].fetch_offset == LAST + 1


async def test_read_committed_gets_the_remote_aborted_transactions(make_env: EnvFactory) -> None:
    pid = 11
    segments = [
        [data_batch(0, 2, producer_id=pid, transactional=True), data_batch(2, 2)],
        [marker(4, pid, ControlType.ABORT), data_batch(5, 1)],
    ]
    local = [data_batch(6, 2)]
    env = await make_env(segments=segments, local=local, local_start=6)
    part = only(await fetch(env, 12, 0, isolation_level=1))
    assert batches_of(part.records) == segments[0]
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(pid, 0)]
    uncommitted = only(await fetch(env, 12, 0))
    assert uncommitted.aborted_transactions is None


async def test_storage_failure_is_a_retriable_error_then_recovers(make_env: EnvFactory) -> None:
    env = await make_env()
    env.storage.error = RemoteStorageError("store down", retriable=True)
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.KAFKA_STORAGE_ERROR
    assert not part.records
    env.storage.error = None
    assert await consume(env, 12) == env.all_batches


async def test_slow_storage_returns_within_max_wait_and_warms_the_cache(
    make_env: EnvFactory,
) -> None:
    env = await make_env(max_wait_ms=100)
    env.storage.delay = 0.3  # per GET: the offset index, then the chunk
    part = only(await fetch(env, 12, 0, max_wait_ms=5000))
    # Answered at the purgatory's 100 ms, not the request's 5 s: empty, the read unfinished.
    assert part.error_code == KafkaError.NONE
    assert not part.records
    assert env.path.purgatory.expirations == 1
    await wait_for(lambda: len(env.path.chunks) > 0, what="the unfinished read warmed the cache")
    env.storage.delay = 0
    part = only(await fetch(env, 12, 0))
    assert batches_of(part.records)[0] == env.all_batches[0]


async def test_a_full_reader_queue_gives_retriable_errors(make_env: EnvFactory) -> None:
    env = await make_env(reader_threads=1, reader_max_pending_tasks=0)
    env.storage.delay = 0.3
    other = await KioClient.connect(env.proxy)
    try:
        first = asyncio.create_task(fetch(env, 12, 0))
        await wait_for(lambda: env.storage.index_reads > 0, what="the one reader is busy")
        topic_request = fetch_request(12, [(TOPIC, 0, 0, 1 << 20)])
        part = only(await other.call(ApiKey.FETCH, 12, topic_request))
        assert part.error_code == KafkaError.KAFKA_STORAGE_ERROR
        assert env.path.pool.rejected == 1
        await first
    finally:
        await other.close()


async def test_a_segment_the_metadata_deleted_is_out_of_range(make_env: EnvFactory) -> None:
    env = await make_env()
    segment = env.log.segments[0]
    env.log.metadata.update_segment(
        segment.segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=0, event_timestamp=0
    )
    await env.log.rsm.delete_log_segment(segment)
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE
    assert env.path.missing_objects.count == 0


async def test_a_missing_object_is_a_retriable_error_logged_once_and_shown(
    make_env: EnvFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An object the metadata lists but storage lacks (moved away, deleted by hand):
    KAFKA_STORAGE_ERROR, which clients retry; OFFSET_OUT_OF_RANGE would make them reset
    their position and skip or re-read records. Once back, it is served and forgotten."""
    env = await make_env()
    segment = env.log.segments[0]
    root = env.log.rsm.root
    keys = RemoteLayout().segment_keys(segment)
    for key in keys:
        (root / key).rename(root / f"{key}.away")
    with caplog.at_level(logging.INFO, logger="tierproxy.remote"):
        for _ in range(3):  # a consumer retrying in a loop
            part = only(await fetch(env, 12, 0))
            assert part.error_code == KafkaError.KAFKA_STORAGE_ERROR
            assert not part.records
        lines = [r for r in caplog.records if r.getMessage() == "remote.object.missing"]
        assert len(lines) == 1  # once per segment per minute
        fields = lines[0].tierproxy_fields  # type: ignore[attr-defined]
        assert fields["topic"] == TOPIC
        assert fields["partition"] == 0
        assert fields["segment"] == segment.segment_id.id
        assert str(fields["key"]).startswith(f"{root / keys[0].rsplit('.', 1)[0]}.")
        status = env.path.missing_objects.status()
        assert status.count == 1
        assert status.last_key == fields["key"]
        assert status.as_dict()["missing_objects"] == 1

        await env.path.missing_objects.recheck(env.log.rsm)
        assert env.path.missing_objects.count == 1  # still gone
        for key in keys:
            (root / f"{key}.away").rename(root / key)
        part = only(await fetch(env, 12, 0))
        assert part.error_code == KafkaError.NONE
        assert batches_of(part.records)[0] == env.all_batches[0]
        await env.path.missing_objects.recheck(env.log.rsm)
    assert env.path.missing_objects.count == 0
    assert "remote.object.restored" in [r.getMessage() for r in caplog.records]


async def test_broker_errors_pass_through_without_remote_data(make_env: EnvFactory) -> None:
    env = await make_env()
    env.model.error = KafkaError.NOT_LEADER_OR_FOLLOWER
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.NOT_LEADER_OR_FOLLOWER
    assert not part.records
    env.model.error = KafkaError.TOPIC_AUTHORIZATION_FAILED
    part = only(await fetch(env, 12, 10))
    assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED


async def test_quota_answers_empty_without_error(make_env: EnvFactory) -> None:
    env = await make_env(fetch_max_bytes_per_second=1, fetch_quota_window_num=2)
    part = only(await fetch(env, 12, 0))
    assert batches_of(part.records)
    # Like Kafka's delayed fetch without data: answered after the max wait, not at once. The
    # event loop runs timers in deadline order, so a timer due before the max wait has run
    # by the time the held answer goes out, however loaded the machine.
    due_first = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, due_first.set)
    part = only(await fetch(env, 12, 10, max_wait_ms=300))
    assert part.error_code == KafkaError.NONE
    assert not part.records
    assert env.path.quota.throttled == 1
    assert due_first.is_set()


async def test_followers_pass_through_untouched(make_env: EnvFactory) -> None:
    env = await make_env()
    part = only(await fetch(env, 12, 0, replica_id=2))
    assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE


async def test_incremental_sessions_continue_after_remote_reads(make_env: EnvFactory) -> None:
    env = await make_env()
    first = await fetch(env, 12, 0, session_id=0, session_epoch=0)
    session = first.session_id
    assert session
    got = batches_of(only(first).records)
    offset = parse_batch_header(got[-1]).next_offset
    epoch = 1
    while offset <= LAST:
        response = await fetch(env, 12, offset, session_id=session, session_epoch=epoch)
        epoch += 1
        batches = batches_of(only(response).records)
        got += batches
        offset = parse_batch_header(batches[-1]).next_offset
    assert got == env.all_batches
    # A session partition the client does not list, still in the remote tier: the broker
    # answers nothing for its probe position and the proxy adds the remote data.
    restart = await fetch(env, 12, 0, session_id=0, session_epoch=0)
    session = restart.session_id
    empty = fetch_request(12, [], session_id=session, session_epoch=1)
    answer = await env.client.call(ApiKey.FETCH, 12, empty)
    assert batches_of(only(answer).records) == env.all_batches[0:5]


async def test_unknown_incremental_sessions_are_refused(make_env: EnvFactory) -> None:
    env = await make_env()
    response = await fetch(env, 12, 0, session_id=77, session_epoch=3)
    assert response.error_code == KafkaError.FETCH_SESSION_ID_NOT_FOUND
    assert not env.broker.fetches()


async def test_fetches_of_untiered_topics_are_forwarded_unchanged(make_env: EnvFactory) -> None:
    env = await make_env()
    env.broker.partitions[("plain", 0)] = ModelPartition(batches=[data_batch(0, 3)])
    response = await env.client.call(
        ApiKey.FETCH, 12, fetch_request(12, [("plain", 0, 0, 1 << 20)])
    )
    assert batches_of(only(response).records) == [data_batch(0, 3)]
    assert env.broker.fetches()[-1].min_bytes == 1


async def test_a_recreated_topic_does_not_serve_the_old_topics_data(make_env: EnvFactory) -> None:
    env = await make_env()
    env.path.topic_ids.observe(TOPIC, uuid.uuid4())
    part = only(await fetch(env, 12, 0))
    assert part.error_code == KafkaError.OFFSET_OUT_OF_RANGE


async def test_metrics_count_remote_reads(make_env: EnvFactory) -> None:
    env = await make_env()
    await consume(env, 12)
    assert env.metrics is not None
    assert env.metrics.requests.labels(TOPIC)._value.get() >= 3
    assert env.metrics.bytes.labels(TOPIC)._value.get() == sum(len(b) for b in env.all_batches[:15])


async def test_offload_hands_unresolvable_transactions_back_to_the_broker(
    make_env: EnvFactory,
) -> None:
    pid = 9
    segments = [[data_batch(0, 2), data_batch(2, 2, producer_id=pid, transactional=True)]]
    local = [marker(4, pid, ControlType.ABORT), data_batch(5, 2)]
    env = await make_env(segments=segments, local=local, local_start=0, offload_enable=True)
    first = only(await fetch(env, 12, 0, isolation_level=1))
    assert batches_of(first.records) == [segments[0][0]]  # stops before the open transaction
    empty = only(await fetch(env, 12, 2, isolation_level=1))
    assert (empty.error_code, empty.records) == (KafkaError.NONE, b"")
    # The broker, which has the ABORT marker, serves the rest.
    rest = only(await fetch(env, 12, 2, isolation_level=1))
    assert batches_of(rest.records) == [segments[0][1], *local]
    assert env.broker.fetches()[-1].topics[0].partitions[0].fetch_offset == 2
    # READ_UNCOMMITTED readers need no outcome and stay offloaded.
    uncommitted = only(await fetch(env, 12, 2))
    assert batches_of(uncommitted.records) == [segments[0][1]]


async def test_a_client_that_never_waits_still_gets_a_cold_read(make_env: EnvFactory) -> None:
    """Kafka waits ``remote.fetch.max.wait.ms`` for remote reads whatever the request's own
    max wait; a consumer with ``fetch.max.wait.ms=0`` must not spin on empty answers."""
    env = await make_env(max_wait_ms=2000)
    env.storage.delay = 0.2
    part = only(await fetch(env, 12, 0, max_wait_ms=0))
    assert part.error_code == KafkaError.NONE
    assert batches_of(part.records)[0] == env.all_batches[0]


async def test_an_undecodable_answer_to_a_rewritten_fetch_closes_that_connection(
    make_env: EnvFactory,
) -> None:
    """Passed on raw, the broker's answer to a probe would put the probe's records at the
    client's position: the connection is closed instead, and other clients go on."""
    env = await make_env()
    bystander = await KioClient.connect(env.proxy)
    try:
        env.broker.garble_fetches = True
        with pytest.raises(ConnectionError):
            await fetch(env, 12, 0)  # rewritten: a reach probe past the remote tier
        env.broker.garble_fetches = False
        request = fetch_request(12, [(TOPIC, 0, TIERED_END + 1, 1 << 20)])
        part = only(await bystander.call(ApiKey.FETCH, 12, request))
        assert part.error_code == KafkaError.NONE and part.records
    finally:
        await bystander.close()


async def test_remote_partitions_take_turns_with_the_brokers(make_env: EnvFactory) -> None:
    """A partition the broker serves fills ``max_bytes`` on every Fetch; the remote one must
    still make progress, as partitions take turns in Kafka's fetch sessions."""
    big = [data_batch(o, 1, value_size=400) for o in range(40)]
    env = await make_env(untiered={1: big})
    size = len(env.all_batches[0])
    offsets = {0: 0, 1: 0}
    remote_batches = 0
    for _ in range(6):
        request = fetch_request(
            12,
            [(TOPIC, 0, offsets[0], 1 << 20), (TOPIC, 1, offsets[1], 1 << 20)],
            max_bytes=len(big[0]) + size // 2,
        )
        answer = partitions_of(await env.client.call(ApiKey.FETCH, 12, request))
        for (_topic, partition), part in answer.items():
            batches = batches_of(part.records)
            if batches:
                offsets[partition] = parse_batch_header(batches[-1]).next_offset
                remote_batches += len(batches) if partition == 0 else 0
    assert remote_batches >= 2, "the remote partition starved"
    assert offsets[1] >= 2, "the broker's partition starved"


@pytest.mark.parametrize(
    "failure",
    [
        RemoteStorageError("store down", retriable=True),
        RemoteResourceNotFoundError("segment object deleted"),
    ],
)
async def test_offload_misses_fall_back_to_the_broker(
    make_env: EnvFactory, failure: RemoteStorageError
) -> None:
    """The broker still holds what the offload policy serves remotely: a remote miss there
    is served by the broker, never answered OFFSET_OUT_OF_RANGE or a storage error."""
    env = await make_env(local_start=0, offload_enable=True)
    await fetch(env, 12, 20)  # learns where the broker's log starts
    env.storage.error = failure
    first = only(await fetch(env, 12, 0))
    assert first.error_code == KafkaError.NONE
    assert not first.records
    second = only(await fetch(env, 12, 0))
    assert second.error_code == KafkaError.NONE
    assert batches_of(second.records)[0] == env.all_batches[0]
    assert env.broker.fetches()[-1].topics[0].partitions[0].fetch_offset == 0


async def test_closed_connections_take_their_fetch_sessions_along(make_env: EnvFactory) -> None:
    """Churn of short-lived consumers must not evict a live consumer's fetch session."""
    env = await make_env(session_cache_slots=3)
    live = await env.client.call(
        ApiKey.FETCH, 12, fetch_request(12, [(TOPIC, 0, 0, 1 << 20)], session_epoch=0)
    )
    for _ in range(10):
        passer_by = await KioClient.connect(env.proxy)
        request = fetch_request(12, [(TOPIC, 0, 5, 1 << 20)], session_epoch=0)
        await passer_by.call(ApiKey.FETCH, 12, request)
        await passer_by.close()
    await wait_for(lambda: len(env.path.sessions) == 1)
    again = await env.client.call(
        ApiKey.FETCH,
        12,
        fetch_request(12, [], session_id=live.session_id, session_epoch=1),
    )
    assert again.error_code == KafkaError.NONE


async def test_a_closed_connections_queued_reads_are_cancelled(make_env: EnvFactory) -> None:
    env = await make_env(reader_threads=1, max_wait_ms=5000)
    # Learns where the broker's log starts, so the next reads start early; reads one batch.
    await fetch(env, 12, 0, partition_max_bytes=1)
    env.storage.delay = 0.5
    env.storage.log_reads.clear()
    address = env.proxy.routes[0].advertised
    _reader, writer = await asyncio.open_connection(address.host, address.port)
    for correlation_id, offset in enumerate((10, 20, 16), start=1):
        payload = encode_request_header(ApiKey.FETCH, 12, correlation_id, "leaving")
        payload += encode_request(fetch_request(12, [(TOPIC, 0, offset, 1)]))
        writer.write(len(payload).to_bytes(4, "big") + payload)
    await writer.drain()
    await wait_for(lambda: env.path.pool.queue_size == 2, what="two reads queued")
    # The consumer is gone: a reset (a half-close would still be answered).
    writer.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    writer.transport.abort()
    await wait_for(lambda: env.path.pool.queue_size == 0, what="the queue drained")
    assert 20 not in env.storage.log_reads, "a closed connection's queued reads still ran"


async def test_no_remote_read_before_the_broker_lets_the_connection_read(
    make_env: EnvFactory,
) -> None:
    """What one client learned must not let another, without rights, make the proxy read
    remote storage: its reads wait for the broker's answer, which refuses them."""
    env = await make_env()
    await fetch(env, 12, 0)  # an authorised client: the broker's log start is known now
    assert env.metrics is not None
    reads = env.metrics.requests.labels(TOPIC)
    before = reads._value.get()
    env.model.error = KafkaError.TOPIC_AUTHORIZATION_FAILED
    stranger = await KioClient.connect(env.proxy)
    try:
        request = fetch_request(12, [(TOPIC, 0, 10, 1 << 20)])
        part = only(await stranger.call(ApiKey.FETCH, 12, request))
    finally:
        await stranger.close()
    assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not part.records
    assert reads._value.get() == before, "a remote read started for a refused client"


async def test_a_refusal_cancels_the_read_started_with_the_request(
    make_env: EnvFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """READ revoked: the first Fetch after it had its read started with the request (the
    broker had let this connection read); the broker's refusal cancels it before it runs,
    and no later Fetch of the connection starts one (issue 28)."""
    env = await make_env(reader_threads=1)
    await fetch(env, 12, 0)  # the broker lets this connection read the partition
    assert env.metrics is not None
    reads = env.metrics.requests.labels(TOPIC)
    ran: list[int] = []
    read = env.path.reader.read
    release = asyncio.Event()

    async def recorded(tp: Any, offset: int, *args: Any, **kwargs: Any) -> Any:
        ran.append(offset)
        if offset == 20:
            await release.wait()  # the only reader stays busy
        return await read(tp, offset, *args, **kwargs)

    monkeypatch.setattr(env.path.reader, "read", recorded)
    other = await KioClient.connect(env.proxy)
    try:
        busy = asyncio.create_task(
            other.call(ApiKey.FETCH, 12, fetch_request(12, [(TOPIC, 0, 20, 1 << 20)]))
        )
        await wait_for(lambda: ran == [20], what="the only reader is busy")
        env.model.error = KafkaError.TOPIC_AUTHORIZATION_FAILED  # READ revoked
        before = reads._value.get()
        part = only(await fetch(env, 12, 10))
        assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert reads._value.get() == before + 1, "no read was started with the request"
        for offset in (10, 12, 14):
            part = only(await fetch(env, 12, offset))
            assert part.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert reads._value.get() == before + 1, "a read started after the broker's refusal"
        release.set()
        await busy
        await wait_for(lambda: env.path.pool.queue_size == 0, what="the queue drained")
        assert ran == [20], "the refused partition's read ran"
    finally:
        await other.close()
