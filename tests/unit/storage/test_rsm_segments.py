"""storage.rsm.segments over a real directory: manifests, checksums, compression, encryption.

Every mode (as is, compressed, encrypted, both) round-trips any range of the .log and every
index; damaged chunks and manifests, missing or wrong keys, and rotated keys behave as the
module docstring promises; segments of the earlier format (no manifest) read as before.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import Compression
from storage.model import (
    IndexType,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.rsm.base import RemoteRangeError, RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.chunk_codec import ChunkIntegrityError, EncodeSettings
from storage.rsm.keyring import EncryptionKeyError, KeyRing
from storage.rsm.layout import RemoteLayout
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.manifest import decode_manifest
from storage.rsm.segments import MappedSegmentStorage, SegmentStorage
from tests.fakes.record_batches import data_batch
from tests.fakes.segments import segment_data, segment_metadata

TOPIC = TopicIdPartition(topic_id=uuid.uuid4(), topic="payments", partition=0)
KEY_A = os.urandom(32)
KEY_B = os.urandom(32)
CHUNK = 4096
MODES = ("plain", "compressed", "encrypted", "both")


def metadata(size: int) -> RemoteLogSegmentMetadata:
    return segment_metadata(TOPIC, size=size, end_offset=99, timestamp=1)


def files_under(root: Path, pattern: str = "*") -> list[Path]:
    return [path for path in root.rglob(pattern) if path.is_file()]


def compressible(size: int) -> bytes:
    block = os.urandom(512)
    return (block * (size // 512 + 1))[:size]


def storage(
    root: Path,
    mode: str,
    *,
    keys: KeyRing | None = None,
    mapped: bool = True,
) -> SegmentStorage:
    encrypt = mode in ("encrypted", "both")
    if keys is None and encrypt:
        keys = KeyRing({"a": KEY_A}, active="a")
    kind = MappedSegmentStorage if mapped else SegmentStorage
    return kind(
        LocalRemoteStorage(root),
        encode=EncodeSettings(
            chunk_bytes=CHUNK, compression_level=3 if mode in ("compressed", "both") else None
        ),
        encrypt=encrypt,
        keys=keys,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mapped", [True, False])
async def test_every_mode_reads_back_what_was_written(
    tmp_path: Path, mode: str, mapped: bool
) -> None:
    log = compressible(10 * CHUNK + 123)
    meta = metadata(len(log))
    rsm = storage(tmp_path, mode, mapped=mapped)
    await rsm.copy_log_segment(meta, segment_data(log))
    reader = storage(tmp_path, mode, mapped=mapped)  # a fresh process: reads the manifest
    for start, end in [(0, CHUNK), (CHUNK, 2 * CHUNK), (10, 5 * CHUNK + 7), (0, None)]:
        assert bytes(await reader.fetch_log_segment(meta, start, end)) == log[start:end]
    if isinstance(reader, MappedSegmentStorage):
        view = await reader.map_log_segment(meta, 3 * CHUNK, 4 * CHUNK)
        assert bytes(view) == log[3 * CHUNK : 4 * CHUNK]
        reader.unmap(view)
    for index_type in IndexType:
        assert await reader.fetch_index(meta, index_type) == segment_data(log).file_for(index_type)
    assert await reader.fetch_log_segment(meta, len(log)) == b""
    with pytest.raises(RemoteRangeError):
        await reader.fetch_log_segment(meta, len(log) + 1, len(log) + 5)
    await reader.delete_log_segment(meta)
    assert not files_under(tmp_path)
    with pytest.raises(RemoteResourceNotFoundError):
        await reader.delete_log_segment(meta)
    await rsm.close()
    await reader.close()


@pytest.mark.parametrize("mode", MODES)
async def test_stored_objects_and_what_they_say(tmp_path: Path, mode: str) -> None:
    """Encoded objects carry ``.tpx``, so a reader without the manifest finds no ``.log``;
    segments stored as is keep Kafka's keys and bytes."""
    log = compressible(3 * CHUNK)
    meta = metadata(len(log))
    rsm = storage(tmp_path, mode)
    await rsm.copy_log_segment(meta, segment_data(log))
    layout = RemoteLayout()
    manifest = decode_manifest((tmp_path / layout.manifest_key(meta)).read_bytes())
    plain_store = LocalRemoteStorage(tmp_path)
    if mode == "plain":
        assert (tmp_path / layout.log_key(meta)).read_bytes() == log
        assert await plain_store.fetch_log_segment(meta, 0) == log
        assert manifest.encryption is None and manifest.compression is None
    else:
        assert not (tmp_path / layout.log_key(meta)).exists()
        assert (tmp_path / (layout.log_key(meta) + ".tpx")).read_bytes() != log
        with pytest.raises(RemoteResourceNotFoundError):
            await plain_store.fetch_log_segment(meta, 0)
    if mode in ("compressed", "both"):
        assert manifest.compression == "zstd"
        assert manifest.log.stored_size < len(log) / 2
        assert rsm.counters.stored_bytes_written < rsm.counters.original_bytes_written / 2
    if mode in ("encrypted", "both"):
        assert manifest.encryption is not None and manifest.encryption.key_id == "a"
        assert KEY_A not in (tmp_path / layout.manifest_key(meta)).read_bytes()
    await rsm.close()


async def test_a_segment_without_manifest_reads_as_before(tmp_path: Path) -> None:
    log = os.urandom(2 * CHUNK)
    meta = metadata(len(log))
    await LocalRemoteStorage(tmp_path).copy_log_segment(meta, segment_data(log))
    rsm = storage(tmp_path, "both")
    assert bytes(await rsm.fetch_log_segment(meta, 100, 5000)) == log[100:5000]
    assert bytes(await rsm.map_log_segment(meta, 0, CHUNK)) == log[:CHUNK]  # type: ignore[attr-defined]
    assert await rsm.fetch_index(meta, IndexType.OFFSET) == segment_data(log).offset_index
    assert rsm.counters.manifest_gets == 1  # the missing manifest is remembered
    await rsm.delete_log_segment(meta)
    await rsm.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_damaged_chunk_is_a_retriable_integrity_error_never_data(
    tmp_path: Path, mode: str
) -> None:
    log = compressible(4 * CHUNK)
    meta = metadata(len(log))
    await storage(tmp_path, mode).copy_log_segment(meta, segment_data(log))
    (stored,) = files_under(tmp_path, "*.log*")
    damaged = bytearray(stored.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    stored.write_bytes(bytes(damaged))
    reader = storage(tmp_path, mode)
    with pytest.raises(ChunkIntegrityError) as caught:
        await reader.fetch_log_segment(meta, 0, len(log))
    assert caught.value.retriable
    assert stored.name in caught.value.key
    assert reader.counters.integrity_failures == 1
    # The other chunks still read (each is checked on its own).
    assert bytes(await reader.fetch_log_segment(meta, 0, CHUNK)) == log[:CHUNK]


async def test_a_damaged_manifest_is_an_integrity_error(tmp_path: Path) -> None:
    log = compressible(CHUNK)
    meta = metadata(len(log))
    await storage(tmp_path, "plain").copy_log_segment(meta, segment_data(log))
    manifest = tmp_path / RemoteLayout().manifest_key(meta)
    raw = bytearray(manifest.read_bytes())
    raw[-3] ^= 0x20
    manifest.write_bytes(bytes(raw))
    reader = storage(tmp_path, "plain")
    with pytest.raises(ChunkIntegrityError, match="checksum"):
        await reader.fetch_log_segment(meta, 0, CHUNK)
    assert reader.counters.integrity_failures == 1


async def test_missing_or_wrong_keys_name_the_key_id(tmp_path: Path) -> None:
    log = compressible(2 * CHUNK)
    meta = metadata(len(log))
    await storage(tmp_path, "encrypted").copy_log_segment(meta, segment_data(log))
    for keys, problem in [
        (None, "encrypted with key 'a' and no encryption keys are loaded"),
        (KeyRing({"b": KEY_B}, active=None), "encryption key 'a' is not loaded"),
        (KeyRing({"a": KEY_B}, active=None), "encryption key 'a' does not unwrap"),
    ]:
        reader = SegmentStorage(
            LocalRemoteStorage(tmp_path),
            encode=EncodeSettings(chunk_bytes=CHUNK, compression_level=None),
            keys=keys,
        )
        with pytest.raises(EncryptionKeyError, match=problem) as caught:
            await reader.fetch_log_segment(meta, 0, CHUNK)
        assert caught.value.key_id == "a"
        assert caught.value.retriable
        assert reader.counters.key_failures == 1
    # Once the key is there, the same reader succeeds: a failure is never remembered.
    later = KeyRing({"a": KEY_A}, active=None)
    reader = SegmentStorage(
        LocalRemoteStorage(tmp_path),
        encode=EncodeSettings(chunk_bytes=CHUNK, compression_level=None),
        keys=later,
    )
    assert bytes(await reader.fetch_log_segment(meta, 0, CHUNK)) == log[:CHUNK]


async def test_rotated_keys_keep_old_segments_readable(tmp_path: Path) -> None:
    old, new = compressible(CHUNK), compressible(CHUNK)
    meta_old, meta_new = metadata(len(old)), metadata(len(new))
    await storage(tmp_path, "encrypted", keys=KeyRing({"a": KEY_A}, active="a")).copy_log_segment(
        meta_old, segment_data(old)
    )
    rotated = KeyRing({"a": KEY_A, "b": KEY_B}, active="b")
    await storage(tmp_path, "encrypted", keys=rotated).copy_log_segment(meta_new, segment_data(new))
    manifest = decode_manifest((tmp_path / RemoteLayout().manifest_key(meta_new)).read_bytes())
    assert manifest.encryption is not None and manifest.encryption.key_id == "b"
    reader = storage(tmp_path, "encrypted", keys=rotated)
    assert bytes(await reader.fetch_log_segment(meta_old, 0, CHUNK)) == old
    assert bytes(await reader.fetch_log_segment(meta_new, 0, CHUNK)) == new


async def test_batches_the_producer_compressed_are_not_compressed_again(tmp_path: Path) -> None:
    batches = b"".join(
        data_batch(offset, 20, value_size=200, compression=Compression.GZIP)
        for offset in range(0, 400, 20)
    )
    meta = metadata(len(batches))
    rsm = storage(tmp_path, "compressed")
    await rsm.copy_log_segment(meta, segment_data(batches))
    manifest = decode_manifest((tmp_path / RemoteLayout().manifest_key(meta)).read_bytes())
    assert not any(chunk.compressed for chunk in manifest.log.chunks)
    assert bytes(await rsm.fetch_log_segment(meta, 0)) == batches


async def test_incompressible_data_is_stored_as_is_after_its_first_chunk(tmp_path: Path) -> None:
    log = os.urandom(5 * CHUNK)
    meta = metadata(len(log))
    rsm = storage(tmp_path, "compressed")
    await rsm.copy_log_segment(meta, segment_data(log))
    manifest = decode_manifest((tmp_path / RemoteLayout().manifest_key(meta)).read_bytes())
    assert [c.stored_size for c in manifest.log.chunks] == [CHUNK] * 5
    assert bytes(await rsm.fetch_log_segment(meta, 0)) == log


def test_key_files_and_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026\nold:{base64.b64encode(KEY_A).decode()}\n\n")
    monkeypatch.setenv("KEYS", f"new:{base64.b64encode(KEY_B).decode()}")
    ring = KeyRing.load(keys_file=str(path), keys_env="KEYS", active="new")
    assert ring.key_ids == ("new", "old")
    monkeypatch.setenv("KEYS", f"old:{base64.b64encode(KEY_B).decode()}")
    with pytest.raises(ValueError, match="given twice"):
        KeyRing.load(keys_file=str(path), keys_env="KEYS", active=None)
    path.write_text("old:c2hvcnQ=\n")
    with pytest.raises(ValueError, match="5 bytes, not 32"):
        KeyRing.load(keys_file=str(path), keys_env=None, active=None)
    with pytest.raises(ValueError, match="is not among the keys loaded"):
        KeyRing({}, active="missing")


@settings(max_examples=40)
@given(
    size=st.integers(min_value=0, max_value=6 * 1024),
    chunk=st.sampled_from([1024, 1500, 4096]),
    mode=st.sampled_from(MODES),
    ranges=st.lists(st.tuples(st.integers(0, 7000), st.integers(0, 3000)), max_size=6),
)
async def test_any_range_reads_the_original_bytes(
    tmp_path_factory: pytest.TempPathFactory,
    size: int,
    chunk: int,
    mode: str,
    ranges: list[tuple[int, int]],
) -> None:
    log = compressible(size)
    meta = metadata(size)
    encrypt = mode in ("encrypted", "both")
    rsm = SegmentStorage(
        LocalRemoteStorage(tmp_path_factory.mktemp("segments")),
        encode=EncodeSettings(
            chunk_bytes=chunk, compression_level=1 if mode in ("compressed", "both") else None
        ),
        encrypt=encrypt,
        keys=KeyRing({"a": KEY_A}, active="a") if encrypt else None,
    )
    await rsm.copy_log_segment(meta, segment_data(log))
    for start, length in ranges:
        if start > size and length:  # an empty range is answered without storage
            with pytest.raises(RemoteRangeError):
                await rsm.fetch_log_segment(meta, start, start + length)
        else:
            got = await rsm.fetch_log_segment(meta, start, start + length)
            assert bytes(got) == log[start : start + length]
    await rsm.close()


@pytest.mark.parametrize("mapped", [True, False])
async def test_a_failed_upload_raises_the_storage_error_not_a_group(
    tmp_path: Path, mapped: bool
) -> None:
    """The objects are written concurrently; their failure is one storage error that says
    why (here, the directory's parent is a regular file), as the RSM's contract says."""
    (tmp_path / "file").write_text("a regular file")
    store = storage(tmp_path / "file" / "tier", "plain", mapped=mapped)
    with pytest.raises(RemoteStorageError, match="Not a directory") as caught:
        await store.copy_log_segment(metadata(4096), segment_data(os.urandom(4096)))
    assert caught.value.retriable is False
