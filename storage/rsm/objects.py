"""The object stores under the remote storage managers: keys to bytes, nothing about segments.

Every backend (S3, Google Cloud Storage, Azure Blob Storage, a local directory) offers the
same few operations on keys, and :class:`storage.rsm.segments.SegmentStorage` builds Kafka's
``RemoteStorageManager`` on top of them once: the layout of a segment's objects, its
manifest, and the chunks encoded for compression, encryption and integrity. A backend only
stores, reads and deletes bytes, and sorts its failures into
:class:`~storage.rsm.base.RemoteStorageError` (retriable or not) and
:class:`~storage.rsm.base.RemoteResourceNotFoundError`.

Two optional abilities make reads cheaper, and the segment layer uses them when a store has
them: :class:`MapsObjects` (a local directory hands out read-only views of its files' pages,
no copy) and :class:`RecyclesBodies` (the lean ranged GETs read later answers into the
buffers of earlier ones).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["DescribesCredentials", "MapsObjects", "ObjectStore", "RecyclesBodies"]


class ObjectStore(Protocol):
    """Keys to bytes, in one bucket, container or directory. Coroutines, safe to call
    concurrently; every failure is a :class:`~storage.rsm.base.RemoteStorageError`."""

    @property
    def location(self) -> str:
        """Where the objects live, for logs (never a secret)."""
        ...

    @property
    def hint(self) -> str:
        """What an operator checks when the store cannot be used, in this backend's own
        terms (its settings and what they must be), for logs."""
        ...

    async def check(self) -> None:
        """One cheap request that proves the store answers and the credentials may list it.

        :raises RemoteStorageError: when that is not so.
        """
        ...

    async def put_object(self, key: str, body: bytes | memoryview) -> None:
        """Store ``body`` under ``key``, replacing what was there; whole or not at all.

        :raises RemoteStorageError: when it could not be stored.
        """
        ...

    async def get_object(self, key: str) -> bytes:
        """The whole object.

        :raises RemoteResourceNotFoundError: when there is no object ``key``.
        :raises RemoteStorageError: for other failures.
        """
        ...

    async def get_object_range(self, key: str, start: int, end: int) -> bytes | bytearray:
        """Bytes ``[start, end)`` of the object, ``end`` capped at its size (``b""`` when
        ``start`` is its size). A ``bytearray`` is the caller's; nobody else changes it.

        :raises ValueError: for a negative ``start`` or ``end < start`` (caller's bug).
        :raises RemoteRangeError: when ``start`` lies beyond the object's size.
        :raises RemoteResourceNotFoundError: when there is no object ``key``.
        :raises RemoteStorageError: for other failures.
        """
        ...

    async def object_size(self, key: str) -> int:
        """The object's size in bytes, without reading it (a HEAD or a stat).

        :raises RemoteResourceNotFoundError: when there is no object ``key``.
        :raises RemoteStorageError: for other failures.
        """
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix``; how many there were.

        :raises RemoteStorageError: when one could not be deleted.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads; later calls raise :class:`RemoteStorageError`."""
        ...


@runtime_checkable
class MapsObjects(Protocol):
    """A store that hands out its objects' pages themselves, uncopied (a local directory)."""

    async def map_object_range(self, key: str, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` of the object as a read-only view of its pages, as
        :meth:`ObjectStore.get_object_range` answers them."""
        ...

    def unmap(self, view: memoryview) -> None:
        """``view``, an answer of :meth:`map_object_range`, is no longer kept by the caller."""
        ...


@runtime_checkable
class RecyclesBodies(Protocol):
    """A store whose ranged reads can fill the buffers of earlier answers again."""

    def recycle(self, data: bytes | bytearray) -> None:
        """``data``, an answer of ``get_object_range``, is no longer kept by the caller."""
        ...


@runtime_checkable
class DescribesCredentials(Protocol):
    """A store whose credentials come from a chain, which it can name for the start-up log."""

    async def describe_credentials(self) -> str:
        """Which source the credentials come from (never their values).

        :raises RemoteStorageError: when there are none; the message names the chain.
        """
        ...
