"""SparkStageRunner's failure path with a stand-in SparkContext (the real one runs in
``tests/integration/tiering/test_stages.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from storage.config import ConfigError
from storage.tiering.stages import SparkStageRunner, UnsettledJobError


class _Conf:
    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self._settings = settings or {}

    def get(self, key: str) -> str | None:
        return self._settings.get(key)


class _FailingJob:
    def mapPartitions(self, func: Any) -> _FailingJob:
        return self

    def collect(self) -> list[int]:
        raise RuntimeError("a task failed for good")


class _GoneContext:
    """A SparkContext whose job fails and whose JVM then answers nothing."""

    defaultParallelism = 2

    def getConf(self) -> _Conf:
        return _Conf()

    def setJobGroup(self, *args: Any, **kwargs: Any) -> None:
        pass

    def setLocalProperty(self, key: str, value: str | None) -> None:
        pass

    def parallelize(self, items: list[int], tasks: int) -> _FailingJob:
        return _FailingJob()

    def cancelJobGroup(self, group: str) -> None:
        raise ConnectionError("the JVM is gone")


class _Session:
    sparkContext = _GoneContext()


def _same(items: Iterator[int]) -> Iterator[int]:
    return items


async def test_the_jobs_failure_is_raised_when_spark_cannot_cancel_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nobody can say the tasks ended: the failure says so, and the copies are left to their
    deadline (the cycle's clean-up does not treat them as its own ended job's)."""
    runner = SparkStageRunner(_Session())
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(UnsettledJobError, match="failed for good") as raised,
    ):
        await runner.run("copy", [1, 2], _same, total_bytes=0)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "Spark cannot say whether its tasks ended: the JVM is gone" in caplog.text


class _SpeculativeContext(_GoneContext):
    def getConf(self) -> _Conf:
        return _Conf({"spark.speculation": "true"})


class _SpeculativeSession:
    sparkContext = _SpeculativeContext()


def test_a_session_with_speculative_tasks_is_refused() -> None:
    """A speculative attempt of a copy task would announce and upload the same partitions
    under other ids at the same time as the first; the runner refuses such a session."""
    with pytest.raises(ConfigError, match=r"spark\.speculation"):
        SparkStageRunner(_SpeculativeSession())
