"""Kafka varints: known encodings, round trips, and refusal of malformed input."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial import writers

from protocol.errors import LocalProtocolError, ProtocolError
from protocol.varint import (
    VarintError,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_zigzag_varint_known_encodings(value: int, encoded: bytes) -> None:
    # Values from Kafka's ByteUtilsTest (zig-zag: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ...).
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_unsigned_varint_known_encodings() -> None:
    assert encode_unsigned_varint(0) == b"\x00"
    assert encode_unsigned_varint(127) == b"\x7f"
    assert encode_unsigned_varint(128) == b"\x80\x01"
    assert encode_unsigned_varint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"


def test_varlong_extremes() -> None:
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(encode_varlong(2**63 - 1)) == (2**63 - 1, 10)


@given(st.integers(0, 2**32 - 1), st.binary(max_size=4))
def test_unsigned_varint_round_trip_at_offset(value: int, prefix: bytes) -> None:
    encoded = encode_unsigned_varint(value)
    buf = memoryview(prefix + encoded + b"\xff")
    assert decode_unsigned_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(encoded) == (value, len(encoded))


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert decode_varlong(bytearray(encoded)) == (value, len(encoded))


@given(INT32)
def test_truncated_varint_is_refused(value: int) -> None:
    encoded = encode_varint(value)
    for cut in range(len(encoded)):
        with pytest.raises(VarintError, match="truncated"):
            decode_varint(encoded[:cut])


def test_too_long_encodings_are_refused() -> None:
    with pytest.raises(VarintError, match="longer than 5"):
        decode_varint(b"\x80" * 5 + b"\x00")
    with pytest.raises(VarintError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00")


def test_values_beyond_the_type_are_refused() -> None:
    # A 5-byte varint can carry 35 bits; Kafka's int holds 32.
    with pytest.raises(VarintError, match="out of range"):
        decode_unsigned_varint(b"\xff\xff\xff\xff\x1f")
    with pytest.raises(VarintError, match="out of range"):
        decode_varlong(b"\xff" * 9 + b"\x7f")


@given(st.binary(max_size=12), st.integers(0, 12))
def test_random_bytes_only_raise_varint_errors(data: bytes, position: int) -> None:
    for decode in (decode_unsigned_varint, decode_varint, decode_varlong):
        try:
            value, end = decode(data, position)
        except VarintError as err:
            assert isinstance(err, ProtocolError)
        else:
            assert position < end <= len(data)
            assert isinstance(value, int)


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (encode_unsigned_varint, -1),
        (encode_unsigned_varint, 2**32),
        (encode_varint, 2**31),
        (encode_varlong, -(2**63) - 1),
    ],
)
def test_encoding_out_of_range_is_our_misuse(encode: object, value: int) -> None:
    assert callable(encode)
    with pytest.raises(LocalProtocolError):
        encode(value)


@given(INT32, INT64, st.integers(0, 2**32 - 1))
def test_encodings_agree_with_kio(value32: int, value64: int, unsigned: int) -> None:
    # kio implements the same Kafka primitives for the flexible protocol versions.
    cases: list[tuple[Callable[..., None], int, bytes]] = [
        (writers.write_signed_varint, value32, encode_varint(value32)),
        (writers.write_signed_varlong, value64, encode_varlong(value64)),
        (writers.write_unsigned_varint, unsigned, encode_unsigned_varint(unsigned)),
    ]
    for write, value, ours in cases:
        out = io.BytesIO()
        write(out, value)
        assert out.getvalue() == ours
