"""PySpark's worker daemon, with the pipeline's task modules imported before it forks.

Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a Python worker
from it whenever a task finds no idle one. Each fresh worker then imports what the task
function needs: for the pipeline, the Kafka client, kio's message classes, the segment
builder and the storage managers. py-spy over a cycle of 256 MiB in 8 partitions
(``local[2]``) had a third of all Python worker samples in those imports (the import of
:mod:`storage.kafka_client` from :mod:`.fetch_stage` alone a sixth), paid again by every
worker Spark forks. Imported here once, every forked worker inherits them.

Spark runs this module instead of ``pyspark.daemon`` when ``spark.python.daemon.module``
names it (:func:`storage.tiering.job.build_spark` does). PySpark's rule for the daemon holds:
no thread may exist when it forks, and none of these imports starts one. The imported
objects are then frozen (``gc.freeze``), as :mod:`.worker` does in each worker, so the
collection PySpark runs after every task does not walk them.
"""

from __future__ import annotations

import gc

from pyspark.daemon import manager

import storage.rsm.factory
import storage.tiering.copy_stage
import storage.tiering.fetch_stage  # noqa: F401 (imported for the workers forked below)

__all__ = ["main"]


def main() -> None:
    """Freeze what the imports left, then run PySpark's daemon (forking workers) until Spark
    stops it."""
    gc.collect()
    gc.freeze()
    manager()


if __name__ == "__main__":
    main()
