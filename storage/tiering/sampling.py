"""Where a partition stands at the broker, in one Fetch per leader for many partitions.

A Fetch answer carries the log start offset, the high watermark and the last stable offset
of each partition, and a few KiB of data from the asked offset tell how old the oldest
untiered batch is and how many bytes an offset takes. Brokers differ in what they report:
Tansu's ListOffsets LATEST may be the last batch's base offset, so the log end is always
the Fetch high watermark; a missing LSO (-1) means the high watermark. An offset below the
log start is out of range; the partition is then asked again at its ListOffsets EARLIEST.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from protocol.errors import KafkaError
from protocol.records import CorruptRecordBatchError, iter_batches, parse_batch_header
from storage.kafka_client import EARLIEST_TIMESTAMP, FetchTarget, KafkaClient

__all__ = ["PartitionSample", "sample_figures", "sample_partitions"]

_FETCH_LIMIT_BYTES = 64 * 1024 * 1024
_MAX_WAIT_MS = 10
"""Tansu answers nothing to a zero wait; Kafka answers at once with ``min_bytes=0``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSample:
    """A partition's offsets at the broker and what the sampled batches say."""

    log_start: int
    high_watermark: int
    last_stable: int
    first_max_timestamp: int | None
    """Max timestamp of the first batch at or after the asked offset (``None``: no data)."""
    bytes_per_offset: float | None
    boundary_epoch: int | None = None
    """Partition leader epoch of the broker's batch holding the asked boundary offset."""
    error: KafkaError = KafkaError.NONE


def sample_figures(records: bytes, from_offset: int = 0) -> tuple[int, float] | None:
    """The max timestamp of the first batch ending at or after ``from_offset`` and the bytes
    per offset of the batches from there, in a Fetch sample.

    A sample cut inside that batch still has its header, which gives both.
    """
    size = offsets = 0
    first_ts: int | None = None
    after = 0
    try:
        for position, header in iter_batches(records):
            after = position + header.size
            if header.last_offset < from_offset:
                continue
            if first_ts is None:
                first_ts = header.max_timestamp
            size += header.size
            offsets += header.last_offset_delta + 1
        if first_ts is None:
            header = parse_batch_header(records, after)
            if header.last_offset < from_offset:
                return None
            return header.max_timestamp, header.size / (header.last_offset_delta + 1)
    except CorruptRecordBatchError:
        return None
    return first_ts, size / offsets


def _boundary_epoch(records: bytes, boundary: int) -> int | None:
    try:
        header = parse_batch_header(records)
    except CorruptRecordBatchError:
        return None
    if header.base_offset <= boundary <= header.last_offset:
        return header.partition_leader_epoch
    return None


async def sample_partitions(
    client: KafkaClient,
    leader_id: int,
    offsets: Mapping[tuple[str, int], int],
    *,
    sample_bytes: int,
    offsets_only: Collection[tuple[str, int]] = (),
    boundaries: Mapping[tuple[str, int], int] | None = None,
) -> dict[tuple[str, int], PartitionSample]:
    """Sample each ``(topic, partition)`` at its offset from the leader ``leader_id``.

    A broker may fill a multi-partition Fetch with the first partition's large batch and
    return nothing for the others (Tansu honours the response limit strictly); partitions left
    without a sample although they have data are asked again one per request, where Kafka's
    KIP-74 rule returns at least one batch.

    :param offsets_only: partitions whose data need not be sampled (only their offsets).
    :param boundaries: per partition, an offset below its own to fetch from instead, whose
        batch's leader epoch is reported (to compare with what is already tiered).
    :raises BrokerConnectionError: when the leader cannot be reached.
    """
    sizes = {key: 0 if key in offsets_only else sample_bytes for key in offsets}
    boundaries = boundaries or {}
    starts = {key: boundaries.get(key, offset) for key, offset in offsets.items()}
    samples = await _fetch_samples(
        client, leader_id, starts, sizes, figures_from=offsets, boundaries=boundaries
    )
    out_of_range = [k for k, s in samples.items() if s.error == KafkaError.OFFSET_OUT_OF_RANGE]
    if out_of_range:
        earliest = await client.list_offsets(
            leader_id, [(topic, partition, EARLIEST_TIMESTAMP) for topic, partition in out_of_range]
        )
        again = {(e.topic, e.partition): max(e.offset, 0) for e in earliest}
        samples.update(
            await _fetch_samples(client, leader_id, again, sizes, figures_from=again, boundaries={})
        )
    unsampled = [
        key
        for key, sample in samples.items()
        if sample.error == KafkaError.NONE
        and sizes[key] > 0
        and sample.bytes_per_offset is None
        and offsets[key] < sample.high_watermark
    ]
    singles = await asyncio.gather(
        *(
            _fetch_samples(
                client,
                leader_id,
                {key: offsets[key]},
                sizes,
                figures_from=offsets,
                boundaries={},
            )
            for key in unsampled
        )
    )
    for single in singles:
        for key, sample in single.items():
            samples[key] = replace(sample, boundary_epoch=samples[key].boundary_epoch)
    return samples


async def _fetch_samples(
    client: KafkaClient,
    leader_id: int,
    offsets: Mapping[tuple[str, int], int],
    sizes: Mapping[tuple[str, int], int],
    *,
    figures_from: Mapping[tuple[str, int], int],
    boundaries: Mapping[tuple[str, int], int],
) -> dict[tuple[str, int], PartitionSample]:
    targets: Sequence[FetchTarget] = [
        FetchTarget(topic=topic, partition=partition, offset=offset, max_bytes=sizes[key])
        for key, offset in offsets.items()
        for topic, partition in (key,)
    ]
    answers = await client.fetch(
        leader_id,
        targets,
        max_wait_ms=_MAX_WAIT_MS,
        min_bytes=0,
        max_bytes=min(max(sum(t.max_bytes for t in targets), 1), _FETCH_LIMIT_BYTES),
    )
    samples = {
        key: PartitionSample(
            log_start=-1,
            high_watermark=-1,
            last_stable=-1,
            first_max_timestamp=None,
            bytes_per_offset=None,
            error=KafkaError.UNKNOWN_SERVER_ERROR,
        )
        for key in offsets
    }
    for answer in answers:
        key = (answer.topic, answer.partition)
        if key not in offsets:
            continue
        if answer.error != KafkaError.NONE:
            samples[key] = PartitionSample(
                log_start=-1,
                high_watermark=-1,
                last_stable=-1,
                first_max_timestamp=None,
                bytes_per_offset=None,
                error=answer.error,
            )
            continue
        figures = sample_figures(answer.records, figures_from.get(key, offsets[key]))
        boundary = boundaries.get(key)
        last_stable = answer.last_stable_offset
        samples[key] = PartitionSample(
            log_start=answer.log_start_offset if answer.log_start_offset >= 0 else offsets[key],
            high_watermark=answer.high_watermark,
            last_stable=last_stable if last_stable >= 0 else answer.high_watermark,
            first_max_timestamp=figures[0] if figures else None,
            bytes_per_offset=figures[1] if figures else None,
            boundary_epoch=None if boundary is None else _boundary_epoch(answer.records, boundary),
        )
    return samples
