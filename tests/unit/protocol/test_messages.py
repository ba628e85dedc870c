"""protocol.messages against kio's own schemas: round trips, hostile bytes, acks, helpers.

The round-trip properties draw payloads with ``st.from_type`` (kio registers strategies
for its primitive types) for every request and response version in INTERCEPTED_VERSIONS.
Their example count is a twentieth of the loaded hypothesis profile's, so the default
profile keeps this file to a few seconds and an exhaustive profile scales it up.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.static.primitive import Records, i64Timedelta

from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.messages import (
    ADDRESS_VERSIONS,
    INTERCEPTED_VERSIONS,
    ApiKey,
    ErrorCode,
    carries_addresses,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    nested_class,
    produce_acks,
    request_class,
    response_class,
)

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio's own strategy draws int64-millisecond durations up to ``timedelta.max``, which is
# more milliseconds than an int64 holds: kio writes such a value and its reader refuses it
# ("timedelta milliseconds overflow"). Kafka's fields (SaslAuthenticate's
# session_lifetime_ms, ...) are int64 milliseconds; draw durations of up to 278 years
# (2**43 ms), which the wire carries and kio's float-based conversion keeps exact (near
# 2**53 ms it rounds a millisecond away).
st.register_type_strategy(
    i64Timedelta,
    st.integers(min_value=-(2**43), max_value=2**43).map(
        lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
    ),
)

few_examples = settings(
    max_examples=max(3, settings().max_examples // 20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CASES = [
    pytest.param(api_key, version, kind, id=f"{api_key.name}-v{version}-{kind}")
    for api_key, versions in INTERCEPTED_VERSIONS.items()
    for version in versions
    for kind in ("request", "response")
]


def schema_of(api_key: int, version: int, kind: str) -> type[Any]:
    return (
        request_class(api_key, version) if kind == "request" else response_class(api_key, version)
    )


def codec_of(kind: str) -> tuple[Any, Any]:
    if kind == "request":
        return encode_request, decode_request
    return encode_response, decode_response


def kio_bytes(payload: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(payload))(buffer, payload)
    return buffer.getvalue()


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@few_examples
@given(data=st.data())
def test_round_trip_matches_kio(api_key: ApiKey, version: int, kind: str, data: Any) -> None:
    schema = schema_of(api_key, version, kind)
    payload = data.draw(st.from_type(schema))
    encode, decode = codec_of(kind)
    body = encode(payload)
    assert body == kio_bytes(payload)
    decoded = decode(api_key, version, body)
    assert decoded == payload
    assert encode(decoded) == body


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@few_examples
@given(data=st.data())
def test_mutated_bodies_decode_or_raise_remote_errors(
    api_key: ApiKey, version: int, kind: str, data: Any
) -> None:
    body = bytearray(codec_of(kind)[0](data.draw(st.from_type(schema_of(api_key, version, kind)))))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(body)))
        action = data.draw(st.sampled_from(["set", "insert", "truncate"]))
        if action == "truncate":
            del body[position:]
        elif action == "insert":
            body[position:position] = data.draw(st.binary(min_size=1, max_size=5))
        elif position < len(body):
            body[position] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
    try:
        codec_of(kind)[1](api_key, version, bytes(body))
    except RemoteProtocolError as err:
        assert err.error_code is KafkaError.INVALID_REQUEST


TARGETS = [
    (api_key, version) for api_key, versions in INTERCEPTED_VERSIONS.items() for version in versions
]


@settings(max_examples=max(50, settings().max_examples * 2), deadline=None)
@given(st.sampled_from(TARGETS), st.binary(max_size=120))
def test_random_bytes_only_raise_remote_protocol_errors(
    target: tuple[ApiKey, int], body: bytes
) -> None:
    api_key, version = target
    for decode in (decode_request, decode_response):
        try:
            decode(api_key, version, body)
        except RemoteProtocolError as err:
            assert err.error_code is KafkaError.INVALID_REQUEST


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        # MetadataRequest v1: topics array of 2**31 - 1 strings in a 20-byte body.
        (ApiKey.METADATA, 1, struct.pack(">i", 2**31 - 1) + bytes(16)),
        # MetadataRequest v9 (flexible): compact array count of about 4e9.
        (ApiKey.METADATA, 9, uvarint(4_000_000_001) + bytes(16)),
        # FetchRequest v12: topics count far beyond the body after the fixed fields.
        (ApiKey.FETCH, 12, bytes(4 + 4 + 4 + 4 + 1 + 4 + 4) + uvarint(2**32 - 1) + bytes(8)),
    ],
)
def test_huge_counts_are_refused_before_kio_allocates(
    api_key: ApiKey, version: int, body: bytes
) -> None:
    """kio's native reader would abort the process allocating for such a count."""
    with pytest.raises(RemoteProtocolError, match="overruns") as caught:
        decode_request(api_key, version, body)
    assert caught.value.error_code is KafkaError.INVALID_REQUEST


def test_trailing_bytes_are_refused() -> None:
    body = encode_request(request_class(ApiKey.API_VERSIONS, 0)())
    assert decode_request(ApiKey.API_VERSIONS, 0, body) == request_class(ApiKey.API_VERSIONS, 0)()
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(ApiKey.API_VERSIONS, 0, body + b"\x00")
    assert caught.value.error_code is KafkaError.INVALID_REQUEST


def test_unknown_api_or_version_is_unsupported_version() -> None:
    for call in (
        lambda: decode_request(ApiKey.FETCH, 99, b""),
        lambda: decode_response(999, 0, b""),
        lambda: request_class(ApiKey.CONTROLLED_SHUTDOWN, 0),
        lambda: response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, 1),
    ):
        with pytest.raises(RemoteProtocolError) as caught:
            call()
        assert caught.value.error_code is KafkaError.UNSUPPORTED_VERSION


def test_unknown_error_code_in_a_response_is_a_remote_error() -> None:
    body = struct.pack(">hi", 999, 0)
    with pytest.raises(RemoteProtocolError):
        decode_response(ApiKey.API_VERSIONS, 0, body)


def test_unknown_tagged_field_is_a_remote_error() -> None:
    """kio 0.6.5 has no place for tags it does not know, so it cannot decode them."""
    known = encode_request(
        request_class(ApiKey.API_VERSIONS, 3)(client_software_name="a", client_software_version="1")
    )
    assert known.endswith(b"\x00")
    with pytest.raises(RemoteProtocolError):
        decode_request(ApiKey.API_VERSIONS, 3, known[:-1] + b"\x01\x63\x01\x00")


def fetch_response_v17(partitions: int, record_bytes: int) -> Any:
    response = response_class(ApiKey.FETCH, 17)
    topic = nested_class(response, "responses")
    partition = nested_class(topic, "partitions")
    records = bytes(range(256)) * (record_bytes // 256)
    return response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        responses=(
            topic(
                topic_id=uuid.uuid4(),
                partitions=tuple(
                    partition(
                        partition_index=index,
                        error_code=ErrorCode.none,
                        high_watermark=100,
                        aborted_transactions=None,
                        records=records,
                    )
                    for index in range(partitions)
                ),
            ),
        ),
    )


def test_records_stay_one_bytes_object_per_partition() -> None:
    payload = fetch_response_v17(partitions=8, record_bytes=1024 * 1024)
    body = encode_response(payload)
    assert len(body) > 8 * 1024 * 1024
    decoded = decode_response(ApiKey.FETCH, 17, memoryview(body))
    assert decoded == payload
    for partition in decoded.responses[0].partitions:
        assert type(partition.records) is bytes
        assert len(partition.records) == 1024 * 1024


def test_nested_class_builds_values_of_the_same_version() -> None:
    response = response_class(ApiKey.FETCH, 17)
    partition = nested_class(nested_class(response, "responses"), "partitions")
    aborted = nested_class(partition, "aborted_transactions")
    assert aborted.__name__ == "AbortedTransaction"
    assert aborted.__version__ == 17
    assert nested_class(partition, "diverging_epoch").__name__ == "EpochEndOffset"
    edited = dataclasses.replace(
        fetch_response_v17(partitions=1, record_bytes=256).responses[0].partitions[0],
        aborted_transactions=(aborted(producer_id=7, first_offset=3),),
    )
    assert edited.aborted_transactions[0].producer_id == 7


@pytest.mark.parametrize("field", ["throttle_time", "no_such_field"])
def test_nested_class_of_a_non_entity_field_is_our_misuse(field: str) -> None:
    with pytest.raises(LocalProtocolError):
        nested_class(response_class(ApiKey.FETCH, 17), field)
    with pytest.raises(LocalProtocolError):
        nested_class(int, field)


def test_encoding_the_wrong_kind_or_bad_values_is_our_misuse() -> None:
    request = request_class(ApiKey.API_VERSIONS, 0)()
    with pytest.raises(LocalProtocolError):
        encode_response(request)
    with pytest.raises(LocalProtocolError):
        encode_request(object())
    metadata = request_class(ApiKey.METADATA, 1)
    topic = nested_class(metadata, "topics")
    with pytest.raises(LocalProtocolError):
        encode_request(metadata(topics=(topic(name="x" * 40000),)))


@pytest.mark.parametrize("version", sorted(INTERCEPTED_VERSIONS[ApiKey.PRODUCE]))
@few_examples
@given(data=st.data())
def test_produce_acks_matches_the_encoded_request(version: int, data: Any) -> None:
    payload = data.draw(st.from_type(request_class(ApiKey.PRODUCE, version)))
    assert produce_acks(version, encode_request(payload)) == payload.acks


@pytest.mark.parametrize(
    ("version", "body", "acks"),
    [
        (0, struct.pack(">hi", -1, 30000), -1),
        (2, struct.pack(">hi", 0, 30000), 0),
        (3, struct.pack(">hh", -1, 1), 1),
        (8, struct.pack(">h", 3) + b"txn" + struct.pack(">h", -1), -1),
        (9, b"\x00" + struct.pack(">h", 0), 0),
        (13, b"\x04txn" + struct.pack(">h", 1), 1),
    ],
)
def test_produce_acks_by_version(version: int, body: bytes, acks: int) -> None:
    assert produce_acks(version, body) == acks


@pytest.mark.parametrize(
    ("version", "body"), [(0, b"\x00"), (3, b"\x00\x05abc"), (9, b"\x80"), (9, b"\x04tx")]
)
def test_produce_acks_of_a_truncated_body_is_a_remote_error(version: int, body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        produce_acks(version, body)


def test_intercepted_versions() -> None:
    assert INTERCEPTED_VERSIONS[ApiKey.FETCH] == range(4, 19)
    assert INTERCEPTED_VERSIONS[ApiKey.LIST_OFFSETS] == range(1, 12)
    assert INTERCEPTED_VERSIONS[ApiKey.SHARE_FETCH] == range(1, 3)
    assert INTERCEPTED_VERSIONS[ApiKey.SHARE_ACKNOWLEDGE] == range(1, 3)
    assert INTERCEPTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH] == range(2, 5)
    assert INTERCEPTED_VERSIONS[ApiKey.FIND_COORDINATOR] == range(0, 7)
    assert INTERCEPTED_VERSIONS[ApiKey.API_VERSIONS] == range(0, 5)
    assert INTERCEPTED_VERSIONS[ApiKey.METADATA] == range(0, 14)
    assert INTERCEPTED_VERSIONS[ApiKey.PRODUCE] == range(3, 14)
    assert INTERCEPTED_VERSIONS[ApiKey.DESCRIBE_CLUSTER] == range(0, 3)
    assert INTERCEPTED_VERSIONS[ApiKey.DELETE_RECORDS] == range(0, 3)


NOT_BROKER_ADDRESSES = {
    ApiKey.DESCRIBE_ACLS: "an ACL's host pattern",
    ApiKey.DELETE_ACLS: "an ACL's host pattern",
    ApiKey.DESCRIBE_QUORUM: "the KRaft controllers' listeners, which the proxy does not front",
    ApiKey.STREAMS_GROUP_HEARTBEAT: "Kafka Streams instances' own application endpoints",
    ApiKey.STREAMS_GROUP_DESCRIBE: "Kafka Streams instances' own application endpoints",
    ApiKey.VOTE: "controller to controller (KRaft), never on a broker listener",
    ApiKey.BEGIN_QUORUM_EPOCH: "controller to controller (KRaft), never on a broker listener",
    ApiKey.END_QUORUM_EPOCH: "controller to controller (KRaft), never on a broker listener",
    ApiKey.FETCH_SNAPSHOT: "controller to controller (KRaft), never on a broker listener",
    ApiKey.UPDATE_RAFT_VOTER: "controller to controller (KRaft), never on a broker listener",
}
"""Responses with a ``host`` field that names no broker (docs/architecture.md, "Broker
addresses")."""


def names_a_host(entity_class: type[Any]) -> bool:
    """Whether the entity or any entity within it has a ``host`` field."""
    for field in dataclasses.fields(entity_class):
        if field.name == "host":
            return True
        try:
            nested = nested_class(entity_class, field.name)
        except LocalProtocolError:
            continue
        if names_a_host(nested):
            return True
    return False


@pytest.mark.parametrize("api_key", sorted(api_key_map), ids=lambda key: ApiKey(key).name)
def test_every_response_that_names_a_host_is_rewritten_or_names_no_broker(api_key: int) -> None:
    """The audit of docs/architecture.md's address table, over every schema kio knows: a
    response naming a host at some version either has its addresses rewritten from there on
    (and is intercepted at every version kio knows from there), or names no broker."""
    key = ApiKey(api_key)
    for version in sorted(schema_name_map[api_key_map[api_key]]):
        if not names_a_host(response_class(api_key, version)):
            assert not carries_addresses(api_key, version), (key, version)
            continue
        assert carries_addresses(api_key, version) or key in NOT_BROKER_ADDRESSES, (key, version)
        if key in ADDRESS_VERSIONS:
            assert version in INTERCEPTED_VERSIONS[key], (key, version)


def test_api_keys_match_kio() -> None:
    for key, name in api_key_map.items():
        assert ApiKey(key).name == name.upper()


def test_kafka_errors_match_kio() -> None:
    for code in KioErrorCode:
        assert int(KafkaError[code.name.upper()]) == int(code.value)
        assert int(KafkaError(code.value)) == int(code)
    assert ErrorCode is KioErrorCode
