"""storage.rsm.mapped_pages: read-only views of a file's pages, against the file's bytes."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.rsm import mapped_pages
from storage.rsm.mapped_pages import MappedFile, MappedFiles

CONTENT = os.urandom(5 * 4096 + 321)


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    segment = tmp_path_factory.mktemp("pages") / "segment.log"
    segment.write_bytes(CONTENT)
    return segment


@pytest.fixture(params=["libc", "mmap"])
def mapped(request: pytest.FixtureRequest, path: Path) -> Iterator[MappedFile]:
    """The file's mapping through libc, and through the ``mmap`` module (not Linux)."""
    if request.param == "mmap":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mapped_pages, "_LIBC", None)
            yield MappedFile(path)
    else:
        yield MappedFile(path)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ranges=st.lists(st.tuples(st.integers(0, len(CONTENT) - 1), st.integers(1, len(CONTENT)))))
def test_views_hold_the_files_bytes(mapped: MappedFile, ranges: list[tuple[int, int]]) -> None:
    views = []
    for offset, wanted in ranges:
        length = min(wanted, len(CONTENT) - offset)
        view = mapped.view(offset, length)
        assert (len(view), view.readonly, view.format) == (length, True, "B")
        assert view.tobytes() == CONTENT[offset : offset + length]
        views.append((offset, view))
        if len(views) > 2:  # released while others of the same pages are in use
            del views[0]
    for offset, view in views:
        assert view.tobytes() == CONTENT[offset : offset + len(view)]


def test_a_view_outlives_its_file_and_mapping_and_goes_with_its_last_view(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(CONTENT)
    mapped = MappedFile(path)
    view = mapped.view(4096 + 5, 100)
    path.unlink()
    mapping, pages = weakref.ref(mapped), weakref.ref(view.obj)
    del mapped
    part = view[10:20]
    del view
    assert mapping() is not None and pages() is not None
    assert part.tobytes() == CONTENT[4096 + 15 : 4096 + 25]
    del part
    gc.collect()
    assert mapping() is None and pages() is None


@pytest.mark.parametrize(("offset", "length"), [(-1, 10), (0, 0), (len(CONTENT) - 5, 6)])
def test_impossible_views_are_the_callers_bug(path: Path, offset: int, length: int) -> None:
    with pytest.raises(ValueError):
        MappedFile(path).view(offset, length)


def test_an_empty_file_maps_to_no_pages(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert MappedFile(path).size == 0


def test_a_file_that_cannot_be_mapped_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        MappedFile(tmp_path / "absent.log")
    with pytest.raises(OSError):
        MappedFile(tmp_path)  # a directory


def test_views_of_a_file_in_use_share_its_mapping_until_it_is_replaced(tmp_path: Path) -> None:
    files = MappedFiles()
    path = tmp_path / "segment.log"
    path.write_bytes(CONTENT)
    first = files.open(path)
    view = first.view(0, 10)
    assert files.open(path) is first
    replacement = tmp_path / "segment.tmp"
    replacement.write_bytes(CONTENT[::-1])
    replacement.rename(path)
    second = files.open(path)
    assert second is not first
    assert second.view(0, 10).tobytes() == CONTENT[::-1][:10]
    assert view.tobytes() == CONTENT[:10]
    path.unlink()
    with pytest.raises(FileNotFoundError):
        files.open(path)


def test_a_file_no_longer_in_use_is_mapped_again(tmp_path: Path) -> None:
    files = MappedFiles()
    path = tmp_path / "segment.log"
    path.write_bytes(CONTENT)
    first = weakref.ref(files.open(path))
    gc.collect()
    assert first() is None
    assert files.open(path).view(0, 4).tobytes() == CONTENT[:4]


class _PopulateRefused:
    """libc whose ``MADV_POPULATE_READ`` fails with ``errno`` (the rest is the real libc)."""

    def __init__(self, errno: int) -> None:
        libc = mapped_pages._LIBC
        assert libc is not None
        self.real, self.errno = libc, errno
        self.mmap, self.munmap = libc.mmap, libc.munmap
        self.advice: list[int] = []

    def madvise(self, address: int, size: int, advise: int) -> int:
        self.advice.append(advise)
        if advise == mapped_pages._MADV_POPULATE_READ:
            ctypes.set_errno(self.errno)
            return -1
        return int(self.real.madvise(address, size, advise))


def test_kernels_without_populate_advice_read_ahead_instead(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Linux 5.14 ``MADV_POPULATE_READ`` is ``EINVAL``: the pages are read ahead."""
    old_kernel = _PopulateRefused(errno.EINVAL)
    monkeypatch.setattr(mapped_pages, "_LIBC", old_kernel)
    monkeypatch.setattr(mapped_pages._Populate, "by_advice", True)
    mapped = MappedFile(path)
    assert mapped.view(100, 5000).tobytes() == CONTENT[100:5100]
    assert mapped.view(0, 10).tobytes() == CONTENT[:10]
    assert old_kernel.advice.count(mapped_pages._MADV_POPULATE_READ) == 1
    assert mapped_pages._Populate.by_advice is False


def test_other_populate_failures_are_os_errors(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped_pages, "_LIBC", _PopulateRefused(errno.EIO))
    monkeypatch.setattr(mapped_pages._Populate, "by_advice", True)
    with pytest.raises(OSError, match="madvise"):
        MappedFile(path).view(0, 10)


def test_threads_viewing_files_at_once_see_their_bytes(tmp_path: Path) -> None:
    """Pool threads map, view and release chunks of the same files concurrently (the
    chunk cache's reads and read-ahead), some of them as the files are replaced."""
    files = MappedFiles()
    contents = {tmp_path / f"{i}.log": os.urandom(3 * 4096 + 7 * i) for i in range(3)}
    for path, content in contents.items():
        path.write_bytes(content)

    def read(step: int) -> None:
        path = tmp_path / f"{step % 3}.log"
        if step % 50 == 49:  # a copy written again: same bytes, a new file
            replacement = path.with_suffix(f".{step}.tmp")
            replacement.write_bytes(contents[path])
            replacement.rename(path)
        mapped = files.open(path)
        offset = (step * 4096) % mapped.size
        length = min(4096 + step, mapped.size - offset)
        assert mapped.view(offset, length).tobytes() == contents[path][offset : offset + length]

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(read, range(400)))
