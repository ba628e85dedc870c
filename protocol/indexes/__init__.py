"""Kafka's on-disk index and checkpoint formats, byte for byte.

Each module holds one file type that Kafka writes next to a log segment and that KIP-405
uploads with it: the offset index (``.index``), the time index (``.timeindex``), the
transaction index (``.txnindex``), the leader-epoch checkpoint and the producer snapshot.
Builders produce the exact bytes Kafka would write, so Kafka's own tools can read our remote
segments; readers parse them back and answer lookups with Kafka's floor semantics.

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

__all__ = ["CorruptIndexError"]


class CorruptIndexError(ValueError):
    """An index or checkpoint file is malformed (wrong size, version, CRC or syntax).

    Raised when parsing bytes fetched from remote storage or a disk cache; the caller should
    treat the file as unusable (refetch or rebuild it), as Kafka does with a
    ``CorruptIndexException``.
    """
