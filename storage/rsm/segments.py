"""Kafka's ``RemoteStorageManager`` over any object store, with manifests and encoded chunks.

:class:`SegmentStorage` is what the proxy, the pipeline and the Spark data source use, over
S3, Google Cloud Storage, Azure Blob Storage or a local directory
(:mod:`storage.rsm.objects`). It owns everything that is the same for every backend:

Copy
    The six files are encoded (:mod:`storage.rsm.chunk_codec`: cut into chunks, compressed,
    encrypted under a fresh data key, checksummed) in a pool thread, uploaded at once, and
    the manifest (:mod:`storage.rsm.manifest`) last: a segment whose manifest is there has
    all its objects. Uploads wait for the upload rate limit first, when there is one
    (:mod:`storage.rsm.rate_limit`), with the bytes actually stored.

Read
    The manifest is read once per segment and kept (a bounded LRU, with the unwrapped data
    key); a segment without one is of the earlier format and is read as it is stored. A
    ranged read of original bytes reads the stored bytes of the chunks that cover it in one
    ranged GET (so a chunk cache whose chunks are the stored chunks, both 4 MiB by default,
    makes one GET per chunk and reads nothing twice), checks every chunk's CRC-32C, then
    decrypts and decompresses into a buffer of the original bytes, all in a pool thread.
    Decoded buffers that the chunk cache evicts are filled again by later reads of the same
    length (:class:`~storage.rsm.s3_ranged_get.SpareBodies`), stored bytes go back to the
    store's own spares. A segment stored as is keeps the store's zero-copy answers (a local
    directory's mapped pages, S3's buffers read in place): checked, not copied.

Errors
    A chunk or manifest that does not match its checksum raises
    :class:`~storage.rsm.chunk_codec.ChunkIntegrityError` (retriable: a client asks again),
    is counted (:attr:`SegmentStorage.integrity_failures`) and logged with its object key
    (at most once a minute per object); nothing of it is returned, so nothing is cached. A
    data key whose key-encryption key is not loaded raises
    :class:`~storage.rsm.keyring.EncryptionKeyError` naming the key id, logged the same way.
    Never are encoded bytes served as records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from storage.log_event import event
from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    check_range,
    most_severe,
)
from storage.rsm.chunk_codec import (
    ChunkIntegrityError,
    EncodeSettings,
    check_chunks,
    decode_chunks,
    encode_segment,
)
from storage.rsm.keyring import EncryptionKeyError, KeyRing
from storage.rsm.layout import ENCODED_SUFFIX, RemoteLayout
from storage.rsm.manifest import (
    ManifestError,
    SegmentManifest,
    StoredFile,
    decode_manifest,
    encode_manifest,
)
from storage.rsm.objects import MapsObjects, ObjectStore, RecyclesBodies
from storage.rsm.s3_ranged_get import SpareBodies
from storage.single_flight import SingleFlight

__all__ = ["MappedSegmentStorage", "SegmentStorage", "StorageCounters", "UploadLimit"]

_log = logging.getLogger(__name__)

_MANIFESTS_KEPT: Final = 8192
"""Manifests (with their data keys) kept in memory: a few KiB each; enough for every
segment that a proxy's readers move through at once, many times over."""
_LOG_EVERY_SECONDS: Final = 60.0
"""One log line per failing object per minute: clients retry a failed read many times."""


class UploadLimit(Protocol):
    """The upload rate limit (:class:`storage.rsm.rate_limit.RateLimiter`)."""

    async def acquire(self, size: int) -> None:
        """Return once ``size`` more bytes may be sent."""
        ...


@dataclass(slots=True)
class StorageCounters:
    """What the segment layer counts; the proxy and the pipeline export it."""

    integrity_failures: int = 0
    """Chunks or manifests that did not match their checksums (or tags, or codecs)."""
    key_failures: int = 0
    """Reads refused because a data key could not be unwrapped."""
    original_bytes_written: int = 0
    stored_bytes_written: int = 0
    """Bytes of segment files uploaded: as the broker had them, and as stored."""
    manifest_gets: int = 0
    """GETs of manifests (one per segment read, while it stays known)."""
    original_bytes_read: int = 0
    stored_bytes_read: int = 0
    """Bytes of ``.log`` chunks read from manifest segments: decoded, and as stored."""


@dataclass(frozen=True, slots=True)
class _Plain:
    """A segment of the earlier format: no manifest."""


_PLAIN: Final = _Plain()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Known:
    manifest: SegmentManifest
    data_key: bytes | None


class SegmentStorage:
    """A :class:`~storage.rsm.base.RemoteStorageManager` over an object store (see the
    module docstring).

    :param encrypt: encrypt new segments under ``keys``' active key.
    :param keys: the key ring; needed to read encrypted segments even when new ones are
        not encrypted.
    :raises ValueError: when ``encrypt`` is set without a key ring with an active key.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        prefix: str = "",
        encode: EncodeSettings,
        encrypt: bool = False,
        keys: KeyRing | None = None,
        upload_limit: UploadLimit | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if encrypt and (keys is None or keys.active is None):
            raise ValueError("encryption needs a key ring with an active key")
        self.store = store
        self._layout = RemoteLayout(prefix=prefix)
        self._encode = encode
        self._encrypt = encrypt
        self._keys = keys
        self._upload_limit = upload_limit
        self._clock = clock
        self._known: OrderedDict[int, _Known | _Plain] = OrderedDict()
        self._spares = SpareBodies()
        self._decoded: set[int] = set()
        """Ids of the decoded buffers handed out and not recycled yet: they go back to
        :attr:`_spares`, the store's answers to the store."""
        self._recycle_stored = store.recycle if isinstance(store, RecyclesBodies) else None
        self._loading: SingleFlight[int, _Known | _Plain] = SingleFlight("manifest")
        self._logged: dict[str, float] = {}
        self.counters = StorageCounters()

    @property
    def location(self) -> str:
        return self.store.location

    @property
    def hint(self) -> str:
        """What to check when the store cannot be used (:attr:`ObjectStore.hint`)."""
        return self.store.hint

    async def check(self) -> None:
        """The store's own check (:meth:`~storage.rsm.objects.ObjectStore.check`)."""
        await self.store.check()

    # -- copy -------------------------------------------------------------------------------

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        segment_id = metadata.segment_id.id.bytes
        data_key = None
        if self._encrypt:
            assert self._keys is not None
            data_key = self._keys.new_data_key(segment_id)
        encoded = await asyncio.to_thread(encode_segment, segment_id, data, self._encode, data_key)
        manifest = encoded.manifest
        files = [(self._key(metadata, None, manifest.log), encoded.log)]
        files += [
            (self._key(metadata, t, manifest.indexes[t]), encoded.indexes[t]) for t in IndexType
        ]
        stored = sum(len(body) for _key, body in files)
        if self._upload_limit is not None:
            await self._upload_limit.acquire(stored)
        try:
            async with asyncio.TaskGroup() as group:
                for key, body in files:
                    group.create_task(self.store.put_object(key, _uploadable(body)))
        except ExceptionGroup as errors:
            raise most_severe(errors) from errors
        await self.store.put_object(self._layout.manifest_key(metadata), encode_manifest(manifest))
        self.counters.original_bytes_written += manifest.original_bytes()
        self.counters.stored_bytes_written += stored

    # -- read -------------------------------------------------------------------------------

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes | bytearray:
        check_range(start, end)
        if end == start:
            return b""
        known = await self._segment(metadata)
        if isinstance(known, _Plain):
            stop = metadata.segment_size_in_bytes if end is None else end
            return await self.store.get_object_range(self._layout.log_key(metadata), start, stop)
        data = await self._read(metadata, known, start, end, mapped=False)
        assert not isinstance(data, memoryview)
        return data

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        known = await self._segment(metadata)
        if isinstance(known, _Plain):
            return await self.store.get_object(self._layout.index_key(metadata, index_type))
        file = known.manifest.indexes[index_type]
        key = self._key(metadata, index_type, file)
        if not file.chunks:
            return b""
        stored = await self.store.get_object(key)
        self._check_length(key, stored, file.stored_size)
        if not file.encoded:
            await self._checked(key, lambda: check_chunks(file, 0, stored, key=key))
            return stored
        out = bytearray(file.original_size)

        def decode() -> None:
            check_chunks(file, 0, stored, key=key)
            decode_chunks(
                known.manifest,
                index_type,
                range(1),
                stored,
                memoryview(out),
                segment_id=metadata.segment_id.id.bytes,
                data_key=known.data_key,
                key=key,
            )

        await self._checked(key, decode)
        return bytes(out)

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._known.pop(metadata.segment_id.id.int, None)
        prefix = self._layout.segment_prefix(metadata)
        if not await self.store.delete_prefix(prefix):
            raise RemoteResourceNotFoundError(f"segment {prefix}* not found in {self.location}")

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """The size of the object that holds the segment's ``.log`` (encoded or not), from a
        HEAD or a stat, after its manifest (:class:`~storage.rsm.base.SegmentProbe`).

        :raises RemoteResourceNotFoundError: when it does not exist (``key`` names it).
        :raises RemoteStorageError: for other storage failures.
        """
        known = await self._segment(metadata)
        if isinstance(known, _Plain):
            return await self.store.object_size(self._layout.log_key(metadata))
        return await self.store.object_size(self._key(metadata, None, known.manifest.log))

    async def stored_size(self, metadata: RemoteLogSegmentMetadata) -> int | None:
        """Bytes the segment's files take in storage (its manifest left out), from its
        manifest; ``None`` for a segment of the earlier format (stored as the broker had it).

        :raises RemoteStorageError: when the manifest cannot be read.
        """
        known = await self._segment(metadata)
        return None if isinstance(known, _Plain) else known.manifest.stored_bytes()

    def recycle(self, data: bytes | bytearray) -> None:
        """``data``, an answer of :meth:`fetch_log_segment`, is no longer kept by the caller
        (the chunk cache evicted it): a later read of its length may be decoded into it, or
        the store's next ranged read may fill it."""
        if not isinstance(data, bytearray):
            return
        if id(data) in self._decoded:
            self._decoded.discard(id(data))
            self._spares.give(data)
        elif self._recycle_stored is not None:
            self._recycle_stored(data)

    async def close(self) -> None:
        await self._loading.close()
        self._known.clear()
        await self.store.close()

    # -- internals --------------------------------------------------------------------------

    def _key(
        self, metadata: RemoteLogSegmentMetadata, index_type: IndexType | None, file: StoredFile
    ) -> str:
        key = (
            self._layout.log_key(metadata)
            if index_type is None
            else self._layout.index_key(metadata, index_type)
        )
        return key + ENCODED_SUFFIX if file.encoded else key

    async def _segment(self, metadata: RemoteLogSegmentMetadata) -> _Known | _Plain:
        """The segment's manifest and data key (kept), or :data:`_PLAIN`."""
        ident = metadata.segment_id.id.int
        known = self._known.get(ident)
        if known is not None:
            self._known.move_to_end(ident)
            return known
        return await self._loading.get(ident, lambda: self._load_segment(metadata))

    async def _load_segment(self, metadata: RemoteLogSegmentMetadata) -> _Known | _Plain:
        """Read the segment's manifest (one GET however many reads wait for it)."""
        ident = metadata.segment_id.id.int
        known: _Known | _Plain
        key = self._layout.manifest_key(metadata)
        self.counters.manifest_gets += 1
        try:
            raw = await self.store.get_object(key)
        except RemoteResourceNotFoundError:
            known = _PLAIN
        else:
            try:
                manifest = decode_manifest(raw)
            except ManifestError as err:
                self.counters.integrity_failures += 1
                self._warn(key, "remote.storage.integrity", f"manifest unreadable: {err}")
                raise ChunkIntegrityError(f"manifest {key}: {err}", key=key) from err
            data_key = None
            if manifest.encryption is not None:
                data_key = self._data_key(manifest, metadata, key)
            known = _Known(manifest=manifest, data_key=data_key)
        self._known[ident] = known
        if len(self._known) > _MANIFESTS_KEPT:
            self._known.popitem(last=False)
        return known

    def _data_key(
        self, manifest: SegmentManifest, metadata: RemoteLogSegmentMetadata, key: str
    ) -> bytes:
        assert manifest.encryption is not None
        key_id = manifest.encryption.key_id
        try:
            if self._keys is None:
                raise EncryptionKeyError(
                    f"segment {key} is encrypted with key {key_id!r} and no encryption keys "
                    "are loaded: set remote.log.storage.encryption.keys.file or .keys.env",
                    key_id=key_id,
                )
            return self._keys.data_key(manifest.encryption, metadata.segment_id.id.bytes)
        except EncryptionKeyError as err:
            self.counters.key_failures += 1
            self._warn(f"key {key_id}", "remote.storage.key_missing", str(err))
            raise

    async def _read(
        self,
        metadata: RemoteLogSegmentMetadata,
        known: _Known,
        start: int,
        end: int | None,
        *,
        mapped: bool,
    ) -> bytes | bytearray | memoryview:
        manifest = known.manifest
        file = manifest.log
        size = file.original_size
        stop = size if end is None else min(end, size)
        chunks = manifest.log_chunks(start, stop)
        if not chunks:
            if start > size:
                raise RemoteRangeError(key=self._layout.log_key(metadata), start=start, size=size)
            return b""
        key = self._key(metadata, None, file)
        first, last = file.starts[chunks.start], file.starts[chunks.stop]
        stored: bytes | bytearray | memoryview
        if mapped and isinstance(self.store, MapsObjects) and not file.encoded:
            stored = await self.store.map_object_range(key, first, last)
        else:
            stored = await self.store.get_object_range(key, first, last)
        self._check_length(key, stored, last - first)
        origin = manifest.original_start(chunks.start)
        self.counters.stored_bytes_read += last - first
        if not file.encoded:
            await self._checked(key, lambda: check_chunks(file, chunks.start, stored, key=key))
            self.counters.original_bytes_read += len(stored)
            return _trim(stored, start - origin, stop - origin)
        length = sum(manifest.original_length(i) for i in chunks)
        out = self._spares.take(length)

        def decode() -> None:
            check_chunks(file, chunks.start, stored, key=key)
            decode_chunks(
                manifest,
                None,
                chunks,
                stored,
                memoryview(out),
                segment_id=metadata.segment_id.id.bytes,
                data_key=known.data_key,
                key=key,
            )

        try:
            await self._checked(key, decode)
        finally:
            if self._recycle_stored is not None and isinstance(stored, bytearray):
                self._recycle_stored(stored)
        self.counters.original_bytes_read += length
        result = _trim(out, start - origin, stop - origin)
        if result is out and not mapped:
            if len(self._decoded) > _MANIFESTS_KEPT:
                self._decoded.clear()  # handed out and dropped without recycling
            self._decoded.add(id(out))
        return result

    def _check_length(self, key: str, stored: bytes | bytearray | memoryview, size: int) -> None:
        if len(stored) != size:
            self.counters.integrity_failures += 1
            message = f"{len(stored)} bytes where the manifest has {size}"
            self._warn(key, "remote.storage.integrity", message)
            raise ChunkIntegrityError(f"{key}: {message}", key=key)

    async def _checked(self, key: str, work: Callable[[], None]) -> None:
        """Run the checks (and decoding) ``work`` in a pool thread; count and log a failure."""
        try:
            await asyncio.to_thread(work)
        except ChunkIntegrityError as err:
            self.counters.integrity_failures += 1
            self._warn(key, "remote.storage.integrity", str(err))
            raise

    def _warn(self, what: str, name: str, message: str) -> None:
        now = self._clock()
        if now - self._logged.get(what, float("-inf")) < _LOG_EVERY_SECONDS:
            return
        if len(self._logged) > _MANIFESTS_KEPT:
            self._logged.clear()
        self._logged[what] = now
        event(_log, logging.WARNING, name, msg=f"{message} ({what})", object=what)


class MappedSegmentStorage(SegmentStorage):
    """:class:`SegmentStorage` over a store whose objects can be mapped (a local directory):
    the chunk cache reads through :meth:`map_log_segment`, so segments stored as is keep
    going from the page cache to the client's socket uncopied."""

    def __init__(self, store: ObjectStore, **settings: Any) -> None:
        """As :class:`SegmentStorage`.

        :raises TypeError: when ``store`` cannot map its objects.
        """
        if not isinstance(store, MapsObjects):
            raise TypeError(f"{type(store).__name__} cannot map its objects")
        super().__init__(store, **settings)
        self._maps: MapsObjects = store

    async def map_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int
    ) -> memoryview:
        """Bytes ``[start, end)`` of the segment's ``.log``: a view of the file's pages when
        it is stored as is (checked against its checksums), else of a decoded buffer.

        :raises ValueError: for a negative ``start`` or ``end < start`` (caller's bug).
        :raises RemoteRangeError: when ``start`` lies beyond the segment's size.
        :raises RemoteStorageError: as :meth:`fetch_log_segment`.
        """
        check_range(start, end)
        if end == start:
            return memoryview(b"")
        known = await self._segment(metadata)
        if isinstance(known, _Plain):
            return await self._maps.map_object_range(self._layout.log_key(metadata), start, end)
        return memoryview(await self._read(metadata, known, start, end, mapped=True))

    def unmap(self, view: memoryview) -> None:
        """``view``, an answer of :meth:`map_log_segment`, is no longer kept by the caller."""
        owner = view.obj
        if isinstance(owner, bytearray):
            self._spares.give(owner)
        else:
            self._maps.unmap(view)


def _trim(
    data: bytes | bytearray | memoryview, start: int, end: int
) -> bytes | bytearray | memoryview:
    """``data[start:end]`` (a copy unless ``data`` is a view), ``data`` itself when that is
    all of it."""
    if start == 0 and end == len(data):
        return data
    return data[start:end]


def _uploadable(body: bytes | bytearray | memoryview) -> bytes | memoryview:
    return memoryview(body) if isinstance(body, bytearray) else body
