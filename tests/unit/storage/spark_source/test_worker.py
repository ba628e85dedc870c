"""What a Python worker keeps across tasks: its heap frozen out of the collector when it grew by
what stays, one index cache per storage configuration, and glibc told once to keep freed
memory."""

from __future__ import annotations

import ctypes
import gc
import platform
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import glibc_malloc
from storage.rsm.config import RemoteStorageConfig
from storage.spark_source import worker


@pytest.fixture
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The module's state as in a new worker process; the test process's heap unfrozen after."""
    monkeypatch.setattr(worker, "_frozen_with", None)
    monkeypatch.setattr(worker, "_storages", {})
    monkeypatch.setattr(worker, "_indexes", {})
    monkeypatch.setattr(worker, "_tuned", False)
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("fresh_worker")
def test_the_heap_is_frozen_on_the_first_task_and_after_a_storage_manager_appears(
    tmp_path: Path,
) -> None:
    worker.freeze_heap()
    first = gc.get_freeze_count()
    assert first > 0

    kept = [[index] for index in range(1000)]  # objects of a task, not the worker's own
    worker.freeze_heap()
    # Nothing new stays: no freeze (frozen objects that other threads free leave the count).
    assert gc.get_freeze_count() <= first

    worker.remote_storage(RemoteStorageConfig(local_dir=str(tmp_path)))
    worker.freeze_heap()
    assert gc.get_freeze_count() >= first + len(kept)


@pytest.mark.usefixtures("fresh_worker")
def test_one_index_cache_per_storage_configuration(tmp_path: Path) -> None:
    one = RemoteStorageConfig(local_dir=str(tmp_path / "one"))
    other = RemoteStorageConfig(local_dir=str(tmp_path / "other"))

    assert worker.index_cache(one) is worker.index_cache(one)
    assert worker.index_cache(one) is not worker.index_cache(other)
    assert set(worker._storages) == {one, other}


@pytest.mark.usefixtures("fresh_worker")
def test_the_allocator_is_tuned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class FakeLibc:
        def mallopt(self, option: int, value: int) -> int:
            calls.append((option, value))
            return 1

    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: FakeLibc())
    worker.keep_freed_memory()
    worker.keep_freed_memory()

    assert calls == [
        (glibc_malloc.M_TRIM_THRESHOLD, worker._KEPT_FREE_BYTES),
        (glibc_malloc.M_MMAP_THRESHOLD, worker._MMAP_ABOVE_BYTES),
        (glibc_malloc.M_ARENA_MAX, 1),
    ]


@pytest.mark.usefixtures("fresh_worker")
def test_the_allocator_is_left_alone_under_another_c_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    monkeypatch.setattr(ctypes, "CDLL", pytest.fail)
    worker.keep_freed_memory()
