"""The data source's options, parsed once on the driver into plain values.

The names and forms are those of Spark's Kafka source, so a job switches by changing only
``format("kafka")`` to ``format("tierproxy")`` (and adding the settings file):

- exactly one of ``subscribe`` (a comma-separated list; ``topic`` is accepted too),
  ``subscribePattern`` and ``assign`` (JSON ``{"topic": [0, 1]}``: those partitions only);
- ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON per partition,
  ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest);
- ``startingTimestamp`` / ``endingTimestamp`` (one timestamp for every partition) and
  ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (JSON per partition); as in
  Spark, a timestamp option wins over the offsets option, and a partition with no record
  at or after the timestamp starts (or ends) at the latest offset;
- ``includeHeaders``; ``isolationLevel`` or Spark's ``kafka.isolation.level``;
- ``includeLocal`` (default true): also read the broker's untiered tail;
- ``minPartitions``: at least about that many Spark tasks (slices are cut smaller);
- ``failOnDataLoss`` (default true): fail when offsets asked for are no longer stored (aged
  out of the remote tier and the broker); ``false`` logs a warning and reads what is left;
- streaming: ``maxOffsetsPerTrigger`` (records per micro-batch, shared among partitions in
  proportion to their backlog), ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` (wait for
  that many new records, at most that long: ``15m`` by default), as Spark's Kafka source;
- Spark's ``kafka.*`` consumer settings other than the ones named here are accepted and
  ignored (there is no consumer), except those Spark refuses, refused the same way;
- ``config``: the ``tierproxy.toml`` whose storage, metadata and ``upstream.*`` settings are
  used; ``kafka.bootstrap.servers`` and any ``tierproxy.<setting>`` override it.

Partitions a JSON bound does not name take the default bound (earliest to start, latest to
end), where Spark would refuse the query. Spark's batch-only and stream-only options are
accepted in both kinds of query, where Spark ignores them with a warning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from storage.config import ConfigError

__all__ = ["Bound", "BoundKind", "Bounds", "SourceOptions", "parse_options"]

DEFAULT_MAX_SLICE_BYTES: Final = 256 * 1024 * 1024
"""Most bytes of the remote tier one Spark task reads: a larger segment is cut into byte
ranges, and consecutive smaller ones of a partition are read by one task (Kafka's default
segment is 1 GiB). A task reads its range a GET at a time, so this bounds time, not memory:
every task of a Python data source costs Spark 30 to 40 ms of a core besides its rows,
about the time a core takes to read 6 MiB."""

_SETTING_PREFIX: Final = "tierproxy."
_EARLIEST: Final = -2
_LATEST: Final = -1
_DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000
_TIME_UNITS_MS: Final = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
"""Spark's ``timeStringAsMs`` units (a bare number is milliseconds)."""
_REFUSED_KAFKA_SETTINGS: Final = {
    "kafka.auto.offset.reset": "set startingOffsets to earliest or latest instead",
    "kafka.key.deserializer": "keys are bytes: deserialize them with DataFrame operations",
    "kafka.value.deserializer": "values are bytes: deserialize them with DataFrame operations",
    "kafka.enable.auto.commit": "offsets are tracked by the query, not committed",
    "kafka.interceptor.classes": "interceptors could change the records",
}
"""The consumer settings Spark's Kafka source refuses (``validateGeneralOptions``)."""


class BoundKind(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """Where a partition's range starts or ends, before it is resolved to an offset."""

    kind: BoundKind
    value: int = 0


EARLIEST: Final = Bound(kind=BoundKind.EARLIEST)
LATEST: Final = Bound(kind=BoundKind.LATEST)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """One bound for every partition, and exceptions per ``(topic, partition)``."""

    default: Bound
    partitions: Mapping[tuple[str, int], Bound] = field(default_factory=dict)

    def of(self, topic: str, partition: int) -> Bound:
        return self.partitions.get((topic, partition), self.default)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    topics: tuple[str, ...]
    pattern: str | None
    assigned: Mapping[str, frozenset[int]] | None
    """``assign``: the only partitions read, per topic (``topics`` names their topics)."""
    starting: Bounds
    ending: Bounds
    include_local: bool
    read_committed: bool
    include_headers: bool
    max_slice_bytes: int
    min_partitions: int | None
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    config_path: str | None
    settings: Mapping[str, str]
    """Setting overrides (Kafka's dotted names), as given: typed when loaded
    (:func:`storage.spark_source.settings.load_source_settings`)."""

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def reads(self, topic: str, partition: int) -> bool:
        """Whether a partition of a subscribed topic is read (``assign`` names some only)."""
        return self.assigned is None or partition in self.assigned.get(topic, ())


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    """Read Spark's options (their names are case-insensitive, as Spark's are).

    :raises ConfigError: naming the option that is missing or malformed.
    """
    opts = {key.lower(): value for key, value in options.items()}
    _refuse_kafka_settings(opts)
    topics = tuple(
        t.strip()
        for t in (opts.get("subscribe") or opts.get("topic") or "").split(",")
        if t.strip()
    )
    pattern = opts.get("subscribepattern")
    assigned = _assigned(opts["assign"]) if "assign" in opts else None
    if [bool(topics), bool(pattern), assigned is not None].count(True) != 1:
        raise ConfigError(
            "give exactly one of the options 'subscribe', 'subscribePattern' and 'assign'"
        )
    if assigned is not None:
        topics = tuple(sorted(assigned))
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as err:
            raise ConfigError(f"subscribePattern {pattern!r} is not a regex: {err}") from err
    isolation = opts.get("isolationlevel") or opts.get("kafka.isolation.level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ConfigError(
            f"isolationLevel must be read_uncommitted or read_committed, not {isolation!r}"
        )
    min_offsets = _optional_positive(opts, "minoffsetspertrigger")
    max_offsets = _optional_positive(opts, "maxoffsetspertrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise ConfigError(
            f"minOffsetsPerTrigger ({min_offsets}) is higher than maxOffsetsPerTrigger "
            f"({max_offsets})"
        )
    return SourceOptions(
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=_bounds(opts, "starting", LATEST if streaming else EARLIEST),
        ending=_bounds(opts, "ending", LATEST),
        include_local=_flag(opts, "includelocal", default=True),
        read_committed=isolation == "read_committed",
        include_headers=_flag(opts, "includeheaders", default=False),
        max_slice_bytes=_positive(opts, "maxslicebytes", DEFAULT_MAX_SLICE_BYTES),
        min_partitions=_optional_positive(opts, "minpartitions"),
        fail_on_data_loss=_flag(opts, "failondataloss", default=True),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_ms(opts.get("maxtriggerdelay")),
        config_path=opts.get("config"),
        settings=_settings(opts),
    )


def _bounds(opts: Mapping[str, str], side: str, default: Bound) -> Bounds:
    """Spark's precedence: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``, then
    ``<side>Offsets``."""
    if f"{side}timestamp" in opts:
        stamp = _integer(opts, f"{side}timestamp")
        return Bounds(default=Bound(kind=BoundKind.TIMESTAMP, value=stamp))
    by_time = opts.get(f"{side}offsetsbytimestamp")
    if by_time is not None:
        per = _per_partition(by_time, f"{side}OffsetsByTimestamp")
        return Bounds(
            default=default,
            partitions={tp: Bound(kind=BoundKind.TIMESTAMP, value=v) for tp, v in per.items()},
        )
    spec = opts.get(f"{side}offsets", default.kind.value).strip()
    if spec.lower() in ("earliest", "latest"):
        if side == "ending" and spec.lower() == "earliest":
            raise ConfigError("endingOffsets cannot be 'earliest'")
        return Bounds(default=Bound(kind=BoundKind(spec.lower())))
    per = _per_partition(spec, f"{side}Offsets")
    if side == "ending" and _EARLIEST in per.values():
        raise ConfigError("endingOffsets cannot use -2 (earliest)")
    return Bounds(default=default, partitions={tp: _offset_bound(v) for tp, v in per.items()})


def _offset_bound(value: int) -> Bound:
    if value == _EARLIEST:
        return EARLIEST
    if value == _LATEST:
        return LATEST
    if value < 0:
        raise ConfigError(f"offset {value} is neither -2, -1 nor an offset")
    return Bound(kind=BoundKind.OFFSET, value=value)


def _per_partition(text: str, name: str) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 23}}`` as ``{("topic", 0): 23}``."""
    try:
        parsed = json.loads(text)
        return {
            (str(topic), int(partition)): int(value)
            for topic, partitions in parsed.items()
            for partition, value in partitions.items()
        }
    except (ValueError, AttributeError, TypeError) as err:
        raise ConfigError(
            f'{name} must be earliest, latest or JSON like {{"topic": {{"0": 23}}}}, not {text!r}'
        ) from err


def _refuse_kafka_settings(opts: Mapping[str, str]) -> None:
    for key, why in _REFUSED_KAFKA_SETTINGS.items():
        if key in opts:
            name = key.removeprefix("kafka.")
            raise ConfigError(f"Kafka option '{name}' is not supported: {why}")


def _assigned(text: str) -> dict[str, frozenset[int]]:
    """``{"topic": [0, 1]}`` as ``{"topic": frozenset({0, 1})}``."""
    try:
        parsed = json.loads(text)
        assigned = {
            str(topic): frozenset(int(p) for p in numbers) for topic, numbers in parsed.items()
        }
    except (ValueError, AttributeError, TypeError) as err:
        raise ConfigError(f'assign must be JSON like {{"topic": [0, 1]}}, not {text!r}') from err
    if not assigned or not all(assigned.values()):
        raise ConfigError(f"assign names no partition: {text!r}")
    return assigned


def _duration_ms(text: str | None) -> int:
    """A duration as Spark writes them (``15m``, ``30s``, ``500``: milliseconds)."""
    if text is None:
        return _DEFAULT_MAX_TRIGGER_DELAY_MS
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if found is None or found.group(2) not in ("", *_TIME_UNITS_MS):
        raise ConfigError(f"maxTriggerDelay must be a duration like 15m or 30s, not {text!r}")
    return int(int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2) or "ms", 1))


def _flag(opts: Mapping[str, str], key: str, *, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _integer(opts: Mapping[str, str], key: str) -> int:
    try:
        return int(opts[key])
    except ValueError as err:
        raise ConfigError(f"option {key} must be an integer, not {opts[key]!r}") from err


def _optional_positive(opts: Mapping[str, str], key: str) -> int | None:
    return _positive(opts, key, 1) if key in opts else None


def _positive(opts: Mapping[str, str], key: str, default: int) -> int:
    value = _integer(opts, key) if key in opts else default
    if value <= 0:
        raise ConfigError(f"option {key} must be positive, not {value}")
    return value


def _settings(opts: Mapping[str, str]) -> dict[str, str]:
    """``tierproxy.<setting>`` options and ``kafka.bootstrap.servers``."""
    settings = {
        key.removeprefix(_SETTING_PREFIX): value
        for key, value in opts.items()
        if key.startswith(_SETTING_PREFIX)
    }
    if "kafka.bootstrap.servers" in opts:
        settings["bootstrap.servers"] = opts["kafka.bootstrap.servers"]
    return settings
