"""Which Python Spark's workers run, for the tiering pipeline and the Spark data source.

PySpark's workers (the tasks of the RDD API and of Python data sources alike) start the
interpreter named by the driver's ``SparkContext.pythonExec``, which PySpark takes from
``PYSPARK_PYTHON`` alone, or else ``python3`` from the ``PATH``: a driver run from a
virtualenv whose ``bin`` is not on the ``PATH`` then starts workers without tierproxy
(``ModuleNotFoundError: No module named 'storage'``). Spark's documented setting
``spark.pyspark.python`` is ignored by an in-process driver.

:func:`use_workers_python` applies Spark's own order — ``spark.pyspark.python``, then
``PYSPARK_PYTHON`` — and, when the user set neither, the driver's own interpreter: the one
that has tierproxy. A cluster whose nodes keep it elsewhere sets ``spark.pyspark.python``
(docs/spark.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["use_workers_python"]


def use_workers_python(context: Any) -> str:
    """Make the Python functions that ``context`` (a ``SparkContext``) sends from now on run
    in the interpreter chosen as above; returns it."""
    python = (
        context.getConf().get("spark.pyspark.python")
        or os.environ.get("PYSPARK_PYTHON")
        or sys.executable
    )
    context.pythonExec = python
    return str(python)
