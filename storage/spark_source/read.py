"""Read one task in an executor: ranged GETs of its remote slices, a few MiB each (each
slice's :meth:`~storage.spark_source.slices.RemoteSlice.reads`, one after the other), or
Fetches of the broker's tail through tierproxy's own client, decoded into one Arrow batch per
step.

Runs in Spark's Python workers, on the worker's own loop (:mod:`storage.spark_source.worker`):
the storage manager is the worker's, kept across tasks; the Kafka client is created per task.
Both come from the settings the task carries (nothing with a connection is pickled).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

from protocol.errors import KafkaError
from storage.spark_source.arrow import to_record_batch
from storage.spark_source.decode import AbortedRange, TransactionFilter, decode_batches
from storage.spark_source.settings import SourceSettings
from storage.spark_source.slices import LocalSlice, RemoteSlice, Task
from storage.spark_source.split import Buffer, Columns
from storage.spark_source.worker import (
    freeze_heap,
    remote_storage,
    run,
    start,
)

if TYPE_CHECKING:
    from storage.kafka_client import KafkaClient

__all__ = ["LocalReadError", "read_task", "remote_columns", "transactions_of"]

_FETCH_BYTES: Final = 16 * 1024 * 1024
"""Bytes per Fetch of the broker's tail: large enough that a fetch costs little against
decoding it, small enough to hold one in each task's memory."""
_FETCH_WAIT_MS: Final = 100
"""Tansu answers a Fetch with no partitions when it may not wait at all."""
_READ_COMMITTED: Final = 1
_READ_UNCOMMITTED: Final = 0


class LocalReadError(Exception):
    """The broker could not give the tail's records (they were deleted, or it refused)."""


def read_task(task: Task, settings: SourceSettings, *, include_headers: bool) -> Iterator[Any]:
    """The task's rows, as ``pyarrow.RecordBatch`` es in Spark's Kafka schema."""
    freeze_heap()
    first = task[0]
    if isinstance(first, LocalSlice):
        columns = _local_columns(first, settings, include_headers=include_headers)
    else:
        remote = [piece for piece in task if isinstance(piece, RemoteSlice)]
        columns = _remote_columns(remote, settings, include_headers=include_headers)
    for group in columns:
        yield to_record_batch(
            group, topic=first.topic, partition=first.partition, include_headers=include_headers
        )


def transactions_of(piece: RemoteSlice) -> TransactionFilter | None:
    """The slice's READ_COMMITTED filter, one for all its reads (a transaction aborted in
    one read may end in the next), or ``None`` to read uncommitted."""
    return None if piece.aborted is None else TransactionFilter(piece.aborted)


def remote_columns(
    piece: RemoteSlice,
    data: Buffer,
    *,
    transactions: TransactionFilter | None,
    include_headers: bool,
) -> Iterator[Columns]:
    """The rows of a remote slice in ``data`` (one of its reads, or its whole byte range: whole
    batches), a group of batches at a time.

    :raises CorruptRecordBatchError: if a batch cannot be decoded.
    """
    return decode_batches(
        data,
        from_offset=piece.from_offset,
        until_offset=piece.until_offset,
        transactions=transactions,
        include_headers=include_headers,
    ).columns()


def _remote_columns(
    pieces: list[RemoteSlice], settings: SourceSettings, *, include_headers: bool
) -> Iterator[Columns]:
    """Each read of the slices in turn, decoded in the buffer it was received into (no copy)
    while the next one, of the same slice or the next, is received."""
    filters = [transactions_of(piece) for piece in pieces]
    reads = [(n, first, end) for n, piece in enumerate(pieces) for first, end in piece.reads()]

    def fetch(index: int) -> Future[bytes | bytearray]:
        n, first, end = reads[index]
        return start(_fetch_remote(pieces[n], settings, first, end))

    pending = fetch(0)
    for index, (n, _first, _end) in enumerate(reads):
        data = pending.result()
        if index + 1 < len(reads):
            pending = fetch(index + 1)
        yield from remote_columns(
            pieces[n], data, transactions=filters[n], include_headers=include_headers
        )


async def _fetch_remote(
    piece: RemoteSlice, settings: SourceSettings, start: int, end: int
) -> bytes | bytearray:
    rsm = remote_storage(settings.storage)
    return await rsm.fetch_log_segment(piece.segment, start, end)


def _local_columns(
    piece: LocalSlice, settings: SourceSettings, *, include_headers: bool
) -> Iterator[Columns]:
    """Fetch from the leader until ``until_offset`` (or the end the broker has)."""
    # The Kafka client (and kio) load only in tasks that read the broker's tail.
    from storage.kafka_client import KafkaClient  # noqa: PLC0415

    transactions = TransactionFilter() if piece.read_committed else None
    client = KafkaClient(
        settings.bootstrap_servers,
        client_id=settings.client_id,
        request_timeout_ms=settings.request_timeout_ms,
        security=settings.security,
    )
    try:
        leader = run(_leader(client, piece))
        offset = piece.from_offset
        while offset < piece.until_offset:
            records, end = run(_fetch_local(client, leader, piece, offset, transactions))
            decoding = decode_batches(
                records,
                from_offset=offset,
                until_offset=piece.until_offset,
                transactions=transactions,
                include_headers=include_headers,
            )
            yield from decoding.columns()
            next_offset = decoding.next_offset
            if next_offset is None or next_offset <= offset:
                if end <= offset:
                    return  # the broker has nothing more (the range ended at its log end)
                raise LocalReadError(
                    f"{piece.topic}-{piece.partition}: no progress at offset {offset} "
                    f"(the broker's end is {end})"
                )
            offset = next_offset
    finally:
        run(client.close())


async def _leader(client: KafkaClient, piece: LocalSlice) -> int:
    cluster = await client.metadata([piece.topic])
    topic = cluster.topics[piece.topic]
    for partition in topic.partitions:
        if partition.partition == piece.partition:
            return partition.leader_id
    raise LocalReadError(f"{piece.topic}-{piece.partition} has no leader")


async def _fetch_local(
    client: KafkaClient,
    leader: int,
    piece: LocalSlice,
    offset: int,
    transactions: TransactionFilter | None,
) -> tuple[bytes, int]:
    """Batches from ``offset`` and the broker's end (its high watermark, or its last
    stable offset for READ_COMMITTED)."""
    from storage.kafka_client import FetchTarget  # noqa: PLC0415 (see _local_columns)

    answers = await client.fetch(
        leader,
        [
            FetchTarget(
                topic=piece.topic, partition=piece.partition, offset=offset, max_bytes=_FETCH_BYTES
            )
        ],
        max_bytes=_FETCH_BYTES,
        isolation_level=_READ_COMMITTED if transactions is not None else _READ_UNCOMMITTED,
        max_wait_ms=_FETCH_WAIT_MS,
    )
    if len(answers) != 1:
        raise LocalReadError(
            f"Fetch of {piece.topic}-{piece.partition} at offset {offset}: the broker "
            f"answered {len(answers)} partitions"
        )
    (answer,) = answers
    if answer.error != KafkaError.NONE:
        raise LocalReadError(
            f"Fetch of {piece.topic}-{piece.partition} at offset {offset}: {answer.error.name}"
            + (
                " (the broker deleted it before it was read)"
                if answer.error == KafkaError.OFFSET_OUT_OF_RANGE
                else ""
            )
        )
    if transactions is not None:
        transactions.add(
            [
                AbortedRange(producer_id=pid, first_offset=first)
                for pid, first in answer.aborted_transactions
            ]
        )
        return answer.records, answer.last_stable_offset
    return answer.records, answer.high_watermark
