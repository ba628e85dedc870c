"""A builder of synthetic partitions: the batches a leader writes, from a seed.

:func:`synthetic_partition` makes ``count`` batches that mix plain batches, idempotent
producers and interleaved transactional producers that commit and abort, with gzip batches,
leader-epoch bumps and timestamps that go backwards, all valid as Kafka writes them (offsets
contiguous, sequences per producer, markers only for open transactions). :data:`partitions`
draws them for Hypothesis; :func:`parsed_batches` cuts a ``.log`` into :class:`Batch` values
for brute-force checks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import strategies as st

from protocol.records import (
    BatchHeader,
    Compression,
    ControlType,
    Record,
    build_control_batch,
    build_record_batch,
    iter_batches,
    read_control_record,
)

__all__ = ["Batch", "parsed_batches", "partitions", "synthetic_partition"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One batch of a synthetic partition: its bytes and where it sits."""

    data: bytes
    position: int
    header: BatchHeader
    control: ControlType | None


def parsed_batches(log: bytes) -> list[Batch]:
    """The batches of a ``.log``, parsed (the brute-force view of a segment)."""
    out = []
    for position, header in iter_batches(log):
        control = read_control_record(log, position, header).type if header.is_control else None
        out.append(
            Batch(
                data=log[position : position + header.size],
                position=position,
                header=header,
                control=control,
            )
        )
    return out


def synthetic_partition(seed: int, count: int, *, base_offset: int = 0) -> bytes:
    """``count`` batches of a partition as its leader would have written them."""
    rng = random.Random(seed)
    offset, epoch, timestamp = base_offset, rng.randint(0, 2), 1_700_000_000_000
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    out = []
    for _ in range(count):
        if rng.random() < 0.1:
            epoch += rng.randint(1, 3)
        timestamp += rng.randint(-500, 1000)
        kind = rng.random()
        if kind < 0.2 and open_txns:
            pid = rng.choice(sorted(open_txns))
            open_txns.discard(pid)
            out.append(
                build_control_batch(
                    base_offset=offset,
                    control_type=rng.choice([ControlType.ABORT, ControlType.COMMIT]),
                    producer_id=pid,
                    producer_epoch=0,
                    timestamp=timestamp,
                    coordinator_epoch=rng.randint(0, 3),
                    partition_leader_epoch=epoch,
                )
            )
            offset += 1
            continue
        records = [
            Record(
                key=None,
                value=rng.randbytes(rng.choice([0, 10, 300, 2500])),
                timestamp=timestamp + rng.randint(-100, 100),
            )
            for _ in range(rng.randint(1, 5))
        ]
        pid, transactional = -1, False
        if kind < 0.55:
            pid = rng.randint(10, 13)
            transactional = True
            open_txns.add(pid)
        elif kind < 0.7:
            pid = rng.randint(1, 3)
        sequence = sequences.get(pid, 0) if pid >= 0 else -1
        if pid >= 0:
            sequences[pid] = sequence + len(records)
        out.append(
            build_record_batch(
                base_offset=offset,
                records=records,
                compression=rng.choice([Compression.NONE, Compression.GZIP]),
                partition_leader_epoch=epoch,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=sequence,
                is_transactional=transactional,
            )
        )
        offset += len(records)
    return b"".join(out)


partitions = st.builds(synthetic_partition, st.integers(0, 2**32), st.integers(1, 40))
"""Examples take milliseconds but brute-force every offset, so the property tests run
without Hypothesis's per-example deadline on the shared two-core machine."""
