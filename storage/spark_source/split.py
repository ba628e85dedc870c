"""Split the records of kept batches into columns, with numpy over all records at once.

A record is ``length, attributes, timestampDelta, offsetDelta, keyLength, key, valueLength,
value, headerCount, headers`` (zig-zag varints). Only the chain of record lengths is
sequential: a Python loop walks it (one comparison per one-byte or two-byte length, the
usual cases) and notes where each record's body starts and ends. Every other field is read
for all records of all the group's batches together: a varint at an array of positions is
decoded byte by byte with masks (one numpy pass per byte of the longest varint), and keys and
values are copied out by Arrow (one ``memcpy`` each) into arrays of their own. Headers, rare
and only read when asked for, are parsed per record.

Every field is checked against its record's end: a record that overruns it, a varint that is
too long or out of range, or a length below -1 is a corrupt batch.

The records are read from the buffer they arrived in (``bytes``, or the ``bytearray`` an S3
GET filled) without copying it; only header values, rare, are copied out as ``bytes``.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from protocol.compression import DecompressionError, decompress_records
from protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    CorruptRecordBatchError,
    TimestampType,
)
from protocol.varint import VarintError, decode_varint

__all__ = ["Buffer", "Columns", "Header", "split_records"]

Buffer = bytes | bytearray
"""What a slice's bytes arrive as: ``bytes`` (the local backend, a Fetch answer) or the
``bytearray`` an S3 GET was read into."""
Header = tuple[str, bytes | None]
Int64s = npt.NDArray[np.int64]

_VARINT_BYTES: Final = 5
_VARLONG_BYTES: Final = 10
_INT32_RAW_LIMIT: Final = 2**32
_MAX_BINARY_BYTES: Final = 2**31 - 1
_RUN_MIN_RECORDS: Final = 16
"""Fewer records of one length are framed faster by the loop than by numpy's per-call
costs."""
"""Arrow's ``binary`` has int32 offsets: one group's keys (or values) must fit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """Rows of one partition as columns, in offset order."""

    keys: Any
    """A ``pyarrow.BinaryArray``, as are the values."""
    values: Any
    offsets: Int64s
    timestamps: Int64s
    """Milliseconds since the epoch, as Kafka stores them."""
    timestamp_types: npt.NDArray[np.int32]
    headers: list[list[Header] | None] | None
    """Only when headers are asked for; ``None`` for a record without headers, as Spark's
    Kafka source gives."""

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(slots=True)
class _Framing:
    """Where the records of the group's batches lie in their concatenated bodies."""

    chunks: list[bytes | memoryview]
    starts: array[int]
    ends: array[int]
    size: int = 0


def split_records(
    buf: Buffer,
    batches: Sequence[tuple[int, BatchHeader]],
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
) -> Columns:
    """The records of ``batches`` (positions in ``buf``) in ``[from_offset, until_offset)``.

    :raises CorruptRecordBatchError: if a batch cannot be decompressed or decoded.
    """
    framing = _Framing(chunks=[], starts=array("q"), ends=array("q"))
    counts = []
    view = memoryview(buf)
    in_place = _in_place(batches)
    for position, header in batches:
        try:
            body = decompress_records(
                header.compression, view[position + BATCH_HEADER_SIZE : position + header.size]
            )
            if in_place:
                framing.size = position + BATCH_HEADER_SIZE
            _frame(body, header.record_count, framing)
        except (VarintError, ValueError, IndexError, struct.error, DecompressionError) as err:
            raise CorruptRecordBatchError(
                f"records of the batch at offset {header.base_offset} cannot be decoded: {err}"
            ) from err
        counts.append(header.record_count)
    joined = buf if in_place else b"".join(framing.chunks)
    try:
        return _columns(
            joined,
            np.frombuffer(framing.starts, dtype=np.int64),
            np.frombuffer(framing.ends, dtype=np.int64),
            batches,
            np.asarray(counts, dtype=np.int64),
            from_offset=from_offset,
            until_offset=until_offset,
            include_headers=include_headers,
        )
    except (VarintError, ValueError, IndexError) as err:
        first = batches[0][1].base_offset if batches else -1
        raise CorruptRecordBatchError(
            f"records of the batches from offset {first} cannot be decoded: {err}"
        ) from err


def _in_place(batches: Sequence[tuple[int, BatchHeader]]) -> bool:
    """Whether the records can be read where they lie in the buffer, without joining the
    batches' bodies into a copy: every batch is uncompressed.

    Joining was a tenth of the Python workers' time in a scan of uncompressed topics."""
    return bool(batches) and all(header.compression is Compression.NONE for _, header in batches)


def _frame(body: bytes | memoryview, count: int, framing: _Framing) -> None:
    """Note each record's body ``[start, end)`` (after its length) in the concatenation
    (or, read in place, in ``buf``: ``framing.size`` is then the body's position there)."""
    point = 0
    framed = 0
    if count >= _RUN_MIN_RECORDS:
        point, framed = _frame_runs(body, count, framing)
    _frame_each(body, count - framed, framing, point)
    framing.chunks.append(body)
    framing.size += len(body)


def _frame_runs(body: bytes | memoryview, count: int, framing: _Framing) -> tuple[int, int]:
    """Frame the batch's leading runs of records of one length with numpy; the position
    and number of the records after them (left to :func:`_frame_each`).

    Records of one length ``n`` (written as ``w`` bytes) lie ``w + n`` bytes apart: if the
    records at those steps all start with the same ``w`` bytes, each has length ``n`` and
    the next starts where it ends, so a run is checked by comparing bytes at its steps.
    Fixed-size records are common (fixed-width encodings, load generators); their lengths
    still change where the offset delta in them needs one more byte (64, 8192), so a batch
    of them is a few runs. A run shorter than :data:`_RUN_MIN_RECORDS` stops this: records
    of varied lengths are walked one by one.
    """
    data = np.frombuffer(body, dtype=np.uint8)
    size = len(data)
    point = framed = 0
    while framed < count:
        length, after = decode_varint(body, point)
        width = after - point
        stride = width + length
        if length < 0:
            return point, framed
        firsts = point + np.arange(count - framed, dtype=np.int64) * stride
        same = firsts + stride <= size
        for index in range(width):
            same &= data.take(firsts + index, mode="clip") == data[point + index]
        run = int(np.argmin(same)) if not same.all() else len(same)
        if run < _RUN_MIN_RECORDS:
            return point, framed
        starts = firsts[:run] + (framing.size + width)
        framing.starts.frombytes(starts.tobytes())
        framing.ends.frombytes((starts + length).tobytes())
        point += run * stride
        framed += run
    return point, framed


def _frame_each(body: bytes | memoryview, count: int, framing: _Framing, point: int) -> None:
    """Frame ``count`` records from ``point`` one by one: a Python loop along the chain of
    record lengths."""
    starts, ends = framing.starts, framing.ends
    shift = framing.size
    for _ in range(count):
        byte = body[point]
        if byte < 0x80:
            length, point = (byte >> 1) ^ -(byte & 1), point + 1
        elif body[point + 1] < 0x80:
            raw = (byte & 0x7F) | (body[point + 1] << 7)
            length, point = (raw >> 1) ^ -(raw & 1), point + 2
        else:
            length, point = decode_varint(body, point)
        if length < 0:
            raise ValueError(f"record length {length}")
        starts.append(shift + point)
        point += length
        ends.append(shift + point)
    if point > len(body):
        raise ValueError(f"the last record ends at {point}, after the batch's {len(body)} bytes")


def _columns(
    joined: Buffer,
    starts: Int64s,
    ends: Int64s,
    batches: Sequence[tuple[int, BatchHeader]],
    counts: Int64s,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
) -> Columns:
    data = np.frombuffer(joined, dtype=np.uint8)
    point = starts + 1  # record attributes: none defined
    timestamp_deltas, point = _varints(data, point, _VARLONG_BYTES)
    offset_deltas, point = _varints(data, point, _VARINT_BYTES)
    offsets = np.repeat(np.asarray([h.base_offset for _, h in batches], np.int64), counts)
    offsets += offset_deltas
    key_lengths, key_starts = _varints(data, point, _VARINT_BYTES)
    value_lengths, value_starts = _varints(
        data, key_starts + np.maximum(key_lengths, 0), _VARINT_BYTES
    )
    header_counts, point = _varints(
        data, value_starts + np.maximum(value_lengths, 0), _VARINT_BYTES
    )
    if np.any(point > ends) or np.any(key_lengths < -1) or np.any(value_lengths < -1):
        raise ValueError("a record overruns its length")
    keep = (offsets >= from_offset) & (offsets < until_offset)
    everything = bool(keep.all())

    def kept(column: Int64s) -> Int64s:
        return column if everything else column[keep]

    return Columns(
        keys=_binary(data, kept(key_starts), kept(key_lengths)),
        values=_binary(data, kept(value_starts), kept(value_lengths)),
        offsets=kept(offsets),
        timestamps=kept(_timestamps(batches, counts, timestamp_deltas)),
        timestamp_types=kept(
            np.repeat(np.asarray([int(h.timestamp_type) for _, h in batches], np.int64), counts)
        ).astype(np.int32),
        headers=_headers(joined, kept(point), kept(ends), kept(header_counts))
        if include_headers
        else None,
    )


def _varints(
    data: npt.NDArray[np.uint8], positions: Int64s, max_bytes: int
) -> tuple[Int64s, Int64s]:
    """The zig-zag varints at ``positions``, and the positions after them.

    Bytes are read for every position in each pass, also for varints that already ended:
    ``take`` clips reads past the buffer's end to its last byte (a valid record's varints end
    inside it; one that runs past ends past its record, which the caller checks).

    :raises VarintError: if one is longer than ``max_bytes`` or (for int32) out of range.
    """
    raw = np.zeros(len(positions), dtype=np.uint64)
    sizes = np.zeros(len(positions), dtype=np.int64)
    going = np.ones(len(positions), dtype=np.bool_)
    for index in range(max_bytes):
        byte = data.take(positions + index, mode="clip")
        bits = (byte & 0x7F).astype(np.uint64)
        if index == _VARLONG_BYTES - 1 and np.any(going & (bits > 1)):
            raise VarintError("a varlong is outside int64")
        raw |= np.where(going, bits << np.uint64(7 * index), np.uint64(0))
        sizes += going
        going &= byte >= 0x80
        if not going.any():
            break
    else:
        raise VarintError(f"a varint is longer than {max_bytes} bytes")
    if max_bytes == _VARINT_BYTES and np.any(raw >= _INT32_RAW_LIMIT):
        raise VarintError("a varint is outside int32")
    values = (raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))
    return values.view(np.int64), positions + sizes


def _timestamps(
    batches: Sequence[tuple[int, BatchHeader]], counts: Int64s, deltas: Int64s
) -> Int64s:
    """First timestamp plus delta; a LOG_APPEND_TIME batch's max timestamp for all its records."""
    appended = np.asarray(
        [h.timestamp_type is TimestampType.LOG_APPEND_TIME for _, h in batches], np.bool_
    )
    bases = np.asarray(
        [
            h.max_timestamp if log else h.first_timestamp
            for (_, h), log in zip(batches, appended, strict=True)
        ],
        np.int64,
    )
    per_record = np.repeat(bases, counts)
    return np.where(np.repeat(appended, counts), per_record, per_record + deltas)


def _binary(data: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s) -> Any:
    """``data[starts[i]:starts[i] + lengths[i]]`` (null for length -1) as a
    ``pyarrow.BinaryArray`` of its own.

    The keys (or values) and the bytes between them tile ``data`` from its start: as one
    binary array of alternating gaps and values over ``data``'s buffer, Arrow's ``take`` of
    every second element copies the values out in C, one ``memcpy`` each (several times
    faster than a numpy mask over the span). A column of nulls only (records without keys,
    the usual case for keys) is made without a ``take`` over empty tiles.
    """
    valid = lengths >= 0
    count = len(lengths)
    nulls = count - int(np.count_nonzero(valid))
    if nulls == count:
        return pa.nulls(count, pa.binary())
    sizes = np.where(valid, lengths, 0)
    bounds = np.zeros(2 * count + 1, dtype=np.int64)
    bounds[1::2] = starts
    bounds[2::2] = starts + sizes
    if int(bounds[-1]) > _MAX_BINARY_BYTES:
        raise ValueError(f"{int(bounds[-1])} bytes in one group, over Arrow's 2 GiB")
    tiles = pa.BinaryArray.from_buffers(
        pa.binary(), 2 * count, [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(data)]
    )
    taken = tiles.take(pa.array(np.arange(1, 2 * count, 2, dtype=np.int64)))
    if nulls == 0:
        return taken
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.BinaryArray.from_buffers(
        pa.binary(), count, [validity, *taken.buffers()[1:]], null_count=nulls
    )


def _headers(
    raw: Buffer, starts: Int64s, ends: Int64s, counts: Int64s
) -> list[list[Header] | None]:
    """Each record's headers (``starts``: after its header count), or ``None`` without any."""
    view = memoryview(raw)
    return [
        _record_headers(view, start, end, count) if count > 0 else None
        for start, end, count in zip(starts.tolist(), ends.tolist(), counts.tolist(), strict=True)
    ]


def _record_headers(raw: memoryview, point: int, end: int, count: int) -> list[Header]:
    found: list[Header] = []
    for _ in range(count):
        name, point = _nullable_bytes(raw, point)
        value, point = _nullable_bytes(raw, point)
        found.append(((name or b"").decode("utf-8"), value))
    if point > end:
        raise ValueError("record headers overrun the record")
    return found


def _nullable_bytes(raw: memoryview, point: int) -> tuple[bytes | None, int]:
    """A varint-length-prefixed byte string (``None`` for length -1) and what follows."""
    size, point = decode_varint(raw, point)
    if size < 0:
        return None, point
    return bytes(raw[point : point + size]), point + size
