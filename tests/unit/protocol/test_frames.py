"""FrameDecoder and encode_frame: splitting, limits, error values, linear cost."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError
from protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameTooLarge,
    InvalidFrameSize,
    encode_frame,
    foreign_protocol,
)

payloads = st.lists(st.binary(max_size=300), max_size=8)


def drain(decoder: FrameDecoder) -> list[bytes | FrameTooLarge | InvalidFrameSize]:
    out: list[bytes | FrameTooLarge | InvalidFrameSize] = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
        if not isinstance(frame, bytes):
            break
    return out


def decode_in_pieces(stream: bytes, cuts: list[int], **kwargs: int) -> list[object]:
    decoder = FrameDecoder(**kwargs)
    frames: list[object] = []
    previous = 0
    for cut in [*sorted(cuts), len(stream)]:
        decoder.feed(stream[previous:cut])
        previous = cut
        frames.extend(drain(decoder))
    return frames


def test_encode_frame_prefixes_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(memoryview(b"")) == b"\x00\x00\x00\x00"
    assert encode_frame(bytearray(b"x")) == b"\x00\x00\x00\x01x"


def test_empty_decoder_needs_data() -> None:
    decoder = FrameDecoder()
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 0


def test_partial_frame_is_buffered_until_complete() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00\x00\x05ab")
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 6
    decoder.feed(memoryview(b"cde\x00"))
    assert decoder.next_frame() == b"abcde"
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 1


def test_zero_length_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"") + encode_frame(b"z"))
    assert drain(decoder) == [b"", b"z"]


def test_fed_bytearray_is_copied() -> None:
    buffer = bytearray(encode_frame(b"abc"))
    decoder = FrameDecoder()
    decoder.feed(buffer)
    buffer[4:7] = b"xyz"
    assert decoder.next_frame() == b"abc"


def test_frame_at_limit_is_accepted_and_above_is_an_error_value() -> None:
    decoder = FrameDecoder(max_frame_bytes=4)
    decoder.feed(encode_frame(b"1234") + struct.pack(">i", 5) + b"12345")
    assert decoder.next_frame() == b"1234"
    error = FrameTooLarge(declared_size=5, limit=4)
    assert decoder.next_frame() == error
    decoder.feed(b"more")
    assert decoder.next_frame() == error
    assert decoder.buffered_bytes == 0


def test_negative_size_is_an_error_value() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", -1))
    assert decoder.next_frame() == InvalidFrameSize(declared_size=-1)
    assert decoder.next_frame() == InvalidFrameSize(declared_size=-1)


def test_default_limit_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 104857600
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1))
    assert isinstance(decoder.next_frame(), FrameTooLarge)


def test_bad_limit_is_our_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        FrameDecoder(max_frame_bytes=-1)


@given(payloads, st.lists(st.integers(min_value=0, max_value=4000), max_size=20))
def test_frames_identical_however_the_stream_is_chunked(
    frames: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(frame) for frame in frames)
    cuts = [cut for cut in cuts if cut <= len(stream)]
    assert decode_in_pieces(stream, []) == frames
    assert decode_in_pieces(stream, cuts) == frames
    assert decode_in_pieces(stream, list(range(len(stream)))) == frames


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=50))
def test_random_bytes_give_frames_or_error_values(stream: bytes, step: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=64)
    for start in range(0, len(stream), step):
        decoder.feed(stream[start : start + step])
        for frame in drain(decoder):
            assert isinstance(frame, bytes | FrameTooLarge | InvalidFrameSize)
            if isinstance(frame, bytes):
                assert len(frame) <= 64


def test_a_large_frame_fed_in_64k_pieces_is_copied_once() -> None:
    """Pieces are held as fed and joined once, when the frame is complete: decoding a
    32 MiB frame allocates the frame and little else. Re-joining the buffer on every piece
    (quadratic in the frame size) would need twice the frame at once."""
    payload = bytes(32 * 1024 * 1024)
    stream = encode_frame(payload)
    pieces = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    decoder = FrameDecoder()
    frames = []
    tracemalloc.start()
    try:
        for piece in pieces:
            decoder.feed(piece)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert frames == [payload]
    assert peak < len(payload) + 1024 * 1024


@pytest.mark.parametrize(
    ("first_bytes", "spoken"),
    [
        (b"HTTP/1.1 400 Bad Request", "HTTP"),
        (b"GET / HTTP/1.1", "HTTP"),
        (bytes([0x16, 0x03, 0x01, 0x02, 0x00]), "TLS"),
        (struct.pack(">i", 2_000_000_000), None),
    ],
)
def test_a_peer_speaking_another_protocol_is_named(first_bytes: bytes, spoken: str | None) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    decoder.feed(first_bytes)
    error = decoder.next_frame()
    assert isinstance(error, FrameTooLarge)
    assert foreign_protocol(error.declared_size) == spoken
