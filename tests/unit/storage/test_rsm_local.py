"""storage.rsm.local: the local directory backend, round trips and ranged reads on a real disk."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.model import (
    IndexType,
    TopicIdPartition,
)
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from storage.rsm.layout import RemoteLayout
from storage.rsm.local import LocalRemoteStorage
from tests.fakes.segments import segment_data, segment_metadata

TOPIC = TopicIdPartition(topic_id=uuid.uuid4(), topic="payments", partition=2)


LOG = os.urandom(64 * 1024 + 17)


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


async def test_copy_then_fetch_everything_back(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    data = segment_data(LOG)
    await storage.copy_log_segment(metadata, data)
    assert await storage.fetch_log_segment(metadata, 0) == LOG
    for index_type in IndexType:
        assert await storage.fetch_index(metadata, index_type) == data.file_for(index_type)


async def test_files_sit_at_the_layout_paths_with_no_temporaries_left(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path, prefix="cluster-a")
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(LOG))
    expected = {tmp_path / key for key in RemoteLayout(prefix="cluster-a").segment_keys(metadata)}
    assert files_under(tmp_path) == expected
    assert (tmp_path / RemoteLayout(prefix="cluster-a").log_key(metadata)).read_bytes() == LOG


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, None),
        (0, 1),
        (10, 20),
        (len(LOG) - 1, None),
        (len(LOG), None),
        (len(LOG), len(LOG) + 100),
        (100, len(LOG) * 2),
        (5, 5),
    ],
)
async def test_ranged_reads_equal_the_slice(tmp_path: Path, start: int, end: int | None) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(LOG))
    assert await storage.fetch_log_segment(metadata, start, end) == LOG[start:end]


def test_ranged_and_mapped_reads_at_random_boundaries_equal_the_slice(tmp_path: Path) -> None:
    metadata = segment_metadata(TOPIC)
    with asyncio.Runner() as runner:
        storage = LocalRemoteStorage(tmp_path)
        runner.run(storage.copy_log_segment(metadata, segment_data(LOG)))

        @settings(max_examples=150, deadline=None)
        @given(
            start=st.integers(min_value=0, max_value=len(LOG)),
            length=st.none() | st.integers(min_value=0, max_value=len(LOG) + 1000),
        )
        def check(start: int, length: int | None) -> None:
            end = None if length is None else start + length
            assert runner.run(storage.fetch_log_segment(metadata, start, end)) == LOG[start:end]
            mapped = runner.run(
                storage.map_log_segment(metadata, start, len(LOG) if end is None else end)
            )
            assert mapped.tobytes() == LOG[start:end]

        check()


async def test_start_beyond_the_end_is_a_range_error(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(b"0123456789"))
    with pytest.raises(RemoteRangeError, match="beyond its size 10") as caught:
        await storage.fetch_log_segment(metadata, 11, 20)
    assert caught.value.retriable is False
    assert (caught.value.start, caught.value.size) == (11, 10)


@pytest.mark.parametrize(("start", "end"), [(-1, None), (5, 4)])
async def test_impossible_ranges_are_the_callers_bug(
    tmp_path: Path, start: int, end: int | None
) -> None:
    storage = LocalRemoteStorage(tmp_path)
    with pytest.raises(ValueError):
        await storage.fetch_log_segment(segment_metadata(TOPIC), start, end)


async def test_empty_log_reads_empty(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(b""))
    assert await storage.fetch_log_segment(metadata, 0) == b""
    assert await storage.fetch_index(metadata, IndexType.TRANSACTION) == b""


async def test_missing_segment_is_not_found_for_every_call(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await storage.fetch_log_segment(metadata, 0, 10)
    assert caught.value.retriable is False
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.fetch_index(metadata, IndexType.OFFSET)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.delete_log_segment(metadata)


async def test_a_missing_object_names_its_path_and_the_probe_stats_without_reading(
    tmp_path: Path,
) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    log_path = tmp_path / RemoteLayout().log_key(metadata)
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await storage.log_segment_size(metadata)
    assert caught.value.key == str(log_path)
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await storage.fetch_index(metadata, IndexType.OFFSET)
    assert caught.value.key == str(tmp_path / RemoteLayout().index_key(metadata, IndexType.OFFSET))
    await storage.copy_log_segment(metadata, segment_data(b"x" * 123))
    assert await storage.log_segment_size(metadata) == 123


async def test_delete_removes_every_file_then_reports_not_found(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    kept, deleted = (
        segment_metadata(TOPIC, start_offset=0),
        segment_metadata(TOPIC, start_offset=100),
    )
    await storage.copy_log_segment(kept, segment_data(LOG))
    await storage.copy_log_segment(deleted, segment_data(LOG))
    await storage.delete_log_segment(deleted)
    remaining = files_under(tmp_path)
    assert remaining == {tmp_path / key for key in RemoteLayout().segment_keys(kept)}
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.fetch_log_segment(deleted, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.delete_log_segment(deleted)
    assert await storage.fetch_log_segment(kept, 0) == LOG


async def test_delete_removes_the_leftovers_of_a_partial_copy(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    leftover = tmp_path / RemoteLayout().index_key(metadata, IndexType.TIMESTAMP)
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"partial")
    await storage.delete_log_segment(metadata)
    assert not leftover.exists()


async def test_copy_attempts_of_one_segment_do_not_collide(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    first, retry = (
        segment_metadata(TOPIC, start_offset=100),
        segment_metadata(TOPIC, start_offset=100),
    )
    await storage.copy_log_segment(first, segment_data(b"first attempt"))
    await storage.copy_log_segment(retry, segment_data(b"second attempt"))
    assert await storage.fetch_log_segment(first, 0) == b"first attempt"
    assert await storage.fetch_log_segment(retry, 0) == b"second attempt"


async def test_concurrent_reads_and_copies(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    segments = [segment_metadata(TOPIC, start_offset=offset) for offset in range(0, 1000, 100)]
    await asyncio.gather(*(storage.copy_log_segment(m, segment_data(LOG)) for m in segments))
    reads = await asyncio.gather(
        *(storage.fetch_log_segment(m, 7 * i, 7 * i + 4096) for i, m in enumerate(segments))
    )
    assert reads == [LOG[7 * i : 7 * i + 4096] for i in range(len(segments))]


async def test_a_failed_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    storage = LocalRemoteStorage(tmp_path)
    with pytest.raises(RemoteStorageError, match="No space left") as caught:
        await storage.copy_log_segment(segment_metadata(TOPIC), segment_data(LOG))
    assert caught.value.retriable is False
    assert files_under(tmp_path) == set()


async def test_calls_after_close_fail(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    await storage.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        await storage.fetch_log_segment(segment_metadata(TOPIC), 0)


# -- mapped ranges (the chunk cache's reads: the file's pages, uncopied) -----------------


async def test_a_mapped_range_is_read_only(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(LOG))
    view = await storage.map_log_segment(metadata, 5000, 9000)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1


async def test_a_mapped_range_outlives_its_deleted_segment(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(LOG))
    view = await storage.map_log_segment(metadata, 4096, len(LOG))
    await storage.delete_log_segment(metadata)
    assert view.tobytes() == LOG[4096:]


async def test_mapped_ranges_fail_as_reads_do(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.map_log_segment(metadata, 0, 10)
    await storage.copy_log_segment(metadata, segment_data(b"0123456789"))
    with pytest.raises(RemoteRangeError, match="beyond its size 10"):
        await storage.map_log_segment(metadata, 11, 20)
    with pytest.raises(ValueError):
        await storage.map_log_segment(metadata, 5, 4)
    assert len(await storage.map_log_segment(metadata, 10, 20)) == 0
    assert len(await storage.map_log_segment(metadata, 3, 3)) == 0
    await storage.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        await storage.map_log_segment(metadata, 0, 10)


async def test_an_empty_log_maps_empty(tmp_path: Path) -> None:
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(b""))
    assert len(await storage.map_log_segment(metadata, 0, 100)) == 0


async def test_an_unmapped_range_is_unmapped_by_the_next_mappings_thread(tmp_path: Path) -> None:
    """The event loop never pays for an unmap (it waited for the memory map lock)."""
    # One pool thread: it lets go of the first mapping's call before it takes the next.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
    storage = LocalRemoteStorage(tmp_path)
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, segment_data(LOG))
    view = await storage.map_log_segment(metadata, 0, 8192)
    unmapped_in: list[threading.Thread] = []
    mapping = weakref.ref(view.obj, lambda _ref: unmapped_in.append(threading.current_thread()))
    storage.unmap(view)
    del view
    assert mapping() is not None
    await storage.map_log_segment(metadata, 8192, 16384)
    assert mapping() is None
    assert unmapped_in and unmapped_in[0] is not threading.current_thread()
