"""The remote storage manager interface (KIP-405 ``RemoteStorageManager``), async.

KIP-405 keeps what is stored (the RemoteStorageManager, RSM) apart from what is known about it
(the RemoteLogMetadataManager): the RSM only copies, reads and deletes the objects of one
segment, addressed by :class:`~storage.model.RemoteLogSegmentMetadata`, and may be eventually
consistent because the metadata topic is the source of truth. Every copy attempt of a segment
carries a fresh ``segment_id`` (KIP-405: "universally unique even for the same topic partition
and offsets"), so a retried or concurrent copy never overwrites another attempt's objects.

Kafka returns InputStreams; tierproxy returns ``bytes`` because its readers ask for bounded
ranges (a fetch's worth of batches, or one index file) and hold them in caches anyway.
"""

from __future__ import annotations

from typing import Protocol

from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata

__all__ = [
    "RemoteRangeError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "SegmentProbe",
    "check_range",
    "most_severe",
]


class RemoteStorageError(Exception):
    """Remote storage failed; ``retriable`` says whether trying again later may succeed.

    Retriable: the store was unreachable, timed out, throttled us or failed with a 5xx.
    Not retriable: the object or bucket does not exist, access was denied, the request was wrong.
    Kafka's ``RemoteStorageException``.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class RemoteResourceNotFoundError(RemoteStorageError):
    """The segment (or one of its files) is not in remote storage.

    Kafka's ``RemoteResourceNotFoundException``: a reader whose metadata points at a deleted
    segment, or a delete of a segment that has no objects left. Never retriable by the
    storage manager's own retries (the object will not appear within them); a reader's
    client may ask again later, when an operator has put it back.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message, retriable=False)
        self.key = key
        """The missing object as an operator finds it (``s3://BUCKET/KEY`` or the file's
        path), when one object was asked for."""


class RemoteRangeError(RemoteStorageError):
    """A ranged read started beyond the end of the segment's ``.log`` object.

    The caller's position came from an index or metadata that does not match the object, so
    retrying cannot help.
    """

    def __init__(self, *, key: str, start: int, size: int) -> None:
        super().__init__(
            f"read of {key} starts at byte {start}, beyond its size {size}", retriable=False
        )
        self.key = key
        self.start = start
        self.size = size


class RemoteStorageManager(Protocol):
    """Copy, read and delete the objects of remote log segments.

    All methods are coroutines and safe to call concurrently. Ranges are byte positions in the
    segment's ``.log`` object: ``start`` inclusive, ``end`` exclusive (Kafka's
    ``fetchLogSegment`` takes an inclusive end; half-open ranges compose with Python slices).
    """

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        """Store the ``.log`` and all five auxiliary files of one segment copy attempt.

        Objects written before a failure may remain; :meth:`delete_log_segment` removes them
        (KIP-405 deletes segments stuck in COPY_SEGMENT_STARTED).

        :raises RemoteStorageError: when storing any file failed.
        """
        ...

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes | bytearray:
        """Bytes ``[start, end)`` of the segment's ``.log``; ``end`` is capped at its size.

        A ``bytearray`` when the manager read the bytes in place (S3's ranged GET,
        :mod:`storage.rsm.s3_ranged_get`): it is the caller's, and nobody changes it.

        ``end=None`` reads to the end; ``start`` equal to the size gives ``b""``, and so does
        an empty range (``end == start``), without touching storage.

        :raises ValueError: for a negative ``start`` or ``end < start`` (caller's bug).
        :raises RemoteRangeError: when ``start`` lies beyond the object's size.
        :raises RemoteResourceNotFoundError: when the segment's ``.log`` does not exist.
        :raises RemoteStorageError: for other storage failures.
        """
        ...

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole auxiliary file ``index_type`` of the segment.

        :raises RemoteResourceNotFoundError: when that file does not exist.
        :raises RemoteStorageError: for other storage failures.
        """
        ...

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment copy attempt, including partial leftovers.

        :raises RemoteResourceNotFoundError: when the segment has no objects at all.
        :raises RemoteStorageError: for other storage failures.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads; later calls raise :class:`RemoteStorageError`."""
        ...


class SegmentProbe(Protocol):
    """Whether a segment's objects are there, without reading them (a HEAD or a stat).

    Not part of Kafka's ``RemoteStorageManager``: tierproxy's storage managers offer it for
    the start-up check and the missing-object watch of the proxy.
    """

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """The size in bytes of the segment's ``.log`` object.

        :raises RemoteResourceNotFoundError: when it does not exist (``key`` names it).
        :raises RemoteStorageError: for other storage failures.
        """
        ...


def check_range(start: int, end: int | None) -> None:
    """Reject ranges no object could satisfy, before any I/O.

    :raises ValueError: for a negative ``start`` or ``end < start``.
    """
    if start < 0:
        raise ValueError(f"range start must not be negative, not {start}")
    if end is not None and end < start:
        raise ValueError(f"range end {end} is before its start {start}")


def most_severe(errors: ExceptionGroup[Exception]) -> Exception:
    """The error of a group of concurrent requests to report (a ``TaskGroup``'s): a
    permanent :class:`RemoteStorageError` if any, else a retriable one, else the first."""
    leaves = _leaves(errors)
    storage_errors = [err for err in leaves if isinstance(err, RemoteStorageError)]
    for err in storage_errors:
        if not err.retriable:
            return err
    return storage_errors[0] if storage_errors else leaves[0]


def _leaves(group: BaseExceptionGroup[Exception]) -> list[Exception]:
    leaves: list[Exception] = []
    for err in group.exceptions:
        if isinstance(err, BaseExceptionGroup):
            leaves.extend(_leaves(err))
        else:
            leaves.append(err)
    return leaves
