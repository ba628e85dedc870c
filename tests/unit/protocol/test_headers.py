"""Request and response header codecs, checked against kio's header schemas."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as KioResponseHeaderV1
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    peek_request,
    request_header_version,
    response_header_version,
)
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from protocol.varint import encode_unsigned_varint

int16s = st.integers(min_value=-(2**15), max_value=2**15 - 1)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
client_ids = st.none() | st.text(max_size=40)
tagged_fields = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**31), st.binary(max_size=20)), max_size=4
)


def tags_section(tags: list[tuple[int, bytes]]) -> bytes:
    out = encode_unsigned_varint(len(tags))
    for tag, value in tags:
        out += encode_unsigned_varint(tag) + encode_unsigned_varint(len(value)) + value
    return out


def kio_bytes(header: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("api_key", "api_version", "request_version", "response_version"),
    [
        (ApiKey.PRODUCE, 8, 1, 0),
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 11, 1, 0),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.METADATA, 0, 1, 0),
        (ApiKey.METADATA, 9, 2, 1),
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),
        (ApiKey.API_VERSIONS, 4, 2, 0),
        (ApiKey.CONTROLLED_SHUTDOWN, 0, 0, 0),
        (ApiKey.CONTROLLED_SHUTDOWN, 2, 1, 0),
        (ApiKey.CONTROLLED_SHUTDOWN, 3, 2, 1),
        (ApiKey.SASL_HANDSHAKE, 1, 1, 0),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, 2, 1),
    ],
)
def test_header_versions_follow_kafka(
    api_key: int, api_version: int, request_version: int, response_version: int
) -> None:
    assert request_header_version(api_key, api_version) == request_version
    assert response_header_version(api_key, api_version) == response_version


@pytest.mark.parametrize(("api_key", "api_version"), [(999, 0), (ApiKey.FETCH, 99), (4, 0)])
def test_unknown_api_or_version_has_no_header_version(api_key: int, api_version: int) -> None:
    assert request_header_version(api_key, api_version) is None
    assert response_header_version(api_key, api_version) is None


def test_every_intercepted_version_has_header_versions() -> None:
    for api_key, versions in INTERCEPTED_VERSIONS.items():
        for version in versions:
            assert request_header_version(api_key, version) in (1, 2)
            assert response_header_version(api_key, version) in (0, 1)


def test_peek_reads_the_fixed_prefix_only() -> None:
    frame = struct.pack(">hhi", 1, 17, 42) + b"\xff\xff"
    assert peek_request(frame) == (1, 17, 42)
    assert peek_request(memoryview(frame)) == (1, 17, 42)


def test_peek_of_short_frame_is_a_remote_error() -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        peek_request(b"\x00\x01\x00")
    assert caught.value.error_code is KafkaError.INVALID_REQUEST


def test_controlled_shutdown_v0_header_has_no_client_id() -> None:
    encoded = encode_request_header(ApiKey.CONTROLLED_SHUTDOWN, 0, 7, "ignored")
    assert encoded == struct.pack(">hhi", 7, 0, 7)
    header = parse_request_header(encoded + b"body")
    assert header == RequestHeader(
        api_key=7, api_version=0, correlation_id=7, client_id=None, header_version=0, size=8
    )


@given(int32s, client_ids)
def test_request_header_v1_matches_kio(correlation_id: int, client_id: str | None) -> None:
    encoded = encode_request_header(ApiKey.FETCH, 11, correlation_id, client_id)
    expected = KioRequestHeaderV1(
        request_api_key=i16(1),
        request_api_version=i16(11),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    assert encoded == kio_bytes(expected)
    header = parse_request_header(encoded + b"body")
    assert (header.correlation_id, header.client_id) == (correlation_id, client_id)
    assert (header.header_version, header.size) == (1, len(encoded))


@given(int32s, client_ids)
def test_request_header_v2_matches_kio(correlation_id: int, client_id: str | None) -> None:
    encoded = encode_request_header(ApiKey.FETCH, 12, correlation_id, client_id)
    expected = KioRequestHeaderV2(
        request_api_key=i16(1),
        request_api_version=i16(12),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    assert encoded == kio_bytes(expected)
    header = parse_request_header(encoded)
    assert header == RequestHeader(
        api_key=1,
        api_version=12,
        correlation_id=correlation_id,
        client_id=client_id,
        header_version=2,
        size=len(encoded),
    )


@given(int32s, client_ids, tagged_fields, st.binary(max_size=10))
def test_request_header_v2_skips_tagged_fields(
    correlation_id: int, client_id: str | None, tags: list[tuple[int, bytes]], body: bytes
) -> None:
    untagged = encode_request_header(ApiKey.METADATA, 12, correlation_id, client_id)
    with_tags = untagged[:-1] + tags_section(tags)
    header = parse_request_header(with_tags + body)
    assert header.client_id == client_id
    assert header.size == len(with_tags)


def test_client_id_that_is_not_utf8_is_replaced_like_kafka() -> None:
    frame = struct.pack(">hhih", 3, 1, 5, 2) + b"\xff\xfe"
    assert parse_request_header(frame).client_id == "\ufffd\ufffd"


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">hhi", 1, 11, 0),
        struct.pack(">hhih", 1, 11, 0, 5) + b"abc",
        struct.pack(">hhih", 1, 12, 0, -1),
        struct.pack(">hhih", 1, 12, 0, -1) + b"\x01\x00\x05ab",
        struct.pack(">hhih", 1, 12, 0, -1) + b"\xff\xff\xff\xff\xff\xff",
    ],
)
def test_truncated_request_headers_are_remote_errors(frame: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        parse_request_header(frame)
    assert caught.value.error_code is KafkaError.INVALID_REQUEST


def test_unknown_api_version_is_unsupported_version() -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        parse_request_header(struct.pack(">hhih", 1, 99, 0, -1))
    assert caught.value.error_code is KafkaError.UNSUPPORTED_VERSION


@given(st.binary(max_size=40))
def test_random_request_headers_only_raise_remote_errors(frame: bytes) -> None:
    try:
        header = parse_request_header(frame)
    except RemoteProtocolError:
        return
    assert header.size <= len(frame)


def test_encoding_unknown_or_out_of_range_headers_is_our_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        encode_request_header(999, 0, 1, None)
    with pytest.raises(LocalProtocolError):
        encode_request_header(ApiKey.FETCH, 12, 2**31, None)
    with pytest.raises(LocalProtocolError):
        encode_request_header(ApiKey.FETCH, 12, 1, "x" * 40000)
    with pytest.raises(LocalProtocolError):
        encode_response_header(1, 2)
    with pytest.raises(LocalProtocolError):
        parse_response_header(b"\x00\x00\x00\x01", 2)


@given(int32s)
def test_response_header_round_trips(correlation_id: int) -> None:
    v0 = encode_response_header(correlation_id, 0)
    v1 = encode_response_header(correlation_id, 1)
    assert v0 == struct.pack(">i", correlation_id)
    assert v1 == kio_bytes(KioResponseHeaderV1(correlation_id=i32(correlation_id)))
    assert parse_response_header(v0 + b"body", 0) == (correlation_id, 4)
    assert parse_response_header(v1 + b"body", 1) == (correlation_id, 5)


@given(int32s, tagged_fields)
def test_response_header_v1_skips_tagged_fields(
    correlation_id: int, tags: list[tuple[int, bytes]]
) -> None:
    encoded = struct.pack(">i", correlation_id) + tags_section(tags)
    assert parse_response_header(encoded + b"\x00", 1) == (correlation_id, len(encoded))


@pytest.mark.parametrize(
    ("frame", "version"),
    [(b"\x00\x00\x01", 0), (b"\x00\x00\x00\x01", 1), (b"\x00\x00\x00\x01\x01\x00\x09", 1)],
)
def test_truncated_response_headers_are_remote_errors(frame: bytes, version: int) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_response_header(frame, version)
