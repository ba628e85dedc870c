"""The one atomic file writer: the whole file or none, and no temporary left behind."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from storage.durable import write_atomically


def test_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"old")
    write_atomically(path, b"new", sync_directory=True)
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomically(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.parametrize("size", [4 * 1024 * 1024, 9 * 1024 * 1024 + 123])
def test_a_direct_write_holds_exactly_the_data(tmp_path: Path, size: int) -> None:
    path = tmp_path / "segment.log"
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    write_atomically(path, memoryview(data)[1:], direct=True)
    assert path.read_bytes() == data[1:]
    assert [p.name for p in tmp_path.iterdir()] == ["segment.log"]


def test_a_small_direct_write_is_buffered(tmp_path: Path) -> None:
    path = tmp_path / "index"
    write_atomically(path, b"entries", direct=True)
    assert path.read_bytes() == b"entries"


def test_a_direct_write_from_a_mapped_file_holds_exactly_the_data(tmp_path: Path) -> None:
    source = tmp_path / "spill"
    data = bytes(range(256)) * (5 * 1024 * 1024 // 256) + b"tail"
    source.write_bytes(data)
    with source.open("rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    with mapped:
        view = memoryview(mapped)
        write_atomically(tmp_path / "from-start", view, direct=True)
        write_atomically(tmp_path / "unaligned", view[100:], direct=True)
        view.release()
    assert (tmp_path / "from-start").read_bytes() == data
    assert (tmp_path / "unaligned").read_bytes() == data[100:]
