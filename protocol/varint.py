"""Kafka's variable-length integers (``ByteUtils`` in the Java client).

Three encodings appear on the wire and on disk:

- *unsigned varint*: 7 bits per byte, least significant group first, high bit set on
  every byte but the last; at most 5 bytes for a 32-bit value. KIP-405's metadata
  records frame ``type`` and ``version`` with it.
- *varint*: a 32-bit signed value, zig-zag mapped to unsigned first (0, -1, 1, -2, ...
  become 0, 1, 2, 3, ...) so that small negative numbers stay short. Record lengths,
  offset deltas and key/value lengths in record batch v2 use it.
- *varlong*: the same for 64-bit values, at most 10 bytes (record timestamp deltas).

Decoders take ``(buf, position)`` and return ``(value, next_position)`` so callers walk
a ``memoryview`` without slicing it. Like Kafka they refuse encodings longer than the
type allows, which bounds the work a hostile peer can cause.
"""

from __future__ import annotations

from protocol.errors import LocalProtocolError, ProtocolError

__all__ = [
    "Buffer",
    "VarintError",
    "decode_unsigned_varint",
    "decode_varint",
    "decode_varlong",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varlong",
]

Buffer = bytes | bytearray | memoryview
"""Any contiguous byte buffer the decoders accept."""

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10
_UINT32_LIMIT = 1 << 32
_UINT64_LIMIT = 1 << 64
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class VarintError(ProtocolError):
    """Bytes that do not hold a valid varint: truncated, too long, or out of range.

    Callers turn it into their own error (a corrupt batch, a bad metadata record), so the
    message says what was wrong and where.
    """


def _encode_raw(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_raw(buf: Buffer, position: int, max_bytes: int, limit: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for index in range(position, position + max_bytes):
        if index >= end:
            raise VarintError(f"varint at position {position} is truncated")
        byte = buf[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= limit:
                raise VarintError(f"varint at position {position} is out of range")
            return value, index + 1
        shift += 7
    raise VarintError(f"varint at position {position} is longer than {max_bytes} bytes")


def encode_unsigned_varint(value: int) -> bytes:
    """Encode ``0 <= value < 2**32`` as an unsigned varint.

    :raises LocalProtocolError: if ``value`` is out of range (our own misuse).
    """
    if not 0 <= value < _UINT32_LIMIT:
        raise LocalProtocolError(f"unsigned varint out of range: {value}")
    return _encode_raw(value)


def decode_unsigned_varint(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``position``; return ``(value, next_position)``.

    :raises VarintError: if it is truncated, longer than 5 bytes, or above 2**32 - 1.
    """
    return _decode_raw(buf, position, _MAX_VARINT_BYTES, _UINT32_LIMIT)


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit ``value`` as a zig-zag varint.

    :raises LocalProtocolError: if ``value`` does not fit in an int32 (our own misuse).
    """
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise LocalProtocolError(f"varint out of int32 range: {value}")
    return _encode_raw(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def decode_varint(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint (int32) at ``position``; return ``(value, next_position)``.

    :raises VarintError: if it is truncated, longer than 5 bytes, or outside int32.
    """
    raw, next_position = _decode_raw(buf, position, _MAX_VARINT_BYTES, _UINT32_LIMIT)
    return (raw >> 1) ^ -(raw & 1), next_position


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit ``value`` as a zig-zag varlong.

    :raises LocalProtocolError: if ``value`` does not fit in an int64 (our own misuse).
    """
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise LocalProtocolError(f"varlong out of int64 range: {value}")
    return _encode_raw(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varlong(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """Read a zig-zag varlong (int64) at ``position``; return ``(value, next_position)``.

    :raises VarintError: if it is truncated, longer than 10 bytes, or outside int64.
    """
    raw, next_position = _decode_raw(buf, position, _MAX_VARLONG_BYTES, _UINT64_LIMIT)
    return (raw >> 1) ^ -(raw & 1), next_position
