"""Building a planned segment and uploading it, on the executors (:mod:`.tier_stage`).

:func:`copy_segment` rebuilds a segment from the spill pieces that hold it (written by the
same task, :mod:`.tier_stage`), checks it against its plan, and uploads it under the segment
id already published as COPY_SEGMENT_STARTED. A failure is returned, never raised, so that
one bad segment does not cost the results of the others; the driver publishes
COPY_SEGMENT_FINISHED only for segments that come back without error.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.log_event import event
from storage.model import RemoteLogSegmentMetadata
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.segment.builder import SegmentBuilder
from storage.tiering.chain import ChainState, metadata_epochs
from storage.tiering.fetch_stage import FetchFailedError
from storage.tiering.spill import open_spill
from storage.tiering.worker import StorageFactory, worker_runtime

__all__ = [
    "CopyJob",
    "CopyResult",
    "SpillPiece",
    "copy_segment",
    "failed_copy",
    "remove_uploaded",
    "task_storage",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpillPiece:
    """Bytes ``[position, position + size)`` of a spill file."""

    path: str
    position: int
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyJob:
    """One segment to build and upload, already published as COPY_SEGMENT_STARTED."""

    metadata: RemoteLogSegmentMetadata
    pieces: tuple[SpillPiece, ...]
    prior: ChainState


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """What building and uploading one segment came to."""

    segment_id: uuid.UUID
    size: int
    seconds: float
    error: str | None = None
    announced: bool = True
    """Whether its COPY_SEGMENT_STARTED was published (a failed copy then stays STARTED
    until a later cycle deletes it)."""


def _append_spilled(builder: SegmentBuilder, pieces: Sequence[SpillPiece]) -> None:
    """Feed the pieces to the builder straight from the mapped spill files.

    Nothing is copied in Python: the builder and the segment it builds keep a view of a
    mapping, so the upload reads the page cache directly (mapping costs a fraction of a
    copy). A segment whose batches lie in several pieces (it crosses a window's end) would be
    joined into fresh memory when it is finished; instead the kernel copies its pieces into
    one file of the cycle's spill (``copy_file_range``: no page of it faulted into this
    process), taken from the spill pool like a window's file (:func:`.spill.open_spill`), so
    that the copy lands in page-cache pages an earlier cycle already had; it is mapped as one
    piece. The mapping is unmapped when the last view of it goes, once the segment is
    uploaded, and the file goes back to the pool with the cycle's other spill files.
    """
    if len(pieces) == 1:
        (piece,) = pieces
        with open(piece.path, "rb") as spill:
            mapped = mmap.mmap(spill.fileno(), 0, access=mmap.ACCESS_READ)
        builder.append(memoryview(mapped)[piece.position : piece.position + piece.size])
        return
    path = Path(pieces[0].path).with_name(f"joined-{uuid.uuid4().hex}.bin")
    with open_spill(path) as joined:
        for piece in pieces:
            with open(piece.path, "rb") as spill:
                _copy_range(spill.fileno(), joined.fileno(), piece.position, piece.size)
        size = sum(piece.size for piece in pieces)  # a pooled file is cut to it on leaving
        mapped = mmap.mmap(joined.fileno(), size, access=mmap.ACCESS_READ)
    builder.append(memoryview(mapped))


def _copy_range(source: int, target: int, position: int, size: int) -> None:
    """Append bytes ``[position, position + size)`` of ``source`` to ``target``, in the kernel.

    :raises OSError: when the source ends early or the copy fails.
    """
    end = position + size
    while position < end:
        copied = os.copy_file_range(source, target, end - position, position)
        if copied == 0:
            raise OSError(f"spill file ends at {position}, before {end}")
        position += copied


async def _copy_one(job: CopyJob, rsm: RemoteStorageManager) -> CopyResult:
    started = time.monotonic()
    metadata = job.metadata
    builder = SegmentBuilder(
        base_offset=metadata.start_offset,
        prior_epochs=job.prior.lineage,
        prior_producers=job.prior.producers,
    )
    _append_spilled(builder, job.pieces)
    built = builder.finish()
    planned = (
        metadata.end_offset,
        metadata.segment_size_in_bytes,
        metadata.max_timestamp,
        metadata.segment_leader_epochs,
    )
    got = (
        built.end_offset,
        built.size_in_bytes,
        built.max_timestamp,
        metadata_epochs(built.segment_leader_epochs, built.start_offset),
    )
    if got != planned:
        raise FetchFailedError(f"segment data differs from its plan: planned {planned}, got {got}")
    await rsm.copy_log_segment(metadata, built.data)
    return CopyResult(
        segment_id=metadata.segment_id.id,
        size=built.size_in_bytes,
        seconds=time.monotonic() - started,
    )


async def copy_segment(job: CopyJob, rsm: RemoteStorageManager) -> CopyResult:
    """Build and upload one segment; a failure (a spill file gone, the storage down) is
    returned, never raised."""
    try:
        return await _copy_one(job, rsm)
    except Exception as err:
        return failed_copy(job, f"{type(err).__name__}: {err}")


async def remove_uploaded(job: CopyJob, rsm: RemoteStorageManager) -> None:
    """Delete the objects of a segment this task uploaded but must not leave (uploaded past
    its job's deadline): nobody would finish the copy, and another pipeline may already have
    cleaned up its record. A failure is logged; the objects then stay as strays."""
    try:
        await rsm.delete_log_segment(job.metadata)
    except RemoteResourceNotFoundError:
        pass
    except Exception:
        event(
            log,
            logging.ERROR,
            "tiering.copy.late_upload_not_removed",
            msg=f"could not remove segment {job.metadata.segment_id.id} of "
            f"{job.metadata.topic_id_partition}, uploaded past its job's deadline",
            segment=job.metadata.segment_id.id,
            exc_info=True,
        )


def failed_copy(job: CopyJob, error: str, *, announced: bool = True) -> CopyResult:
    """The result of a segment that was not uploaded, and why; ``announced``: whether its
    COPY_SEGMENT_STARTED was published."""
    return CopyResult(
        segment_id=job.metadata.segment_id.id,
        size=0,
        seconds=0.0,
        error=error,
        announced=announced,
    )


def task_storage(
    storage: RemoteStorageConfig, storage_factory: StorageFactory | None
) -> RemoteStorageManager:
    """The worker's remote storage manager for ``storage``.

    :param storage_factory: builds the remote storage manager inside the task
        (:func:`storage.rsm.factory.create_remote_storage` by default); a seam for other
        storage plugins and for fault injection in tests.
    """
    if storage_factory is None:
        # Imported in the task: the S3 client stack is heavy and not needed by the driver.
        from storage.rsm.factory import create_remote_storage  # noqa: PLC0415

        storage_factory = create_remote_storage
    return worker_runtime().storage(storage_factory, storage)
