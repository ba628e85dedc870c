"""Spill files: reused through the pool between cycles, never shared by two windows."""

from __future__ import annotations

from pathlib import Path

from storage.tiering.spill import POOL_DIR, discard_spill_pool, open_spill, recycle_spill


def _write(path: Path, data: bytes) -> None:
    with open_spill(path) as spill:
        spill.write(data)


def test_a_recycled_file_is_overwritten_and_cut_to_the_new_data(tmp_path: Path) -> None:
    first = tmp_path / "run-1" / "w0000000.bin"
    _write(first, b"a" * 100)
    inode = first.stat().st_ino
    recycle_spill(first.parent)
    assert not first.parent.exists()

    second = tmp_path / "run-2" / "w0000000.bin"
    _write(second, b"b" * 10)
    assert second.read_bytes() == b"b" * 10
    assert second.stat().st_ino == inode
    assert list((tmp_path / POOL_DIR).iterdir()) == []


def test_two_windows_never_take_the_same_file(tmp_path: Path) -> None:
    _write(tmp_path / "run-1" / "w0000000.bin", b"old")
    recycle_spill(tmp_path / "run-1")
    one, two = tmp_path / "run-2" / "w0000000.bin", tmp_path / "run-2" / "w0000001.bin"
    with open_spill(one) as a, open_spill(two) as b:
        a.write(b"one")
        b.write(b"two")
    assert (one.read_bytes(), two.read_bytes()) == (b"one", b"two")
    assert one.stat().st_ino != two.stat().st_ino


def test_the_pool_keeps_at_most_its_budget(tmp_path: Path) -> None:
    for window in range(3):
        _write(tmp_path / "run-1" / f"w{window:07d}.bin", b"x" * 100)
    recycle_spill(tmp_path / "run-1", pool_max_bytes=250)
    assert sorted(p.stat().st_size for p in (tmp_path / POOL_DIR).iterdir()) == [100, 100]
    assert not (tmp_path / "run-1").exists()


def test_closing_removes_the_pool_and_an_empty_default_root(tmp_path: Path) -> None:
    root = tmp_path / "tierproxy-tiering"
    _write(root / "run-1" / "w0000000.bin", b"x")
    recycle_spill(root / "run-1")
    discard_spill_pool(root)
    assert not root.exists()
