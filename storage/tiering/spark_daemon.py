"""PySpark's worker daemon, with the pipeline's task modules imported before it forks.

Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a Python worker
from it whenever a task finds no idle one. Each fresh worker then imports what the task
function needs: for the pipeline, the Kafka client, kio's message classes, the segment
builder and the storage managers, paid again by every worker Spark forks. Imported here
once, every forked worker inherits them.

PySpark's own worker module is imported here too. Its daemon imports it in every forked
worker, after the fork, in case the import starts threads (pandas and pyarrow do when
imported); ``pyspark.worker`` imports neither at import time, and the test of this module
checks that no thread exists after these imports. Spark puts ``pyspark.zip`` first on the
workers' path, and modules in a zip are compiled from source at every import. Every
worker's first task also re-reads the directory of each zip on the path (PySpark's
``setup_spark_files`` calls ``importlib.invalidate_caches()`` when it adds the task's file
directory to the path). Workers are reused from task to task, but Spark ends those idle for
a minute, so a pipeline whose cycles are further apart than that, and every first cycle,
would pay both for each worker. The zip importers here re-read an archive only when it
changed (:class:`_StatCheckedZipImporter`).

Spark runs this module instead of ``pyspark.daemon`` when ``spark.python.daemon.module``
names it (:func:`storage.tiering.job.build_spark` does). PySpark's rule for the daemon holds:
no thread may exist when it forks, and none of these imports starts one. The imported
objects are then frozen (``gc.freeze``), as :mod:`.worker` does in each worker, so the
collection PySpark runs after every task does not walk them.
"""

from __future__ import annotations

import gc
import os
import sys
import zipimport

import pyspark.worker  # noqa: F401 (imported for the workers forked below, as are the next)
from pyspark.daemon import manager

import storage.rsm.factory
import storage.tiering.tier_stage  # noqa: F401
from storage.log_format import configure_from_environment

__all__ = ["main"]


def _stamp(path: str) -> tuple[int, int, int] | None:
    """What tells a changed file: inode, size and modification time (None: unreadable)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


class _StatCheckedZipImporter(zipimport.zipimporter):
    """A zip importer whose ``invalidate_caches`` re-reads the archive's directory only when
    the archive changed (or cannot be read), instead of every time."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._stamp = _stamp(self.archive)

    def invalidate_caches(self) -> None:
        stamp = _stamp(self.archive)
        if stamp is None or stamp != self._stamp:
            self._stamp = stamp
            super().invalidate_caches()


def check_zips_only_when_changed() -> None:
    """Put :class:`_StatCheckedZipImporter` in place of every zip importer on the path, and
    of the hook that makes new ones (a zip a task adds with ``addPyFile``)."""
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = _StatCheckedZipImporter(path)
    sys.path_hooks[:] = [
        _StatCheckedZipImporter if hook is zipimport.zipimporter else hook
        for hook in sys.path_hooks
    ]


def main() -> None:
    """Log as the pipeline does (its ``log.format``, which its workers inherit), freeze what
    the imports left, then run PySpark's daemon (forking workers) until Spark stops it."""
    configure_from_environment()
    check_zips_only_when_changed()
    gc.collect()
    gc.freeze()
    manager()


if __name__ == "__main__":
    main()
