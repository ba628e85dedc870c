"""``spark.read.format("tierproxy")`` and ``spark.readStream.format("tierproxy")``.

The driver plans (``partitions``): it opens a :class:`~storage.spark_source.catalog.Catalog`
(the metadata topic, the indexes, the broker's offsets), resolves the bounds, and returns
one input partition per task (consecutive slices of a partition). Executors read
(``read``): each task with the worker's storage manager or a Kafka client of its own. The
reader objects carry only the parsed options and settings, which pickle as plain values.

The stream's offsets are ``{"topic": {"partition": next offset}}``, the form of Spark's
Kafka source; every micro-batch is planned like a batch query over the offsets between
two of them, so a query that starts at the earliest remote offset runs on into live data
on one code path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows

from storage.spark_source.options import EARLIEST, LATEST, Bounds, SourceOptions, parse_options
from storage.spark_source.rate import TriggerDelay, rate_limit
from storage.spark_source.schema import kafka_schema
from storage.spark_source.settings import SourceSettings, load_source_settings
from storage.spark_workers import use_workers_python

if TYPE_CHECKING:
    from storage.spark_source.catalog import Catalog, PartitionInfo
    from storage.spark_source.planner import OffsetRanges

__all__ = ["TierproxyDataSource", "register"]

StreamOffset = dict[str, dict[str, int]]


class TierproxyDataSource(DataSource):
    """A topic's whole history, from the remote tier and the broker, as Spark's Kafka source
    gives it."""

    @classmethod
    def name(cls) -> str:
        return "tierproxy"

    def schema(self) -> Any:
        return kafka_schema(include_headers=self._options(streaming=False).include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        options = self._options(streaming=False)
        return TierproxyReader(options, load_source_settings(options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        options = self._options(streaming=True)
        return TierproxyStreamReader(options, load_source_settings(options))

    def _options(self, *, streaming: bool) -> SourceOptions:
        return parse_options(dict(self.options), streaming=streaming)


class _SliceReading:
    """What both readers do: plan on the driver, read slices on executors."""

    def __init__(self, options: SourceOptions, settings: SourceSettings) -> None:
        self.source_options = options
        self.settings = settings

    def _plan(self, ranges_of: Any) -> list[InputPartition]:
        # The driver's modules (the metadata manager, the Kafka client) load only here: every
        # query unpickles the reader in fresh Python workers, which need none of them.
        from storage.spark_source.catalog import open_catalog  # noqa: PLC0415
        from storage.spark_source.planner import plan_tasks  # noqa: PLC0415
        from storage.spark_source.worker import run  # noqa: PLC0415

        async def plan() -> list[InputPartition]:
            async with open_catalog(self.settings) as catalog:
                parts = await catalog.partitions(self.source_options)
                ranges = await ranges_of(catalog, parts)
                tasks = await plan_tasks(catalog, parts, ranges, self.source_options)
            return [InputPartition(task) for task in tasks]

        return run(plan())

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # The storage client (aiobotocore: most of a second to import) loads only where
        # slices are read, not in every worker that merely unpickles the source to plan.
        from storage.spark_source.read import read_task  # noqa: PLC0415

        return read_task(
            partition.value,
            self.settings,
            include_headers=self.source_options.include_headers,
        )


class TierproxyReader(_SliceReading, DataSourceReader):
    """A batch query over the offsets the starting and ending bounds stand for."""

    def partitions(self) -> Sequence[InputPartition]:
        from storage.spark_source.planner import resolve_offsets  # noqa: PLC0415 (driver only)

        options = self.source_options

        async def ranges(catalog: Catalog, parts: Sequence[PartitionInfo]) -> OffsetRanges:
            starts = await resolve_offsets(catalog, parts, options.starting, options)
            ends = await resolve_offsets(catalog, parts, options.ending, options)
            return {tp: (starts[tp], ends[tp]) for tp in starts}

        return self._plan(ranges)


class TierproxyStreamReader(_SliceReading, DataSourceStreamReader):
    """Micro-batches between the offsets of successive ``latestOffset`` calls, limited as
    Spark's Kafka source limits them (:mod:`storage.spark_source.rate`)."""

    def __init__(self, options: SourceOptions, settings: SourceSettings) -> None:
        super().__init__(options, settings)
        minimum = options.min_offsets_per_trigger
        self._delay = (
            None if minimum is None else TriggerDelay(minimum, options.max_trigger_delay_ms)
        )

    def initialOffset(self) -> StreamOffset:
        (initial,) = self._offsets(self.source_options.starting)
        return initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows`` or ``ReadMinRows`` from the options (PySpark has no composite
        limit: with both, ``latestOffset`` applies the minimum from the options)."""
        options = self.source_options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: StreamOffset | None = None, limit: Any = None) -> StreamOffset:
        if start is None or limit is None or isinstance(limit, ReadAllAvailable):
            # The engine's ReadAllAvailable (e.g. Trigger.AvailableNow) wins over the options.
            (latest,) = self._offsets(Bounds(default=LATEST))
            return latest
        latest, earliest = self._offsets(Bounds(default=LATEST), Bounds(default=EARLIEST))
        begins = {**_flat(earliest), **_flat(start)}  # a new partition from its earliest
        ends = _flat(latest)
        if self._delay is not None:
            backlog = sum(end - begins.get(key, end) for key, end in ends.items())
            if self._delay.waits(backlog, int(time.time() * 1000)):
                return start
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(limit.max_rows, begins, ends)
        return _nested(ends)

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        from storage.spark_source.planner import resolve_offsets  # noqa: PLC0415 (driver only)

        options = self.source_options

        async def ranges(catalog: Catalog, parts: Sequence[PartitionInfo]) -> OffsetRanges:
            # A partition created since the last micro-batch starts at its earliest offset.
            new = [p for p in parts if str(p.partition) not in start.get(p.topic, {})]
            earliest = await resolve_offsets(catalog, new, Bounds(default=EARLIEST), options)
            return {
                (p.topic, p.partition): (
                    _offset_of(start, p, default=earliest.get((p.topic, p.partition), 0)),
                    _offset_of(end, p, default=0),
                )
                for p in parts
            }

        return self._plan(ranges)

    def commit(self, end: StreamOffset) -> None:
        """Nothing to release: every micro-batch opens and closes its own clients."""

    def _offsets(self, *bounds: Bounds) -> list[StreamOffset]:
        """The offsets each of ``bounds`` stands for, in one planning step."""
        options = self.source_options
        from storage.spark_source.catalog import open_catalog  # noqa: PLC0415 (driver only)
        from storage.spark_source.planner import resolve_offsets  # noqa: PLC0415
        from storage.spark_source.worker import run  # noqa: PLC0415

        async def resolve() -> list[StreamOffset]:
            async with open_catalog(self.settings) as catalog:
                parts = await catalog.partitions(options)
                return [
                    _nested(await resolve_offsets(catalog, parts, each, options)) for each in bounds
                ]

        return run(resolve())


def _flat(offsets: StreamOffset) -> dict[tuple[str, int], int]:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }


def _nested(offsets: Mapping[tuple[str, int], int]) -> StreamOffset:
    nested: StreamOffset = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def _offset_of(offsets: StreamOffset, part: PartitionInfo, *, default: int) -> int:
    return int(offsets.get(part.topic, {}).get(str(part.partition), default))


def register(spark: Any) -> None:
    """Make ``format("tierproxy")`` known to ``spark`` (once per session).

    Its workers run ``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else this interpreter
    (:func:`storage.spark_workers.use_workers_python`): not whatever ``python3`` the
    ``PATH`` has, which may lack tierproxy. So do the session's Python functions registered
    after it.
    """
    use_workers_python(spark.sparkContext)
    spark.dataSource.register(TierproxyDataSource)
