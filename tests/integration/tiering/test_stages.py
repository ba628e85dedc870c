"""SparkStageRunner on local[2]: descriptors dealt out to at most one task per core, every
result returned in order, and a failed job raised only once its other tasks have ended."""

from __future__ import annotations

import asyncio
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


def _fail_or_beat(items: Iterator[str]) -> Iterator[str]:
    """Fail at once for ``"fail"``; otherwise append a beat to the file named, five times a
    second for ten seconds (a task still working when the other fails)."""
    for item in items:
        if item == "fail":
            raise RuntimeError("this task fails")
        for _ in range(50):
            with Path(item).open("a") as beats:
                beats.write(".")
            time.sleep(0.2)
        yield item


async def test_a_failed_job_returns_once_its_other_tasks_have_ended(
    spark: Any, tmp_path: Path
) -> None:
    """A task of a failed job that kept running could still announce or upload a segment
    after the cycle had moved on; the runner raises only once it has ended."""
    beats = tmp_path / "beats"
    with pytest.raises(Exception):  # noqa: B017 (py4j's error wraps the task's)
        await SparkStageRunner(spark).run(
            "fail", [str(beats), "fail"], _fail_or_beat, total_bytes=0
        )
    seen = beats.read_text() if beats.exists() else ""
    await asyncio.sleep(1.0)  # five beats, had the task survived the job
    assert (beats.read_text() if beats.exists() else "") == seen
