"""storage.rsm.layout: object keys exactly as docs/architecture.md's "Remote layout" states."""

from __future__ import annotations

import base64
import dataclasses
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from storage.rsm.layout import RemoteLayout, kafka_uuid_string
from tests.fakes.segments import segment_metadata

TOPIC_ID = uuid.UUID(int=1)
SEGMENT_ID = uuid.UUID(int=2**128 - 1)


def metadata(start_offset: int = 42, partition: int = 7) -> RemoteLogSegmentMetadata:
    return segment_metadata(
        TopicIdPartition(topic_id=TOPIC_ID, topic="orders", partition=partition),
        start_offset=start_offset,
        end_offset=start_offset + 10,
        segment_id=SEGMENT_ID,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )


def test_uuid_strings_match_kafkas_uuid_to_string() -> None:
    # Kafka: Uuid.METADATA_TOPIC_ID = new Uuid(0L, 1L) prints "AAAAAAAAAAAAAAAAAAAAAQ".
    assert kafka_uuid_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert kafka_uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    # URL-safe alphabet: 0xff... uses "_" (and 0xfb... "-"), never "/" or "+".
    assert kafka_uuid_string(uuid.UUID(int=2**128 - 1)) == "_____________________w"
    assert kafka_uuid_string(uuid.UUID(bytes=b"\xfb" * 16)) == "-_v7-_v7-_v7-_v7-_v7-w"


@given(st.uuids())
def test_uuid_strings_are_22_chars_and_decode_back(value: uuid.UUID) -> None:
    text = kafka_uuid_string(value)
    assert len(text) == 22
    assert "=" not in text and "/" not in text and "+" not in text
    assert base64.urlsafe_b64decode(text + "==") == value.bytes


def test_keys_follow_the_design_layout_exactly() -> None:
    layout = RemoteLayout(prefix="tiered")
    base = "tiered/orders-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000000042-_____________________w"
    assert layout.log_key(metadata()) == f"{base}.log"
    assert layout.index_key(metadata(), IndexType.OFFSET) == f"{base}.index"
    assert layout.index_key(metadata(), IndexType.TIMESTAMP) == f"{base}.timeindex"
    assert layout.index_key(metadata(), IndexType.TRANSACTION) == f"{base}.txnindex"
    assert layout.index_key(metadata(), IndexType.PRODUCER_SNAPSHOT) == f"{base}.snapshot"
    assert layout.index_key(metadata(), IndexType.LEADER_EPOCH) == f"{base}.leader-epoch-checkpoint"
    assert layout.segment_prefix(metadata()) == f"{base}."
    assert layout.segment_keys(metadata()) == tuple(
        f"{base}.{suffix}"
        for suffix in (
            "log",
            "index",
            "timeindex",
            "txnindex",
            "snapshot",
            "leader-epoch-checkpoint",
        )
    )


@pytest.mark.parametrize("prefix", ["", "/", "//"])
def test_empty_prefix_gives_keys_without_a_leading_slash(prefix: str) -> None:
    key = RemoteLayout(prefix=prefix).log_key(metadata())
    assert key == "orders-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000000042-_____________________w.log"


@pytest.mark.parametrize("prefix", ["a/b", "/a/b", "a/b/", "/a/b/"])
def test_slashes_around_the_prefix_are_ignored(prefix: str) -> None:
    layout = RemoteLayout(prefix=prefix)
    assert layout.partition_prefix(metadata().topic_id_partition) == (
        "a/b/orders-AAAAAAAAAAAAAAAAAAAAAQ/7/"
    )


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_base_offsets_are_20_digits_and_sort_like_numbers(offset: int) -> None:
    layout = RemoteLayout()
    name = layout.log_key(metadata(offset)).rsplit("/", 1)[1]
    assert name.split("-", 1)[0] == f"{offset:020d}"
    smaller = layout.log_key(metadata(offset // 2))
    assert smaller <= layout.log_key(metadata(offset))


def test_every_copy_attempt_gets_its_own_keys() -> None:
    tip = metadata().topic_id_partition
    first, second = (RemoteLogSegmentId.generate(tip) for _ in range(2))
    layout = RemoteLayout()
    keys = {
        layout.log_key(dataclasses.replace(metadata(), segment_id=segment_id))
        for segment_id in (first, second)
    }
    assert len(keys) == 2
