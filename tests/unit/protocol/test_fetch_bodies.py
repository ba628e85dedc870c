"""The Fetch bodies the proxy builds itself: an answer without the broker, and what a
request says about fetch sessions."""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import KafkaError
from protocol.fetch_bodies import (
    FetchedPartition,
    FetchResponseEditor,
    empty_fetch_response,
    read_fetch_request,
)
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, decode_response, encode_response
from tests.fakes.kafka_requests import fetch_request

VERSIONS = INTERCEPTED_VERSIONS[ApiKey.FETCH]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_answer_filled_with_a_partition_round_trips(version: int) -> None:
    topic: str | uuid.UUID = uuid.uuid4() if version >= 13 else "t"
    editor = FetchResponseEditor(empty_fetch_response(version), version)
    assert editor.error == KafkaError.NONE
    assert editor.session_id == 0
    assert list(editor.partitions()) == []
    editor.put(
        FetchedPartition(
            key=(topic, 3),
            error=int(KafkaError.NONE),
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            records=memoryview(b"batches"),
            aborted=None,
        )
    )
    decoded = decode_response(ApiKey.FETCH, version, encode_response(editor.body()))
    (part,) = FetchResponseEditor(decoded, version).partitions()
    assert part.key == (topic, 3)
    assert (part.error, part.high_watermark, part.records) == (0, 10, b"batches")


@pytest.mark.parametrize(
    ("version", "session_id", "epoch", "sessionless"),
    [(4, 0, -1, True), (12, 0, -1, True), (12, 0, 0, False), (12, 7, 3, False), (17, 7, -1, False)],
)
def test_sessionless_means_session_0_and_the_final_epoch(
    version: int, session_id: int, epoch: int, sessionless: bool
) -> None:
    body = fetch_request(version, [("t", 0, 0, 1)], session_id=session_id, session_epoch=epoch)
    assert read_fetch_request(body, version).sessionless is sessionless
