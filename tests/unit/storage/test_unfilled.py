"""Unfilled buffers: the length asked for, an ordinary ``bytearray`` once written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.unfilled import unfilled_bytearray


@given(st.binary(max_size=70_000))
def test_holds_what_is_written_whole(data: bytes) -> None:
    body = unfilled_bytearray(len(data))
    assert type(body) is bytearray
    assert len(body) == len(data)
    memoryview(body)[:] = data
    assert body == data


def test_a_large_buffer_has_its_length_and_can_grow() -> None:
    body = unfilled_bytearray(8 * 1024 * 1024 + 1)
    assert len(body) == 8 * 1024 * 1024 + 1
    body[-1:] = b"x"
    body += b"y"
    assert body[-2:] == b"xy"


def test_a_negative_length_is_refused() -> None:
    with pytest.raises(ValueError, match="-1 bytes"):
        unfilled_bytearray(-1)
