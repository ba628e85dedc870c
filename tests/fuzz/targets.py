"""Fuzz targets for what a hostile peer reaches first: the frame decoder, the request and
response header parsers, and the message shape check in front of kio's reader.

Each target takes raw bytes, so atheris (coverage-guided, ``python -m tests.fuzz``) and
hypothesis (the CI smoke run in ``tests/unit/protocol/test_fuzz_targets.py``) drive the same
code. The only allowed outcome on any input is the project's own
:class:`~protocol.errors.RemoteProtocolError`; any other exception, a failed invariant, or
the process dying (kio's native reader aborting on an absurd count) is a crash.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Final

from protocol.errors import RemoteProtocolError
from protocol.frames import FrameDecoder, FrameTooLarge, InvalidFrameSize
from protocol.headers import parse_request_header, parse_response_header, peek_request
from protocol.messages import ApiKey, decode_request, decode_response, request_class

__all__ = ["TARGETS", "fuzz_frame_decoder", "fuzz_headers", "fuzz_shape_check"]

_SELECTOR: Final = struct.Struct(">HB")
_MAX_FRAME_CHOICES: Final = (0, 1, 4, 64, 1024, 1 << 20)
# Versions tried per API when listing the schemas: above every version Kafka defines today.
_VERSIONS_PROBED: Final = range(32)


def _chunks(data: bytes, cuts: bytes) -> Iterator[bytes]:
    """``data`` split where ``cuts`` (one byte per piece: its length) says, then the rest."""
    position = 0
    for cut in cuts:
        if position >= len(data):
            return
        yield data[position : position + cut]
        position += cut
    yield data[position:]


def _decode_all(decoder: FrameDecoder, pieces: Iterator[bytes]) -> list[object]:
    """Every frame (or the error that ends the stream) of ``pieces``, fed in turn."""
    results: list[object] = []
    for piece in pieces:
        decoder.feed(piece)
        while (frame := decoder.next_frame()) is not None:
            results.append(frame)
            if not isinstance(frame, bytes):
                return results
    return results


def fuzz_frame_decoder(data: bytes) -> None:
    """Frames come out the same whole or in pieces, each no larger than the limit and equal
    to the bytes after its prefix; once an error comes it stays, whatever follows."""
    if len(data) < 2:
        return
    limit = _MAX_FRAME_CHOICES[data[0] % len(_MAX_FRAME_CHOICES)]
    cut_count = data[1] % 16
    cuts, stream = data[2 : 2 + cut_count], data[2 + cut_count :]
    decoder = FrameDecoder(limit)
    whole = _decode_all(decoder, iter([stream]))
    assert whole == _decode_all(FrameDecoder(limit), _chunks(stream, cuts))
    consumed = 0
    for result in whole:
        if isinstance(result, bytes):
            assert len(result) <= limit
            assert stream[consumed + 4 : consumed + 4 + len(result)] == result
            consumed += 4 + len(result)
        else:
            assert isinstance(result, FrameTooLarge | InvalidFrameSize)
            decoder.feed(b"more bytes after the error")
            assert decoder.next_frame() == result
            assert decoder.buffered_bytes == 0


def fuzz_headers(data: bytes) -> None:
    """Request and response headers parse to a size inside the frame, or raise ours."""
    try:
        header = parse_request_header(data)
    except RemoteProtocolError:
        pass
    else:
        assert header.size <= len(data)
        assert (header.api_key, header.api_version, header.correlation_id) == peek_request(data)
    for version in (0, 1):
        try:
            _, size = parse_response_header(data, version)
        except RemoteProtocolError:
            continue
        assert 4 <= size <= len(data)


@cache
def _schemas() -> tuple[tuple[int, int], ...]:
    """Every (API key, version) kio has a request schema for."""
    found = []
    for api_key in ApiKey:
        for version in _VERSIONS_PROBED:
            try:
                request_class(api_key, version)
            except RemoteProtocolError:
                continue
            found.append((int(api_key), version))
    return tuple(found)


def fuzz_shape_check(data: bytes) -> None:
    """A body of any request or response schema decodes, or the shape check (or kio behind
    it) refuses it with our error: never another exception, never a dead process."""
    if len(data) < _SELECTOR.size:
        return
    index, direction = _SELECTOR.unpack_from(data)
    schemas = _schemas()
    api_key, version = schemas[index % len(schemas)]
    decode = decode_response if direction & 1 else decode_request
    with contextlib.suppress(RemoteProtocolError):
        decode(api_key, version, data[_SELECTOR.size :])


TARGETS: Final[dict[str, Callable[[bytes], Any]]] = {
    "frames": fuzz_frame_decoder,
    "headers": fuzz_headers,
    "shape": fuzz_shape_check,
}
