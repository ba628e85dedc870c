"""Encoding a segment's files into stored chunks, and checking and decoding them back.

Pure functions over buffers (no I/O): :mod:`storage.rsm.segments` runs them in a pool
thread (crc32c, zstd and OpenSSL release the GIL), so the event loop never waits for them.

Upload (:func:`encode_segment`): the ``.log`` is cut into chunks of ``chunk_bytes`` original
bytes, each index file is one chunk. Each chunk is, in this order:

1. compressed with zstd when compression is on, unless the heuristic says the batches are
   compressed already (the producer's codec, in the first batches' attributes: Kafka
   recompresses nothing and neither does this), or the chunk does not shrink by at least
   :data:`_MIN_SAVING` (then it is stored as is, and, if it was the ``.log``'s first chunk,
   the rest of the ``.log`` is not tried either: its data does not compress);
2. encrypted with AES-256-GCM under the segment's data key when encryption is on: the nonce
   is the file's number and the chunk's index (unique under a key used for one segment
   only), the segment id is the additional authenticated data, and the 16-byte tag follows
   the ciphertext;
3. checksummed: the CRC-32C of the stored bytes goes into the manifest.

Without compression and encryption the stored bytes are the original ones (no copy is
made), and only the checksums are added.

Read (:func:`check_chunks`, :func:`decode_chunks`): every chunk read is checked against its
CRC-32C before anything else, then decrypted (the tag checked) and decompressed. Any
mismatch raises :class:`ChunkIntegrityError` naming the object and the chunk.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import cramjam
import crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from protocol.records import Compression, CorruptRecordBatchError, iter_batches
from storage.model import IndexType, LogSegmentData
from storage.rsm.base import RemoteStorageError
from storage.rsm.keyring import DataKey
from storage.rsm.manifest import Chunk, SegmentManifest, StoredFile

__all__ = [
    "ChunkIntegrityError",
    "EncodeSettings",
    "EncodedSegment",
    "check_chunks",
    "decode_chunks",
    "encode_segment",
    "file_number",
]

TAG_BYTES: Final = 16
"""AES-GCM's authentication tag, after each encrypted chunk."""
_NONCE: Final = struct.Struct(">IQ")
"""12 bytes: the file's number and the chunk's index."""
_MIN_SAVING: Final = 1 / 16
"""A compressed chunk is kept only if it is at least this much smaller: below that, the
read's decompression costs more than the bytes it saves."""
_HEURISTIC_BATCHES: Final = 16
"""First batches whose attributes say whether the producer compressed the segment."""
_FILES: Final = (None, *IndexType)


def file_number(index_type: IndexType | None) -> int:
    """The number of the ``.log`` (0) or an index file in chunk nonces."""
    return _FILES.index(index_type)


class ChunkIntegrityError(RemoteStorageError):
    """A stored chunk (or manifest) does not match its checksum, its tag or its codec: it
    was damaged at rest or on the way. Retriable (a read on the way may go right the next
    time); never cached."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message, retriable=True)
        self.key = key


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodeSettings:
    """How new segments are stored."""

    chunk_bytes: int
    compression_level: int | None
    """zstd level; ``None``: no compression."""
    skip_compressed_batches: bool = True
    """The heuristic: leave segments whose producer compressed them uncompressed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedSegment:
    """A segment's files as they are stored, and its manifest."""

    manifest: SegmentManifest
    log: bytes | bytearray | memoryview
    indexes: Mapping[IndexType, bytes | bytearray | memoryview]


def encode_segment(
    segment_id: bytes,
    data: LogSegmentData,
    settings: EncodeSettings,
    data_key: DataKey | None,
) -> EncodedSegment:
    """The stored form of a segment's six files (see the module docstring)."""
    level = settings.compression_level
    if level is not None and settings.skip_compressed_batches and _producer_compressed(data.log):
        level = None
    key = None if data_key is None else data_key.key
    log_file, log_bytes = _encode_file(
        memoryview(data.log),
        settings.chunk_bytes,
        level=level,
        key=key,
        segment_id=segment_id,
        number=file_number(None),
    )
    indexes: dict[IndexType, StoredFile] = {}
    index_bytes: dict[IndexType, bytes | bytearray | memoryview] = {}
    for index_type in IndexType:
        content = memoryview(data.file_for(index_type))
        stored, stored_bytes = _encode_file(
            content,
            None,
            level=level,
            key=key,
            segment_id=segment_id,
            number=file_number(index_type),
        )
        indexes[index_type] = stored
        index_bytes[index_type] = stored_bytes
    compressed = any(c.compressed for f in (log_file, *indexes.values()) for c in f.chunks)
    manifest = SegmentManifest(
        chunk_bytes=settings.chunk_bytes,
        log=log_file,
        indexes=indexes,
        compression="zstd" if compressed else None,
        encryption=None if data_key is None else data_key.info,
    )
    return EncodedSegment(manifest=manifest, log=log_bytes, indexes=index_bytes)


def _producer_compressed(log: bytes | memoryview) -> bool:
    """Whether most of the first batches carry a producer's codec."""
    compressed = seen = 0
    try:
        for _position, header in iter_batches(log):
            seen += 1
            compressed += header.compression != Compression.NONE
            if seen == _HEURISTIC_BATCHES:
                break
    except CorruptRecordBatchError:
        return False
    return seen > 0 and 2 * compressed > seen


def _encode_file(
    whole: memoryview,
    chunk_bytes: int | None,
    *,
    level: int | None,
    key: bytes | None,
    segment_id: bytes,
    number: int,
) -> tuple[StoredFile, bytes | bytearray | memoryview]:
    """One file's stored form: chunks of ``chunk_bytes`` (``None``: one chunk)."""
    step = chunk_bytes or max(len(whole), 1)
    pieces = [whole[at : at + step] for at in range(0, len(whole), step)]
    if level is None and key is None:
        chunks = tuple(
            Chunk(stored_size=len(p), crc32c=crc32c.crc32c(p), compressed=False) for p in pieces
        )
        return StoredFile(original_size=len(whole), encoded=False, chunks=chunks), whole
    parts: list[bytes | memoryview] = []
    for index, piece in enumerate(pieces):
        packed: bytes | memoryview = piece
        if level is not None:
            candidate = bytes(cramjam.zstd.compress(piece, level=level))
            if len(candidate) <= len(piece) * (1 - _MIN_SAVING):
                packed = candidate
            elif index == 0:
                level = None  # the first chunk does not compress: nor will the rest
        parts.append(packed)
    tag = 0 if key is None else TAG_BYTES
    out = bytearray(sum(len(p) for p in parts) + tag * len(parts))
    view = memoryview(out)
    chunks_made: list[Chunk] = []
    at = 0
    for index, (part, piece) in enumerate(zip(parts, pieces, strict=True)):
        size = len(part) + tag
        target = view[at : at + size]
        if key is None:
            target[:] = part
        else:
            _encrypt_into(key, _nonce(number, index), segment_id, part, target)
        checksum = crc32c.crc32c(target)
        chunks_made.append(Chunk(stored_size=size, crc32c=checksum, compressed=part is not piece))
        at += size
    stored = StoredFile(original_size=len(whole), encoded=True, chunks=tuple(chunks_made))
    return stored, out


def _nonce(number: int, index: int) -> bytes:
    return _NONCE.pack(number, index)


def _encrypt_into(
    key: bytes, nonce: bytes, segment_id: bytes, plain: bytes | memoryview, target: memoryview
) -> None:
    """``plain`` encrypted into ``target[:-16]`` and its tag into ``target[-16:]``."""
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    encryptor.authenticate_additional_data(segment_id)
    written = encryptor.update_into(plain, target[: len(plain)])
    encryptor.finalize()
    assert written == len(plain)
    target[len(plain) :] = encryptor.tag


# -- read ----------------------------------------------------------------------------------


def check_chunks(
    file: StoredFile, first: int, stored: bytes | bytearray | memoryview, *, key: str
) -> None:
    """Check the CRC-32C of each chunk from ``first`` that ``stored`` holds (``stored`` starts
    at chunk ``first``'s first byte and holds whole chunks).

    :raises ChunkIntegrityError: at the first chunk whose bytes do not match.
    """
    view = memoryview(stored)
    base = file.starts[first]
    index = first
    while index < len(file.chunks) and file.starts[index + 1] - base <= len(view):
        chunk = file.chunks[index]
        part = view[file.starts[index] - base : file.starts[index + 1] - base]
        if crc32c.crc32c(part) != chunk.crc32c:
            raise ChunkIntegrityError(
                f"chunk {index} of {key} (stored bytes {file.starts[index]}-"
                f"{file.starts[index + 1] - 1}) does not match its CRC-32C",
                key=key,
            )
        index += 1


def decode_chunks(
    manifest: SegmentManifest,
    index_type: IndexType | None,
    chunks: range,
    stored: bytes | bytearray | memoryview,
    out: memoryview,
    *,
    segment_id: bytes,
    data_key: bytes | None,
    key: str,
) -> None:
    """Decode the (checked) stored bytes of ``chunks`` of a file into ``out``, which holds
    exactly their original bytes.

    :raises ChunkIntegrityError: when a chunk's tag or compressed form is not right.
    """
    file = manifest.file(index_type)
    view = memoryview(stored)
    base = file.starts[chunks.start]
    tag = 0 if data_key is None else TAG_BYTES
    number = file_number(index_type)
    at = 0
    for index in chunks:
        chunk = file.chunks[index]
        part = view[file.starts[index] - base : file.starts[index + 1] - base]
        length = manifest.original_length(index) if index_type is None else file.original_size
        target = out[at : at + length]
        try:
            if data_key is not None:
                nonce = _nonce(number, index)
                if chunk.compressed:
                    buffer = bytearray(len(part) - tag)
                    _decrypt_into(data_key, nonce, segment_id, part, buffer)
                    _decompress_into(buffer, target)
                else:
                    _decrypt_into(data_key, nonce, segment_id, part, target)
            elif chunk.compressed:
                _decompress_into(part, target)
            else:
                target[:] = part
        except (InvalidTag, cramjam.DecompressionError, ValueError) as err:
            raise ChunkIntegrityError(
                f"chunk {index} of {key} does not decode ({type(err).__name__}: "
                f"{err or 'authentication tag mismatch'})",
                key=key,
            ) from err
        at += length


def _decrypt_into(
    key: bytes, nonce: bytes, segment_id: bytes, stored: memoryview, target: bytearray | memoryview
) -> None:
    decryptor = Cipher(
        algorithms.AES(key), modes.GCM(nonce, bytes(stored[-TAG_BYTES:]))
    ).decryptor()
    decryptor.authenticate_additional_data(segment_id)
    body = stored[:-TAG_BYTES]
    if len(body) != len(target):
        raise ValueError(f"{len(body)} encrypted bytes for {len(target)} original ones")
    decryptor.update_into(body, target)
    decryptor.finalize()


def _decompress_into(source: bytes | bytearray | memoryview, target: memoryview) -> None:
    written = cramjam.zstd.decompress_into(source, target)
    if written != len(target):
        raise ValueError(f"{written} bytes decompressed where {len(target)} were stored")
