"""FrameReceiver: the same frames as FrameDecoder however the reads fall, large frames
read in place, and the same error values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError
from protocol.frame_receiver import Frame, FrameReceiver
from protocol.frames import FrameDecoder, FrameTooLarge, InvalidFrameSize, encode_frame

# Sizes around the 64 KiB staging buffer, so that frames are staged, cut across refills,
# and given their own buffers.
_SIZES = st.sampled_from([0, 1, 3, 4, 100, 65_531, 65_532, 65_533, 65_536, 70_000, 140_000])
payloads = st.lists(_SIZES.map(lambda n: bytes(i % 251 for i in range(n))), max_size=6)


def receive(stream: bytes, reads: list[int], max_frame_bytes: int = 1 << 20) -> list[object]:
    """Feed ``stream`` through the receiver's own buffers, ``reads`` bytes at a time at most."""
    receiver = FrameReceiver(max_frame_bytes)
    out: list[object] = []
    position = 0
    turn = 0
    while position < len(stream):
        target = receiver.buffer()
        assert len(target) > 0
        limit = reads[turn % len(reads)] if reads else len(stream)
        count = min(len(target), limit, len(stream) - position)
        target[:count] = stream[position : position + count]
        position += count
        turn += 1
        frames, error = receiver.received(count)
        out.extend(bytes(frame) for frame in frames)
        if error is not None:
            out.append(error)
            break
    return out


def decode(stream: bytes, max_frame_bytes: int = 1 << 20) -> list[object]:
    decoder = FrameDecoder(max_frame_bytes)
    decoder.feed(stream)
    out: list[object] = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
        if not isinstance(frame, bytes):
            break
    return out


@given(payloads, st.lists(st.integers(min_value=1, max_value=100_000), max_size=5))
def test_frames_are_those_of_the_decoder_however_the_reads_fall(
    frames: list[bytes], reads: list[int]
) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    assert receive(stream, reads) == frames == decode(stream)


def test_byte_by_byte() -> None:
    frames = [b"", b"abc", bytes(70_000), b"xyz"]
    stream = b"".join(encode_frame(f) for f in frames)
    assert receive(stream, [1]) == frames


def test_a_large_frame_is_read_into_the_buffer_it_is_returned_in() -> None:
    receiver = FrameReceiver(1 << 20)
    payload = bytes(range(256)) * 1024
    stream = encode_frame(payload)
    first = receiver.buffer()
    first[:10] = stream[:10]
    assert receiver.received(10) == ([], None)
    rest = receiver.buffer()
    assert len(rest) == len(payload) - 6
    rest[:] = stream[10:]
    (frame,), error = receiver.received(len(rest))
    assert error is None
    assert isinstance(frame, memoryview)
    assert frame == payload
    assert rest.obj is frame.obj


def test_the_next_large_frame_reuses_the_buffer() -> None:
    receiver = FrameReceiver(1 << 20)
    frames = []
    for payload in (bytes(200_000), b"x" * 100_000):
        stream = encode_frame(payload)
        position = 0
        while position < len(stream):
            target = receiver.buffer()
            count = min(len(target), len(stream) - position)
            target[:count] = stream[position : position + count]
            position += count
            done, _ = receiver.received(count)
            frames += done
        assert frames[-1] == payload
    assert frames[0].obj is frames[1].obj  # type: ignore[union-attr]


def test_small_frames_in_one_read_are_cut_apart() -> None:
    receiver = FrameReceiver(1 << 20)
    stream = encode_frame(b"one") + encode_frame(b"two") + b"\x00\x00"
    receiver.buffer()[: len(stream)] = stream
    assert receiver.received(len(stream)) == ([b"one", b"two"], None)
    receiver.buffer()[:4] = b"\x00\x03hi"
    assert receiver.received(4) == ([], None)
    receiver.buffer()[:1] = b"!"
    assert receiver.received(1) == ([b"hi!"], None)


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        (b"\xff\xff\xff\xff", InvalidFrameSize(declared_size=-1)),
        (b"\x00\x10\x00\x01", FrameTooLarge(declared_size=0x100001, limit=1 << 20)),
    ],
)
def test_a_bad_prefix_is_an_error_value_that_stays(prefix: bytes, error: object) -> None:
    receiver = FrameReceiver(1 << 20)
    stream = encode_frame(b"ok") + prefix
    receiver.buffer()[: len(stream)] = stream
    assert receiver.received(len(stream)) == ([b"ok"], error)
    assert receiver.received(0) == ([], error)
    assert receive(stream, []) == [b"ok", error] == decode(stream)


def test_limit_must_be_a_frame_size() -> None:
    with pytest.raises(LocalProtocolError):
        FrameReceiver(-1)


def test_staged_frames_are_bytes() -> None:
    receiver = FrameReceiver(1 << 20)
    stream = encode_frame(b"small")
    receiver.buffer()[: len(stream)] = stream
    frames: list[Frame]
    frames, _ = receiver.received(len(stream))
    assert [type(f) for f in frames] == [bytes]
