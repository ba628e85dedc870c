"""A segment's manifest: how each of its files is stored, chunk by chunk.

Segments written by this version of tierproxy have one more object besides Kafka's six,
``{baseOffset:020d}-{segmentId}.manifest`` (:mod:`storage.rsm.layout`). It says, for the
``.log`` and each index file:

- its original size, and whether it is stored *encoded* (compressed or encrypted, under the
  key with the suffix ``.tpx``) or as is;
- its chunks: the ``.log`` is cut into chunks of ``chunk_bytes`` original bytes (the last one
  shorter), an index file is one chunk. Each chunk is stored on its own, one after the other
  in the file's object, so that a ranged read of original bytes maps to a ranged read of
  stored bytes (the chunks that cover it). Per chunk: its stored size, its CRC-32C (of the
  stored bytes, checked on every read) and whether it is zstd-compressed;
- the segment's data key, wrapped by a key-encryption key named by its id, when the files
  are encrypted (:mod:`storage.rsm.keyring`).

A segment without a manifest is in the format of earlier versions: its six objects hold the
original bytes, and are read without checks.

Format: the 8 bytes ``TPXMAN1\\n``, the CRC-32C of the rest (4 bytes, big-endian), then UTF-8
JSON (documented in ``docs/storage.md``). The checksum makes a damaged manifest an integrity
error like a damaged chunk, never a misread one.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import crc32c

from storage.model import IndexType

__all__ = [
    "COMPRESSION_CODECS",
    "Chunk",
    "EncryptionInfo",
    "ManifestError",
    "SegmentManifest",
    "StoredFile",
    "decode_manifest",
    "encode_manifest",
]

_MAGIC: Final = b"TPXMAN1\n"
_CHECKSUM: Final = struct.Struct(">I")
_VERSION: Final = 1
COMPRESSION_CODECS: Final = ("zstd",)
"""Codecs a chunk may be compressed with (the manifest names the one its chunks use)."""
_MAX_MANIFEST_BYTES: Final = 64 * 1024 * 1024
"""Far above any real manifest (a 1 GiB segment in 4 MiB chunks needs about 8 KiB); a
larger object is not a manifest."""


class ManifestError(ValueError):
    """The bytes are not a manifest this version can read (damaged, or a newer format)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One stored chunk of a file."""

    stored_size: int
    crc32c: int
    """CRC-32C of the stored bytes."""
    compressed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredFile:
    """How one of the segment's files is stored."""

    original_size: int
    encoded: bool
    """Stored compressed or encrypted, under the key with the ``.tpx`` suffix."""
    chunks: tuple[Chunk, ...]
    starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Where each chunk starts in the stored object, and the object's size last."""

    def __post_init__(self) -> None:
        starts = tuple(itertools.accumulate((c.stored_size for c in self.chunks), initial=0))
        object.__setattr__(self, "starts", starts)

    @property
    def stored_size(self) -> int:
        return self.starts[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class EncryptionInfo:
    """The segment's data key, wrapped by the key-encryption key ``key_id``."""

    key_id: str
    wrapped_key: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentManifest:
    """What :mod:`storage.rsm.segments` needs to read a segment's files back."""

    chunk_bytes: int
    """Original bytes per chunk of the ``.log`` (the last one may be shorter)."""
    log: StoredFile
    indexes: Mapping[IndexType, StoredFile]
    compression: str | None = None
    """The codec of the chunks marked compressed; ``None`` when none is."""
    encryption: EncryptionInfo | None = None

    def file(self, index_type: IndexType | None) -> StoredFile:
        """The ``.log`` (``None``) or an index file."""
        return self.log if index_type is None else self.indexes[index_type]

    def log_chunks(self, start: int, end: int) -> range:
        """Indexes of the ``.log`` chunks that hold original bytes ``[start, end)`` (``end``
        capped at the size; empty when nothing is there)."""
        end = min(end, self.log.original_size)
        if start >= end:
            return range(0)
        return range(start // self.chunk_bytes, (end - 1) // self.chunk_bytes + 1)

    def original_start(self, index: int) -> int:
        """Where ``.log`` chunk ``index`` starts in the original bytes."""
        return index * self.chunk_bytes

    def original_length(self, index: int) -> int:
        """Original bytes of ``.log`` chunk ``index``."""
        start = index * self.chunk_bytes
        return min(self.chunk_bytes, self.log.original_size - start)

    def stored_bytes(self) -> int:
        """Bytes stored for the ``.log`` and the indexes, the manifest left out."""
        return self.log.stored_size + sum(f.stored_size for f in self.indexes.values())

    def original_bytes(self) -> int:
        """Bytes of the ``.log`` and the indexes as the broker had them."""
        return self.log.original_size + sum(f.original_size for f in self.indexes.values())


def encode_manifest(manifest: SegmentManifest) -> bytes:
    """The manifest object's bytes."""
    body: dict[str, Any] = {
        "version": _VERSION,
        "chunk_bytes": manifest.chunk_bytes,
        "compression": manifest.compression,
        "log": _file_json(manifest.log),
        "indexes": {t.value: _file_json(f) for t, f in manifest.indexes.items()},
    }
    if manifest.encryption is not None:
        body["encryption"] = {
            "key_id": manifest.encryption.key_id,
            "wrapped_key": base64.b64encode(manifest.encryption.wrapped_key).decode("ascii"),
        }
    text = json.dumps(body, separators=(",", ":")).encode()
    return _MAGIC + _CHECKSUM.pack(crc32c.crc32c(text)) + text


def decode_manifest(data: bytes) -> SegmentManifest:
    """Read a manifest object.

    :raises ManifestError: when ``data`` is damaged (its checksum fails), not a manifest, or
        of a version this one cannot read.
    """
    head = len(_MAGIC) + _CHECKSUM.size
    if len(data) < head or not data.startswith(_MAGIC) or len(data) > _MAX_MANIFEST_BYTES:
        raise ManifestError("not a tierproxy segment manifest")
    (expected,) = _CHECKSUM.unpack_from(data, len(_MAGIC))
    text = data[head:]
    if crc32c.crc32c(text) != expected:
        raise ManifestError("the manifest's checksum does not match its bytes")
    try:
        body = json.loads(text)
        if body["version"] != _VERSION:
            raise ManifestError(f"manifest version {body['version']} is newer than this reader")
        compression = body["compression"]
        if compression is not None and compression not in COMPRESSION_CODECS:
            raise ManifestError(f"unknown compression codec {compression!r}")
        encryption = None
        if "encryption" in body:
            encryption = EncryptionInfo(
                key_id=str(body["encryption"]["key_id"]),
                wrapped_key=base64.b64decode(body["encryption"]["wrapped_key"], validate=True),
            )
        return SegmentManifest(
            chunk_bytes=int(body["chunk_bytes"]),
            compression=compression,
            log=_file_from(body["log"]),
            indexes={IndexType(name): _file_from(f) for name, f in body["indexes"].items()},
            encryption=encryption,
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ManifestError):
            raise
        raise ManifestError(f"malformed manifest: {err!r}") from err


def _file_json(file: StoredFile) -> dict[str, Any]:
    return {
        "size": file.original_size,
        "encoded": file.encoded,
        "sizes": [c.stored_size for c in file.chunks],
        "crc32c": [c.crc32c for c in file.chunks],
        "compressed": "".join("1" if c.compressed else "0" for c in file.chunks),
    }


def _file_from(value: Mapping[str, Any]) -> StoredFile:
    sizes: Sequence[int] = value["sizes"]
    checksums: Sequence[int] = value["crc32c"]
    compressed: str = value["compressed"]
    if not len(sizes) == len(checksums) == len(compressed):
        raise ManifestError("a file's chunk lists differ in length")
    chunks = tuple(
        Chunk(stored_size=int(size), crc32c=int(checksum), compressed=flag == "1")
        for size, checksum, flag in zip(sizes, checksums, compressed, strict=True)
    )
    if any(c.stored_size < 0 for c in chunks):
        raise ManifestError("a chunk has a negative size")
    return StoredFile(
        original_size=int(value["size"]), encoded=bool(value["encoded"]), chunks=chunks
    )
