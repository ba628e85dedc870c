"""Kafka's murmur2 hash, bit for bit.

KIP-405 places the metadata of a user partition in partition
``toPositive(murmur2(utf8(tp.toString()))) % partitionCount`` of
``__remote_log_metadata``. Every proxy and the pipeline must agree with each other (and
with any Java tool reading the topic), so this is a literal port of
``org.apache.kafka.common.utils.Utils.murmur2``: Java's wrapping 32-bit arithmetic is
reproduced by masking to 32 bits after each multiplication, and the result is returned
as a *signed* int32 like Java's ``int``.
"""

from __future__ import annotations

from protocol.errors import LocalProtocolError

__all__ = ["metadata_partition_for", "murmur2", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail:
        # Java's switch falls through from case 3 to case 1: XOR in the tail bytes
        # little-endian, then one multiplication.
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: ``MIN_VALUE`` maps to 0)."""
    return number & 0x7FFFFFFF


def metadata_partition_for(topic_partition: str, partition_count: int) -> int:
    """The ``__remote_log_metadata`` partition that holds ``topic_partition``'s metadata.

    ``topic_partition`` is Kafka's ``TopicPartition.toString()``, i.e. ``"{topic}-{partition}"``.

    :raises LocalProtocolError: if ``partition_count`` is not positive.
    """
    if partition_count <= 0:
        raise LocalProtocolError(f"partition count must be positive, got {partition_count}")
    return to_positive(murmur2(topic_partition.encode("utf-8"))) % partition_count
