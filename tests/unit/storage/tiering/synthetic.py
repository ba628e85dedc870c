"""Synthetic partition logs made of real v2 batches, for the pipeline's property tests.

A log mixes plain batches, idempotent producers and transactional producers (committed,
aborted and still open transactions), leader-epoch bumps, markers without an epoch (as Tansu
writes them) and timestamps that sometimes go backwards (CreateTime is the client's clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from protocol.records import (
    Compression,
    ControlType,
    Record,
    build_control_batch,
    build_record_batch,
)

BASE_TIMESTAMP = 1_700_000_000_000
IDEMPOTENT_PIDS = (11, 12)
TRANSACTIONAL_PIDS = (21, 22)


@dataclass(frozen=True)
class LogBatch:
    data: bytes
    base_offset: int
    last_offset: int


@dataclass(frozen=True)
class Step:
    kind: str  # "plain", "producer", "marker", "epoch"
    pid: int = -1
    records: int = 1
    value_size: int = 10
    ts_delta: int = 0
    gzip: bool = False
    commit: bool = True
    marker_epoch_missing: bool = False


steps = st.one_of(
    st.builds(
        Step,
        kind=st.just("plain"),
        records=st.integers(1, 5),
        value_size=st.integers(0, 3000),
        ts_delta=st.integers(-500, 60_000),
        gzip=st.booleans(),
    ),
    st.builds(
        Step,
        kind=st.just("producer"),
        pid=st.sampled_from(IDEMPOTENT_PIDS + TRANSACTIONAL_PIDS),
        records=st.integers(1, 5),
        value_size=st.integers(0, 3000),
        ts_delta=st.integers(-500, 60_000),
    ),
    st.builds(
        Step,
        kind=st.just("marker"),
        pid=st.sampled_from(TRANSACTIONAL_PIDS),
        commit=st.booleans(),
        marker_epoch_missing=st.booleans(),
    ),
    st.builds(Step, kind=st.just("epoch")),
)


def build_log(plan: list[Step], *, start_offset: int = 0) -> list[LogBatch]:
    """Turn steps into contiguous batches starting at ``start_offset``."""
    batches: list[LogBatch] = []
    offset = start_offset
    timestamp = BASE_TIMESTAMP
    leader_epoch = 0
    sequences: dict[int, int] = {}
    open_txn: set[int] = set()
    for step in plan:
        if step.kind == "epoch":
            leader_epoch += 1
            continue
        timestamp += step.ts_delta
        if step.kind == "marker":
            if step.pid not in open_txn and step.commit:
                continue
            open_txn.discard(step.pid)
            data = build_control_batch(
                base_offset=offset,
                control_type=ControlType.COMMIT if step.commit else ControlType.ABORT,
                producer_id=step.pid,
                producer_epoch=0,
                timestamp=timestamp,
                coordinator_epoch=3,
                partition_leader_epoch=-1 if step.marker_epoch_missing else leader_epoch,
            )
            batches.append(LogBatch(data=data, base_offset=offset, last_offset=offset))
            offset += 1
            continue
        records = [
            Record(value=bytes([i % 251]) * step.value_size, timestamp=timestamp + i)
            for i in range(step.records)
        ]
        kwargs: dict[str, object] = {}
        if step.kind == "producer":
            sequence = sequences.get(step.pid, 0)
            sequences[step.pid] = sequence + step.records
            transactional = step.pid in TRANSACTIONAL_PIDS
            if transactional:
                open_txn.add(step.pid)
            kwargs = {
                "producer_id": step.pid,
                "producer_epoch": 0,
                "base_sequence": sequence,
                "is_transactional": transactional,
            }
        data = build_record_batch(
            base_offset=offset,
            records=records,
            compression=Compression.GZIP if step.gzip else Compression.NONE,
            partition_leader_epoch=leader_epoch,
            **kwargs,  # type: ignore[arg-type]
        )
        last = offset + step.records - 1
        batches.append(LogBatch(data=data, base_offset=offset, last_offset=last))
        offset = last + 1
    return batches


logs = st.lists(steps, min_size=3, max_size=80).map(build_log).filter(bool)
