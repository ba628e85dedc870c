"""Where each partition stands: the broker's local log next to the remote log.

``tierproxy status`` prints, per partition of every tiered topic (or of the topics asked
for), the broker's local log start and end (its log start offset and high watermark), the
remote log start and end and its segments and bytes (from the metadata topic), the copy
lag: offsets and estimated bytes between the remote log end and the last stable offset,
and the offsets that are *missing*: deleted by the broker before they were tiered, either
between the remote log end and the broker's log start (a gap: the remote tier below it is
not served) or inside the remote log (a hole: copies below it are not served).

What the broker refuses is said, never skipped: the rows of a topic whose configs the
principal may not read carry that ACL as their error, and :func:`hidden_topics` names the
tiered topics it may not even see.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from protocol.errors import KafkaError
from storage.kafka_acls import denied
from storage.kafka_client import KafkaClient, TopicMetadata
from storage.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from storage.rlmm.cache import RemoteLogMetadataCache
from storage.rlmm.config import DEFAULT_TOPIC_NAME
from storage.tiering.planner import estimate_bytes
from storage.tiering.policy import BrokerConfigValue, TopicRules, resolve_policy
from storage.tiering.sampling import PartitionSample, sample_partitions

__all__ = ["PartitionStatus", "collect_status", "hidden_topics"]

_SAMPLE_BYTES = 16 * 1024
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
"""A ``[[topics]]`` pattern that is also a legal topic name, which Metadata can be asked for."""
_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
_STORED_AT_ONCE = 16
"""Manifests read at once for the stored bytes."""

StoredSize = Callable[[RemoteLogSegmentMetadata], Awaitable[int | None]]
"""A segment's bytes in storage (:meth:`storage.rsm.segments.SegmentStorage.stored_size`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    """One partition's local and remote log."""

    topic: str
    partition: int
    tiered: bool
    """The topic's policy has remote.storage.enable."""
    local_log_start: int
    local_log_end: int
    """The broker's high watermark (-1 when the broker did not answer)."""
    last_stable_offset: int
    remote_log_start: int | None
    remote_log_end: int | None
    segments: int
    remote_bytes: int
    lag_offsets: int
    lag_bytes: int
    """Estimated from the partition's average bytes per offset."""
    missing: tuple[tuple[int, int], ...] = ()
    """Offset ranges (first, last) that neither tier holds, below the broker's log start."""
    stored_bytes: int | None = None
    """Bytes the remote segments take in storage (compressed ones less than
    ``remote_bytes``); ``None`` when not asked."""
    error: str | None = None

    @property
    def missing_offsets(self) -> int:
        return sum(last - first + 1 for first, last in self.missing)


async def collect_status(
    client: KafkaClient,
    cache: RemoteLogMetadataCache,
    rules: TopicRules,
    *,
    topic_pattern: str | None = None,
    metadata_topic: str = DEFAULT_TOPIC_NAME,
    principal: str = "User:ANONYMOUS",
    stored_size: StoredSize | None = None,
) -> list[PartitionStatus]:
    """Status rows of tiered topics (and of any topic with remote data), by topic and partition.

    :param topic_pattern: only topics whose whole name matches this regular expression.
    :param principal: whom the broker sees, named in the error of a refused DescribeConfigs.
    :param stored_size: the bytes a segment takes in storage (``None``: as the broker had
        it), asked of every readable segment, a few at a time; by default not asked.
    """
    pattern = re.compile(topic_pattern) if topic_pattern else None
    metadata = await client.metadata(None)
    configs = await client.describe_configs(sorted(metadata.topics))
    chosen: list[tuple[TopicMetadata, bool]] = []
    for name, topic in sorted(metadata.topics.items()):
        if topic.error != KafkaError.NONE or topic.is_internal or name == metadata_topic:
            continue
        if pattern is not None and not pattern.fullmatch(name):
            continue
        broker = configs.get(name)
        values = (
            {
                k: BrokerConfigValue(value=v.value, is_topic_override=v.is_topic_override)
                for k, v in broker.items()
            }
            if isinstance(broker, dict)
            else None
        )
        tiered = resolve_policy(name, rules, values).remote_storage_enable
        has_remote = any(
            cache.topic_id_partition_by_id(topic.topic_id, p.partition) is not None
            for p in topic.partitions
        )
        if tiered or has_remote:
            chosen.append((topic, tiered))
    by_leader: dict[int, dict[tuple[str, int], int]] = {}
    for topic, _ in chosen:
        for p in topic.partitions:
            tp = TopicIdPartition(topic_id=topic.topic_id, topic=topic.name, partition=p.partition)
            end = cache.remote_log_end_offset(tp)
            if p.leader_id >= 0:
                by_leader.setdefault(p.leader_id, {})[(topic.name, p.partition)] = (
                    end + 1 if end is not None else 0
                )
    sampled = await asyncio.gather(
        *(
            sample_partitions(client, leader, offsets, sample_bytes=_SAMPLE_BYTES)
            for leader, offsets in by_leader.items()
        )
    )
    samples = {key: sample for group in sampled for key, sample in group.items()}
    refused = {name for name, found in configs.items() if found == _DENIED}
    partitions = [
        (TopicIdPartition(topic_id=topic.topic_id, topic=topic.name, partition=p.partition), tiered)
        for topic, tiered in chosen
        for p in topic.partitions
    ]
    rows = [
        _with_refusal(
            _row(tp, tiered, cache, samples.get((tp.topic, tp.partition))),
            denied("DescribeConfigs", tp.topic, principal) if tp.topic in refused else None,
        )
        for tp, tiered in partitions
    ]
    if stored_size is None:
        return rows
    return [
        replace(row, stored_bytes=await _stored(tp, cache, stored_size))
        for (tp, _tiered), row in zip(partitions, rows, strict=True)
    ]


async def _stored(tp: TopicIdPartition, cache: RemoteLogMetadataCache, size: StoredSize) -> int:
    """Bytes the partition's readable segments take in storage."""
    slots = asyncio.Semaphore(_STORED_AT_ONCE)
    segments = cache.segments(tp, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})

    async def one(segment: RemoteLogSegmentMetadata) -> int:
        async with slots:
            stored = await size(segment)
        return segment.segment_size_in_bytes if stored is None else stored

    return sum(await asyncio.gather(*(one(s) for s in segments)))


def _with_refusal(row: PartitionStatus, refusal: str | None) -> PartitionStatus:
    """``row`` with ``refusal`` as its error, unless it has one already."""
    return row if refusal is None or row.error is not None else replace(row, error=refusal)


async def hidden_topics(client: KafkaClient, rules: TopicRules, principal: str) -> list[str]:
    """A line for each ``[[topics]]`` pattern that is a topic name the broker hides from
    ``principal`` (Metadata answers TOPIC_AUTHORIZATION_FAILED: it lacks DESCRIBE, which the
    READ that ``status`` needs gives). A pattern that is not a plain name cannot be asked for:
    the topics it would match are simply not listed to a principal without DESCRIBE."""
    names = [
        rule.pattern.pattern for rule in rules.rules if _TOPIC_NAME.fullmatch(rule.pattern.pattern)
    ]
    if not names:
        return []
    found = (await client.metadata(names)).topics
    return [
        f"{principal} lacks READ on topic {name!r} (Metadata answered TOPIC_AUTHORIZATION_FAILED: "
        "the topic is invisible to it); add that ACL (docs/operations.md lists what each part "
        "needs)"
        for name in names
        if (topic := found.get(name)) is not None
        and topic.error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]


def _row(
    tp: TopicIdPartition,
    tiered: bool,
    cache: RemoteLogMetadataCache,
    sample: PartitionSample | None,
) -> PartitionStatus:
    segments = cache.segments(tp, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})
    remote_start = cache.remote_log_start_offset(tp)
    remote_end = cache.remote_log_end_offset(tp)
    remote_bytes = sum(s.segment_size_in_bytes for s in segments)
    offsets = sum(s.end_offset - s.start_offset + 1 for s in segments)
    error = None
    log_start = log_end = last_stable = -1
    ratio = remote_bytes / offsets if offsets else None
    if sample is not None and sample.error == KafkaError.NONE:
        log_start, log_end, last_stable = (
            sample.log_start,
            sample.high_watermark,
            sample.last_stable,
        )
        ratio = ratio or sample.bytes_per_offset
    else:
        error = "no answer from the leader" if sample is None else "Fetch failed"
    copied_to = max(remote_end + 1 if remote_end is not None else 0, log_start, 0)
    lag = max(0, last_stable - copied_to) if last_stable >= 0 else 0
    missing = list(cache.remote_log_holes(tp))
    if remote_end is not None and log_start > remote_end + 1:
        missing.append((remote_end + 1, log_start - 1))
    return PartitionStatus(
        topic=tp.topic,
        partition=tp.partition,
        tiered=tiered,
        local_log_start=log_start,
        local_log_end=log_end,
        last_stable_offset=last_stable,
        remote_log_start=remote_start,
        remote_log_end=remote_end,
        segments=len(segments),
        remote_bytes=remote_bytes,
        lag_offsets=lag,
        lag_bytes=estimate_bytes(start=0, end=lag, bytes_per_offset=ratio or 0.0),
        missing=tuple(missing),
        error=error,
    )
