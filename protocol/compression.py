"""Decompress the records of a v2 batch body, with Kafka's framing of each codec.

The remote reader needs it to find timestamps, the Spark data source to turn batches into
rows; both get exactly the bytes a Java consumer would decompress.
"""

from __future__ import annotations

import struct
from typing import Final

import cramjam

from protocol.records import Compression

__all__ = ["DecompressionError", "decompress_records"]

DecompressionError = cramjam.DecompressionError
"""What a damaged compressed body raises (besides ``ValueError`` for bad framing)."""

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16
_INT32: Final = struct.Struct(">i")


def decompress_records(compression: Compression, body: memoryview) -> bytes | memoryview:
    """The records of a batch body (``body`` itself when uncompressed, without a copy).

    :raises DecompressionError: when the codec cannot decode the body.
    :raises struct.error: when a snappy-java block header is cut short.
    """
    if compression is Compression.NONE:
        return body
    data = bytes(body)
    if compression is Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if compression is Compression.SNAPPY:
        return _snappy(data)
    if compression is Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    return bytes(cramjam.zstd.decompress(data))


def _snappy(data: bytes) -> bytes:
    """Snappy as Java clients write it (xerial blocks after a 16-byte header) or raw."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    point = _XERIAL_HEADER_SIZE
    while point < len(data):
        (length,) = _INT32.unpack_from(data, point)
        point += _INT32.size
        out += bytes(cramjam.snappy.decompress_raw(data[point : point + length]))
        point += length
    return bytes(out)
