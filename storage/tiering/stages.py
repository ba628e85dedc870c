"""Running a pipeline stage as a Spark job, with a progress bar in a terminal.

A stage is a list of picklable descriptors and a ``mapPartitions`` function; the descriptors
are dealt out in order to at most one Spark task (RDD partition) per core, so Spark spreads
them over every core or executor and retries a lost task elsewhere. The driver's event loop
keeps running while a stage runs (the job is submitted from a worker thread), so the metadata
consumer stays live and the progress bar is fed from Spark's status tracker.

A failed job returns only once its other tasks have ended. Spark fails a job as soon as one
task fails for good and only then kills the others; a killed PySpark task's worker runs on
until Spark destroys it (``spark.python.task.killTimeout``, 2 s, after the kill). Such a
task could still announce a segment (COPY_SEGMENT_STARTED, :mod:`.tier_stage`) or upload
one after the cycle had moved on, even after the next cycle's clean-up had passed it. An
integration test that kills a worker mid-upload saw exactly that: a STARTED copy of the failed
cycle left behind by the next one. When Spark cannot say that every task has ended, the
failure is raised as :class:`UnsettledJobError`, and the job's copies are then left to its
deadline (:mod:`.cleanup`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from storage.config import ConfigError
from storage.console import report_console
from storage.log_event import event
from storage.spark_workers import use_workers_python
from storage.tiering.report import format_bytes

__all__ = ["SparkStageRunner", "StageRunner", "UnsettledJobError"]

T = TypeVar("T")
R = TypeVar("R")

_POLL_SECONDS = 0.25
_TASKS_PER_CORE = 1
"""Each task costs the Spark JVM some 6-12 ms of CPU (scheduling, the Python worker's
protocol, the status store) whatever it does, and a task uploads one partition while it
reads the next (:mod:`.tier_stage`), so one task per core keeps every core busy."""
_SETTLE_SECONDS = 60.0
"""How long a failed job's other tasks may take to end (Spark's kill timeout and a worker's
destruction take seconds); past it the failure is raised anyway, with a warning."""
_group_numbers = itertools.count()

log = logging.getLogger(__name__)


class UnsettledJobError(Exception):
    """A job failed and some of its tasks may still be running: Spark could not say, or
    they outlived the wait for them."""


class StageRunner(Protocol):
    """Runs ``func`` over ``items`` in tasks of one or more items; returns every result."""

    @property
    def parallelism(self) -> int:
        """How many tasks run at once (to share the copy quota between them)."""
        ...

    async def run(
        self,
        description: str,
        items: Sequence[T],
        func: Callable[[Iterator[T]], Iterator[R]],
        *,
        total_bytes: int,
    ) -> list[R]:
        """:raises UnsettledJobError: the job failed and its tasks may still run.
        :raises Exception: what the Spark job raised when a task failed for good (every
            task of the job has ended)."""
        ...


class SparkStageRunner:
    """Stages as jobs of one long-lived SparkSession, which must not run speculative tasks.

    :param console: where the progress bar goes; none is drawn unless it is a terminal.
    :raises ConfigError: the session has ``spark.speculation=true``.
    """

    def __init__(self, spark: Any, *, console: Console | None = None) -> None:
        self._sc = spark.sparkContext
        if str(self._sc.getConf().get("spark.speculation")).lower() == "true":
            raise ConfigError(
                "spark.speculation is true: Spark would run a copy task twice at once, and "
                "the losing attempt would announce and upload copies nobody finishes; set "
                "spark.speculation=false for the tiering pipeline"
            )
        self._console = console or report_console(stderr=True)
        use_workers_python(self._sc)

    @property
    def parallelism(self) -> int:
        return max(1, int(self._sc.defaultParallelism))

    async def run(
        self,
        description: str,
        items: Sequence[T],
        func: Callable[[Iterator[T]], Iterator[R]],
        *,
        total_bytes: int,
    ) -> list[R]:
        if not items:
            return []
        group = f"tierproxy-{next(_group_numbers)}"
        tasks = min(len(items), _TASKS_PER_CORE * self.parallelism)
        job: asyncio.Future[list[R]] = asyncio.ensure_future(
            asyncio.to_thread(self._collect, group, description, list(items), tasks, func)
        )
        if self._console.is_terminal:
            await self._show_progress(job, group, description, tasks, total_bytes)
        return await job

    def _collect(
        self,
        group: str,
        description: str,
        items: list[T],
        tasks: int,
        func: Callable[[Iterator[T]], Iterator[R]],
    ) -> list[R]:
        self._sc.setJobGroup(group, f"tierproxy: {description}", interruptOnCancel=True)
        try:
            result: list[R] = self._sc.parallelize(items, tasks).mapPartitions(func).collect()
            return result
        except Exception as err:
            if not self._settle(group, description):
                raise UnsettledJobError(f"the {description} job failed: {err}") from err
            raise
        except BaseException:
            self._settle(group, description)
            raise
        finally:
            self._sc.setLocalProperty("spark.jobGroup.id", None)

    def _settle(self, group: str, description: str) -> bool:
        """Cancel ``group``'s jobs and wait for their tasks to end (see the module's
        docstring); whether they all did. A Spark that cannot answer (its JVM gone) is
        logged, not raised, so the job's own failure is what the caller sees."""
        try:
            self._sc.cancelJobGroup(group)
            return self._wait_for_tasks_to_end(group, description)
        except Exception as err:
            event(
                log,
                logging.WARNING,
                "tiering.spark.job_unsettled",
                msg=f"the {description} job failed; Spark cannot say whether its tasks ended: "
                f"{err}",
                job=description,
            )
            return False

    def _wait_for_tasks_to_end(self, group: str, description: str) -> bool:
        """Block until no task of ``group``'s jobs runs (True), or the wait ends (False)."""
        deadline = time.monotonic() + _SETTLE_SECONDS
        while (running := self._running_tasks(group)) > 0:
            if time.monotonic() > deadline:
                event(
                    log,
                    logging.WARNING,
                    "tiering.spark.tasks_still_running",
                    msg=f"the {description} job failed; {running} of its tasks still run after "
                    f"{_SETTLE_SECONDS:.0f} s",
                    job=description,
                    running=running,
                )
                return False
            time.sleep(_POLL_SECONDS)
        return True

    def _running_tasks(self, group: str) -> int:
        return sum(stage.numActiveTasks for stage in self._stages(group))

    def _stages(self, group: str) -> Iterator[Any]:
        tracker = self._sc.statusTracker()
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    yield stage

    def _completed_tasks(self, group: str) -> int:
        return sum(stage.numCompletedTasks for stage in self._stages(group))

    async def _show_progress(
        self,
        job: asyncio.Future[list[R]],
        group: str,
        description: str,
        tasks: int,
        total_bytes: int,
    ) -> None:
        started = time.monotonic()
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[bytes]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self._console, transient=False) as progress:
            task = progress.add_task(description, total=tasks, bytes="", rate="")
            while not job.done():
                await asyncio.wait([job], timeout=_POLL_SECONDS)
                done = tasks if job.done() else min(self._completed_tasks(group), tasks)
                moved = total_bytes * done / tasks
                elapsed = max(time.monotonic() - started, 1e-6)
                progress.update(
                    task,
                    completed=done,
                    bytes=f"{format_bytes(moved)} of {format_bytes(total_bytes)}",
                    rate=f"{moved / elapsed / 1e6:.1f} MB/s",
                )
