"""Fetch responses encoded as buffers are kio's bytes, with large records not copied."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from protocol.buffers import BY_REFERENCE_BYTES, BufferSink
from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    encode_response,
    encode_response_buffers,
    response_class,
)

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # as test_messages

FETCH_VERSIONS = list(INTERCEPTED_VERSIONS[ApiKey.FETCH])

few_examples = settings(
    max_examples=max(5, settings().max_examples // 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

records = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.integers(min_value=BY_REFERENCE_BYTES - 1, max_value=3 * BY_REFERENCE_BYTES).map(
        lambda size: bytes(range(256)) * (size // 256) + bytes(size % 256)
    ),
)


def kio_bytes(payload: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(payload))(buffer, payload)
    return buffer.getvalue()


def with_records(response: Any, draw: Any) -> tuple[Any, list[memoryview]]:
    """``response`` with each partition's records drawn anew, as views of larger buffers
    (as the remote read path hands them over); the views."""
    views: list[memoryview] = []
    topics = []
    for topic in response.responses:
        parts = []
        for part in topic.partitions:
            data = draw(records)
            value = None
            if data is not None:
                value = memoryview(b"<" + data + b">")[1:-1]
                views.append(value)
            parts.append(dataclasses.replace(part, records=value))
        topics.append(dataclasses.replace(topic, partitions=tuple(parts)))
    return dataclasses.replace(response, responses=tuple(topics)), views


def replace_records(response: Any, records: Callable[[Any], Any]) -> Any:
    """``response`` with each partition's records (if any) replaced by ``records(them)``."""
    return dataclasses.replace(
        response,
        responses=tuple(
            dataclasses.replace(
                topic,
                partitions=tuple(
                    dataclasses.replace(
                        part, records=None if part.records is None else records(part.records)
                    )
                    for part in topic.partitions
                ),
            )
            for topic in response.responses
        ),
    )


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@few_examples
@given(data=st.data(), head=st.binary(min_size=4, max_size=9))
def test_fetch_response_buffers_are_kios_bytes(version: int, data: Any, head: bytes) -> None:
    response, views = with_records(
        data.draw(st.from_type(response_class(ApiKey.FETCH, version))), data.draw
    )
    encoded = encode_response_buffers(response, head=head)
    as_bytes = replace_records(response, bytes)
    expected = head + kio_bytes(as_bytes)
    assert bytes(encoded) == expected == head + encode_response(response)
    assert len(encoded) == len(expected)
    large = [view for view in views if len(view) >= BY_REFERENCE_BYTES]
    assert all(any(part is view for part in encoded.parts) for view in large)


def test_small_writes_are_joined_and_large_ones_kept() -> None:
    sink = BufferSink(b"head")
    large = memoryview(bytes(BY_REFERENCE_BYTES))
    for piece in (b"a", b"bc", large, b"d"):
        sink.write(piece)
    buffers = sink.buffers()
    assert buffers.parts == (b"headabc", large, b"d")
    assert buffers.parts[1] is large
    assert len(buffers) == 8 + BY_REFERENCE_BYTES


def test_nothing_written_is_the_head_alone() -> None:
    assert BufferSink(b"h").buffers().parts == (b"h",)
    assert BufferSink().buffers().parts == ()
