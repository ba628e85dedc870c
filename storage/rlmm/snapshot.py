"""Flat-file snapshots of the metadata cache and committed offsets, for fast restarts.

KIP-405 ("RemoteLogMetadataManager implemented with an internal topic") keeps, per user
partition, a flat file ``<magic><topic-id><metadata-topic-offset><entries>`` with the
materialised segments, and a file ``_rlmm_committed_offsets`` with one
``<partition> <offset>`` line per metadata topic partition. A restarted manager loads the
files and consumes only the tail of the topic. The encodings are those of
:mod:`protocol.metadata_records`; this module adds the files around them, in one process's
slot of the snapshot directory (:mod:`storage.rlmm.slots`):

- ``<slot>/<topic>-<partition>/remote_log_snapshot.<topic id>``: the flat file followed by a
  CRC32C of everything before it (4 bytes, big endian), so that a truncated or damaged file
  is detected rather than half loaded. The topic id is in the name because a re-created
  topic reuses the name while the old one's remote data may still be being deleted.
- ``<slot>/_rlmm_committed_offsets``: offsets are the *last applied* offset of each metadata
  partition, so consumption resumes at the next one.
- ``<slot>/_rlmm_binding``: what the state belongs to (:class:`StateBinding`): the cluster
  id, the metadata topic's name and topic id, and the remote tier's location.

Every file is written to a temporary name, fsynced, renamed over the old one and the
directory fsynced, so a crash leaves either the old or the new file. Snapshots are written
before the committed offsets: a snapshot may be newer than the committed offsets (its own
header says how far it reaches, and older records for its partition are skipped on
replay), never older. A snapshot that fails its checksum or does not decode is dropped with
a warning, and its metadata partition is replayed from the beginning; the other snapshots
of that metadata partition still skip what they hold.

State is only ever used with the topic it was read from. A directory bound to another
cluster, metadata topic (a re-created topic has a new id) or remote tier, or with no binding
at all, or whose offsets reach past the end of the topic (records lost to an unclean leader
election, or a broker without topic ids), is not loaded: one warning, its files are removed,
and the whole topic is replayed. Deletions decided from the cache therefore rest on records
of the topic itself, never on another cluster's snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

from protocol.metadata_records import (
    DeletePartitionStateRecordStored,
    FlatFileColumns,
    FlatFileSnapshot,
    MetadataRecordError,
    RemoteLogSegmentMetadataRecordStored,
    RemoteLogStartOffsetRecordStored,
    StoredMetadataRecord,
    decode_committed_offsets,
    decode_flat_file_columns,
    encode_committed_offsets,
    encode_flat_file,
)
from protocol.murmur2 import metadata_partition_for
from storage.durable import write_atomically
from storage.log_event import event
from storage.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from storage.rlmm.cache import PartitionDeleteStatus, RemoteLogMetadataCache
from storage.rlmm.state import RemoteLogMetadataError

__all__ = [
    "BINDING_FILE",
    "COMMITTED_OFFSETS_FILE",
    "SNAPSHOT_FILE_PREFIX",
    "PartitionKey",
    "Restored",
    "SnapshotStore",
    "StateBinding",
    "stored_segments",
]

log = logging.getLogger(__name__)

COMMITTED_OFFSETS_FILE = "_rlmm_committed_offsets"
"""KIP-405's name for the committed offsets file."""
SNAPSHOT_FILE_PREFIX = "remote_log_snapshot."
BINDING_FILE: Final = "_rlmm_binding"
"""What the directory's state belongs to (JSON, :class:`StateBinding`)."""
_CHECKSUM = struct.Struct(">I")

PartitionKey = tuple[uuid.UUID, int]
"""``(topic id, partition)``: how metadata records name a user partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Restored:
    """What loading the snapshots restored, and where consumption must resume."""

    applied_through: dict[PartitionKey, int]
    """Per restored user partition, the metadata topic offset its snapshot reflects:
    records for it at or below that offset are already in the cache."""
    resume_after: dict[int, int]
    """Per metadata partition, the last offset already applied; a partition missing here
    is read from its beginning."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBinding:
    """What snapshots and committed offsets were read from, and so may only be used with.

    Brokers that do not report one leave ``cluster_id`` empty, or ``metadata_topic_id`` the
    nil UUID: the binding is then weaker, and the end-of-topic check of
    :meth:`SnapshotStore.load` is what still catches a foreign directory.
    """

    cluster_id: str
    metadata_topic: str
    metadata_topic_id: uuid.UUID
    remote_storage: str
    """Where the remote tier lives (:func:`storage.rsm.factory.storage_identity`)."""

    def encode(self) -> bytes:
        """The binding file's content."""
        fields = dataclasses.asdict(self)
        fields["metadata_topic_id"] = str(self.metadata_topic_id)
        return json.dumps(fields, sort_keys=True).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> StateBinding:
        """A binding file's content.

        :raises ValueError: if it is not a binding.
        """
        try:
            fields = json.loads(data)
            return cls(
                cluster_id=str(fields["cluster_id"]),
                metadata_topic=str(fields["metadata_topic"]),
                metadata_topic_id=uuid.UUID(str(fields["metadata_topic_id"])),
                remote_storage=str(fields["remote_storage"]),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a binding: {err!r}") from err

    def differences(self, other: StateBinding) -> str:
        """``field X, not Y`` for each field where ``other`` differs from this binding."""
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        return ", ".join(
            f"{name.replace('_', ' ')} {theirs[name] or '(none)'}, not {mine[name] or '(none)'}"
            for name in mine
            if mine[name] != theirs[name]
        )


class SnapshotStore:
    """The snapshot directory (one process's slot) of one metadata topic
    (``partition_count`` partitions)."""

    def __init__(self, directory: Path, partition_count: int) -> None:
        self.directory = directory
        self.partition_count = partition_count

    def load(
        self, cache: RemoteLogMetadataCache, *, binding: StateBinding, ends: Mapping[int, int]
    ) -> Restored:
        """Restore every readable snapshot into ``cache`` (which must be empty), if the
        directory's state belongs to ``binding`` and lies within the topic's ``ends``.

        ``ends`` maps each metadata partition to its end offset as ListOffsets answers it.
        A position past it (a last applied offset greater than the end) is one the topic
        never had. Some brokers answer the last batch's base offset, one below the true end
        for the metadata topic's one-record batches, so a position equal to the end is let
        pass.

        Never fails on bad files: a damaged snapshot or committed offsets file is logged,
        ignored, and its metadata partitions are replayed from the beginning. State of
        another binding, or past the ends, is removed with one warning and nothing is
        restored (the whole topic is replayed); the directory is bound to ``binding``.

        :raises OSError: if the directory cannot be written.
        """
        if not self._bound_to(binding):
            return _nothing()
        committed = self._load_committed()
        past = sorted(m for m, offset in committed.items() if offset > ends.get(m, 0))
        if past:
            self._forget(binding, f"its committed offsets lie past the end of partitions {past}")
            return _nothing()
        applied: dict[PartitionKey, int] = {}
        replay: set[int] = set()
        for path in sorted(self.directory.glob(f"*/{SNAPSHOT_FILE_PREFIX}*")):
            found = self._read(path, replay)
            if found is None:
                continue
            tp, snapshot = found
            metadata_partition = metadata_partition_for(str(tp), self.partition_count)
            if snapshot.metadata_topic_offset > ends.get(metadata_partition, 0):
                for restored in cache.partitions():
                    cache.drop_partition(restored)
                self._forget(
                    binding,
                    f"{path} reaches offset {snapshot.metadata_topic_offset} of partition "
                    f"{metadata_partition}, past its end",
                )
                return _nothing()
            status, log_start = _partition_state(snapshot.others)
            try:
                if not cache.restore_columns(tp, snapshot, status, log_start):
                    cache.restore_partition(tp, _segments(tp, snapshot), status, log_start)
            except RemoteLogMetadataError as err:
                cache.drop_partition(tp)
                replay.add(self._rebuild(path, str(tp), err))
                continue
            applied[(tp.topic_id, tp.partition)] = snapshot.metadata_topic_offset
        resume = {m: offset for m, offset in committed.items() if m not in replay}
        return Restored(applied_through=applied, resume_after=resume)

    def plan(
        self,
        cache: RemoteLogMetadataCache,
        positions: Mapping[int, int],
        changed: Iterable[TopicIdPartition],
    ) -> list[tuple[Path, bytes | None]]:
        """The files :meth:`write` must write (``None``: delete), encoded from ``cache`` now.

        ``positions`` maps each metadata partition to the last offset applied to ``cache``.
        A changed partition the cache no longer holds (its deletion finished) loses its
        file. Encoding reads the cache, so it runs where the cache lives; the blocking
        writes can then run in a thread.
        """
        files: list[tuple[Path, bytes | None]] = []
        for tp in changed:
            path = self.directory / str(tp) / f"{SNAPSHOT_FILE_PREFIX}{tp.topic_id.hex}"
            if cache.topic_id_partition_by_id(tp.topic_id, tp.partition) is None:
                files.append((path, None))
            else:
                position = positions.get(metadata_partition_for(str(tp), self.partition_count), -1)
                files.append((path, _encode_snapshot(cache, tp, position)))
        text = encode_committed_offsets({m: o for m, o in positions.items() if o >= 0})
        files.append((self.directory / COMMITTED_OFFSETS_FILE, text.encode()))
        return files

    def write(self, files: Iterable[tuple[Path, bytes | None]]) -> None:
        """Write (atomically) or delete each planned file, in order.

        :raises OSError: if the directory cannot be written.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        for path, data in files:
            if data is None:
                path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # only if no other topic id's snapshot is left
            else:
                path.parent.mkdir(exist_ok=True)
                write_atomically(path, data, sync_directory=True)

    def _bound_to(self, binding: StateBinding) -> bool:
        """Whether the directory's state belongs to ``binding``; if not, it is forgotten
        (with a warning when there was any) and the directory bound to ``binding``.

        :raises OSError: if the directory cannot be written.
        """
        path = self.directory / BINDING_FILE
        try:
            found: StateBinding | None = StateBinding.decode(path.read_bytes())
        except FileNotFoundError:
            found = None
        except (OSError, ValueError) as err:
            self._forget(binding, f"{path} is unreadable ({err})")
            return False
        if found == binding:
            return True
        if found is not None:
            self._forget(binding, f"they belong to {binding.differences(found)}")
        elif self._state_files():
            self._forget(binding, "they belong to no known cluster (no binding)")
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(path, binding.encode(), sync_directory=True)
        return False

    def _forget(self, binding: StateBinding, why: str) -> None:
        """Remove the directory's state and bind it to ``binding``, with one warning.

        The old binding goes first and the new one is written last, so a crash in between
        leaves a directory that the next start forgets again.

        :raises OSError: if the directory cannot be written.
        """
        event(
            log,
            logging.WARNING,
            "metadata.snapshots.discarded",
            msg=f"metadata snapshots in {self.directory} are not used: {why}; replaying the "
            f"metadata topic {binding.metadata_topic} from its beginning",
            directory=str(self.directory),
        )
        (self.directory / BINDING_FILE).unlink(missing_ok=True)
        for path in self._state_files():
            path.unlink(missing_ok=True)
            if path.parent != self.directory:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.directory / BINDING_FILE, binding.encode(), sync_directory=True)

    def _state_files(self) -> list[Path]:
        """The snapshot files and the committed offsets file now in the directory."""
        if not self.directory.is_dir():
            return []
        files = sorted(self.directory.glob(f"*/{SNAPSHOT_FILE_PREFIX}*"))
        committed = self.directory / COMMITTED_OFFSETS_FILE
        return [*files, committed] if committed.exists() else files

    def _read(
        self, path: Path, replay: set[int]
    ) -> tuple[TopicIdPartition, FlatFileColumns] | None:
        """The partition and content of one snapshot file; ``None`` (logged, and its metadata
        partition added to ``replay`` when it is damaged) if it cannot be used."""
        name = path.parent.name
        topic, _, number = name.rpartition("-")
        if not topic or not number.isdigit():
            event(
                log,
                logging.WARNING,
                "metadata.snapshots.ignored",
                msg=f"ignoring snapshot {path}: directory is not <topic>-<partition>",
                path=str(path),
            )
            return None
        try:
            snapshot = _read_snapshot(path)
        except (OSError, MetadataRecordError) as err:
            replay.add(self._rebuild(path, name, err))
            return None
        tp = TopicIdPartition(topic_id=snapshot.topic_id, topic=topic, partition=int(number))
        return tp, snapshot

    def _rebuild(self, path: Path, name: str, err: Exception) -> int:
        """Log why a snapshot is dropped; the metadata partition to replay from the start."""
        event(
            log,
            logging.WARNING,
            "metadata.snapshots.unreadable",
            msg=f"snapshot {path} is unreadable ({err}); rebuilding {name} from the metadata topic",
            path=str(path),
        )
        return metadata_partition_for(name, self.partition_count)

    def _load_committed(self) -> dict[int, int]:
        path = self.directory / COMMITTED_OFFSETS_FILE
        try:
            return decode_committed_offsets(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, MetadataRecordError) as err:
            event(
                log,
                logging.WARNING,
                "metadata.snapshots.offsets_unreadable",
                msg=f"{path} is unreadable ({err}); replaying the metadata topic",
                path=str(path),
            )
            return {}


def _nothing() -> Restored:
    return Restored(applied_through={}, resume_after={})


def stored_segments(
    cache: RemoteLogMetadataCache, tp: TopicIdPartition
) -> list[RemoteLogSegmentMetadataRecordStored]:
    """The flat-file entries of a partition's segments, in the cache's order."""
    return [
        RemoteLogSegmentMetadataRecordStored(
            segment_id=m.segment_id.id,
            start_offset=m.start_offset,
            end_offset=m.end_offset,
            leader_epoch=m.leader_epoch,
            max_timestamp=m.max_timestamp,
            event_timestamp=m.event_timestamp,
            segment_leader_epochs=m.segment_leader_epochs,
            segment_size_in_bytes=m.segment_size_in_bytes,
            state=m.state,
        )
        for m in cache.segments(tp)
    ]


def _encode_snapshot(cache: RemoteLogMetadataCache, tp: TopicIdPartition, position: int) -> bytes:
    entries: list[StoredMetadataRecord] = [*stored_segments(cache, tp)]
    status = cache.delete_status(tp)
    if status is not None:
        entries.append(
            DeletePartitionStateRecordStored(
                epoch=status.epoch, event_timestamp=status.event_timestamp, state=status.state
            )
        )
    log_start = cache.log_start_offset(tp)
    if log_start:
        entries.append(RemoteLogStartOffsetRecordStored(start_offset=log_start, event_timestamp=0))
    body = encode_flat_file(
        FlatFileSnapshot(
            topic_id=tp.topic_id, metadata_topic_offset=position, entries=tuple(entries)
        )
    )
    return body + _CHECKSUM.pack(crc32c.crc32c(body))


def _read_snapshot(path: Path) -> FlatFileColumns:
    data = path.read_bytes()
    if len(data) < _CHECKSUM.size:
        raise MetadataRecordError(f"{len(data)} bytes is too short for a snapshot")
    body = memoryview(data)[: -_CHECKSUM.size]
    (expected,) = _CHECKSUM.unpack_from(data, len(body))
    if crc32c.crc32c(body) != expected:
        raise MetadataRecordError("checksum mismatch (truncated or damaged)")
    snapshot = decode_flat_file_columns(body)
    if path.name != f"{SNAPSHOT_FILE_PREFIX}{snapshot.topic_id.hex}":
        raise MetadataRecordError(f"holds topic id {snapshot.topic_id}, not the one its name says")
    return snapshot


def _partition_state(
    entries: Iterable[DeletePartitionStateRecordStored | RemoteLogStartOffsetRecordStored],
) -> tuple[PartitionDeleteStatus | None, int]:
    """The deletion status and log start a snapshot's entries leave (the last of each)."""
    status = None
    log_start = 0
    for entry in entries:
        if isinstance(entry, DeletePartitionStateRecordStored):
            status = PartitionDeleteStatus(
                state=entry.state, epoch=entry.epoch, event_timestamp=entry.event_timestamp
            )
        else:
            log_start = entry.start_offset
    return status, log_start


def _segments(
    tp: TopicIdPartition, snapshot: FlatFileColumns
) -> Iterator[RemoteLogSegmentMetadata]:
    """A snapshot's segments one by one, for :meth:`RemoteLogMetadataCache.restore_partition`."""
    for i in range(len(snapshot)):
        entry = snapshot.segment_entry(i)
        yield RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId(topic_id_partition=tp, id=entry.segment_id),
            start_offset=entry.start_offset,
            end_offset=entry.end_offset,
            max_timestamp=entry.max_timestamp,
            leader_epoch=entry.leader_epoch,
            event_timestamp=entry.event_timestamp,
            segment_leader_epochs=entry.segment_leader_epochs,
            segment_size_in_bytes=entry.segment_size_in_bytes,
            state=entry.state,
        )
