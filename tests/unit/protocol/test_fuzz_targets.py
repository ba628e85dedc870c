"""A CI-safe smoke run of the fuzz targets (``tests/fuzz``) under hypothesis: the same code
atheris explores for minutes with ``make fuzz``, for a bounded number of examples here."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.targets import TARGETS


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=300)
@given(data=st.binary(max_size=512))
def test_random_bytes_raise_only_our_protocol_error(name: str, data: bytes) -> None:
    TARGETS[name](data)


frames = st.lists(st.binary(max_size=40), max_size=6).map(
    lambda payloads: b"".join(struct.pack(">i", len(p)) + p for p in payloads)
)


@settings(max_examples=200)
@given(limit=st.integers(0, 255), cuts=st.binary(max_size=15), stream=frames)
def test_well_framed_streams_decode_alike_however_cut(
    limit: int, cuts: bytes, stream: bytes
) -> None:
    TARGETS["frames"](bytes([limit, len(cuts)]) + cuts + stream)


@settings(max_examples=300)
@given(
    schema=st.integers(0, 0xFFFF),
    direction=st.integers(0, 1),
    # Small counts and lengths (int32 and varint alike) that reach past the first field.
    body=st.lists(
        st.sampled_from([b"\x00", b"\x01", b"\x02", b"\x00\x00\x00\x01", b"\xff\xff", b"a"]),
        max_size=40,
    ).map(b"".join),
)
def test_near_valid_bodies_raise_only_our_protocol_error(
    schema: int, direction: int, body: bytes
) -> None:
    TARGETS["shape"](struct.pack(">HB", schema, direction) + body)
