"""storage.rsm.mapped_pages: read-only views of a file's pages, against the file's bytes."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.rsm import mapped_pages
from storage.rsm.mapped_pages import map_read_only

CONTENT = os.urandom(5 * 4096 + 321)

Mapper = Callable[[int, int, int], memoryview]


@pytest.fixture(scope="module")
def fd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    path = tmp_path_factory.mktemp("pages") / "segment.log"
    path.write_bytes(CONTENT)
    descriptor = os.open(path, os.O_RDONLY)
    yield descriptor
    os.close(descriptor)


def through_the_module(fd: int, offset: int, length: int) -> memoryview:
    """The mapping made where libc is not reached through ctypes (not Linux)."""
    lead = offset % 4096
    return mapped_pages._map_with_module(fd, offset - lead, length + lead)[lead:]


MAPPERS = [pytest.param(map_read_only, id="libc"), pytest.param(through_the_module, id="mmap")]


@pytest.mark.parametrize("mapper", MAPPERS)
@settings(max_examples=100, deadline=None)
@given(offset=st.integers(0, len(CONTENT) - 1), length=st.integers(1, len(CONTENT)))
def test_views_hold_the_files_bytes(mapper: Mapper, fd: int, offset: int, length: int) -> None:
    length = min(length, len(CONTENT) - offset)
    view = mapper(fd, offset, length)
    assert (len(view), view.readonly, view.format) == (length, True, "B")
    assert view.tobytes() == CONTENT[offset : offset + length]


def test_a_view_outlives_its_descriptor_and_unmaps_with_its_last_view(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(CONTENT)
    descriptor = os.open(path, os.O_RDONLY)
    view = map_read_only(descriptor, 4096 + 5, 100)
    os.close(descriptor)
    path.unlink()
    pages = weakref.ref(view.obj)
    part = view[10:20]
    del view
    assert pages() is not None
    assert part.tobytes() == CONTENT[4096 + 15 : 4096 + 25]
    del part
    assert pages() is None


@pytest.mark.parametrize(("offset", "length"), [(-1, 10), (0, 0)])
def test_impossible_mappings_are_the_callers_bug(fd: int, offset: int, length: int) -> None:
    with pytest.raises(ValueError):
        map_read_only(fd, offset, length)


def test_a_descriptor_that_cannot_be_mapped_is_an_os_error(tmp_path: Path) -> None:
    descriptor = os.open(tmp_path, os.O_RDONLY)  # a directory
    try:
        with pytest.raises(OSError):
            map_read_only(descriptor, 0, 10)
    finally:
        os.close(descriptor)
