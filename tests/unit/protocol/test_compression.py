"""Every codec's framing as Kafka's clients write it decompresses to the original records."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.compression import DecompressionError, decompress_records
from protocol.records import Compression


def _xerial(data: bytes, block: int = 7) -> bytes:
    """snappy-java's stream: a 16-byte header, then length-prefixed raw snappy blocks."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[start : start + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


COMPRESSORS = {
    Compression.GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    Compression.SNAPPY: lambda d: bytes(cramjam.snappy.compress_raw(d)),
    Compression.LZ4: lambda d: bytes(cramjam.lz4.compress(d)),
    Compression.ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}


@given(data=st.binary(max_size=2000), codec=st.sampled_from(sorted(COMPRESSORS)))
def test_round_trip(data: bytes, codec: Compression) -> None:
    body = memoryview(COMPRESSORS[codec](data))
    assert bytes(decompress_records(codec, body)) == data


@given(data=st.binary(min_size=1, max_size=500))
def test_snappy_java_blocks(data: bytes) -> None:
    assert decompress_records(Compression.SNAPPY, memoryview(_xerial(data))) == data


def test_uncompressed_is_returned_without_a_copy() -> None:
    body = memoryview(b"records")
    assert decompress_records(Compression.NONE, body) is body


def test_garbage_raises_the_codecs_error() -> None:
    with pytest.raises(DecompressionError):
        decompress_records(Compression.ZSTD, memoryview(b"not zstd at all"))
