"""The Spark daemon's zip importers re-read an archive's directory only when it changed:
every worker's first task calls ``importlib.invalidate_caches()``, which otherwise re-reads
``pyspark.zip`` each time (:mod:`storage.tiering.spark_daemon`)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
import zipimport
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage.tiering.spark_daemon import _StatCheckedZipImporter


def _write_zip(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name}.py", source)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    read: Callable[[str], Any] = zipimport._read_directory  # type: ignore[attr-defined]

    def counted(archive: str) -> Any:
        reads.append(archive)
        return read(archive)

    monkeypatch.setattr(zipimport, "_read_directory", counted)
    return reads


def test_an_unchanged_archive_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "lib.zip"
    _write_zip(archive, {"first": "X = 1\n"})
    importer = _StatCheckedZipImporter(str(archive))
    reads = _counting(monkeypatch)
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert reads == []
    assert importer.find_spec("first") is not None


def test_a_changed_archive_is_read_again(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    _write_zip(archive, {"first": "X = 1\n"})
    importer = _StatCheckedZipImporter(str(archive))
    assert importer.find_spec("second") is None
    replacement = tmp_path / "new.zip"
    _write_zip(replacement, {"first": "X = 1\n", "second": "Y = 2\n"})
    os.replace(replacement, archive)
    importer.invalidate_caches()
    assert importer.find_spec("second") is not None


def test_a_vanished_archive_is_forgotten(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    _write_zip(archive, {"first": "X = 1\n"})
    importer = _StatCheckedZipImporter(str(archive))
    archive.unlink()
    importer.invalidate_caches()
    assert importer.find_spec("first") is None


_REPLACE = """
import sys, zipimport
sys.path.insert(0, sys.argv[1])
import first
from storage.tiering.spark_daemon import check_zips_only_when_changed
check_zips_only_when_changed()
print(type(sys.path_importer_cache[sys.argv[1]]).__name__)
print(zipimport.zipimporter in sys.path_hooks)
"""


def test_the_daemon_replaces_the_zip_importers_and_their_hook(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    _write_zip(archive, {"first": "X = 1\n"})
    done = subprocess.run(
        [sys.executable, "-c", _REPLACE, str(archive)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["_StatCheckedZipImporter", "False"]
