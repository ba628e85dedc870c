"""storage.spark_workers: Spark's order for the workers' Python, then the driver's own."""

from __future__ import annotations

import sys

import pytest

from storage.spark_workers import use_workers_python


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def get(self, key: str) -> str | None:
        return self._values.get(key)


class FakeContext:
    """What the function reads and sets of a ``SparkContext``."""

    def __init__(self, conf: dict[str, str], python_exec: str) -> None:
        self._conf = FakeConf(conf)
        self.pythonExec = python_exec

    def getConf(self) -> FakeConf:
        return self._conf


@pytest.mark.parametrize(
    ("conf", "env", "expected"),
    [
        (
            {"spark.pyspark.python": "/opt/env/bin/python"},
            "/usr/bin/python3.12",
            "/opt/env/bin/python",
        ),
        ({}, "/usr/bin/python3.12", "/usr/bin/python3.12"),
        ({}, None, sys.executable),
    ],
    ids=["the setting", "the variable", "neither: this interpreter"],
)
def test_the_workers_python(
    conf: dict[str, str], env: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", env)
    context = FakeContext(conf, python_exec=env or "python3")  # as PySpark sets it
    assert use_workers_python(context) == expected
    assert context.pythonExec == expected
