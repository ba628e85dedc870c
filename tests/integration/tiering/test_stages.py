"""SparkStageRunner on local[2]: descriptors dealt out to at most one task per core, every
result returned in order, and no task started before what the stage waits for (``after``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.tiering.stages import SparkStageRunner

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _same(items: Iterator[int]) -> Iterator[int]:
    return items


def _count(items: Iterator[int]) -> Iterator[int]:
    yield len(list(items))


async def test_items_share_at_most_one_task_per_core(spark: Any) -> None:
    runner = SparkStageRunner(spark)
    assert runner.parallelism == 2
    per_task = await runner.run("count", list(range(10)), _count, total_bytes=0)
    assert len(per_task) == 2  # tasks, for 10 items
    assert sum(per_task) == 10
    assert await runner.run("two", [7, 8], _count, total_bytes=0) == [1, 1]
    assert await runner.run("none", [], _count, total_bytes=0) == []


async def test_results_come_back_in_item_order(spark: Any) -> None:
    runner = SparkStageRunner(spark)
    assert await runner.run("same", list(range(9)), _same, total_bytes=0) == list(range(9))


def _started_at(items: Iterator[float]) -> Iterator[float]:
    list(items)
    yield time.time()


def _touch(paths: Iterator[str]) -> Iterator[str]:
    for path in paths:
        Path(path).touch()
        yield path
