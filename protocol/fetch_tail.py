"""The tail of a Fetch v12+ response, found while the response streams, and its node endpoints.

A Fetch response is mostly record bytes. Since v16 (KIP-951) it may end with ``node_endpoints``
in its top-level tagged fields: where a moved partition leader is, an address a proxy must
rewrite. Kafka fills them only for partitions that failed with NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH (``KafkaApis.handleFetchRequest``), so nearly every response ends with an
empty tagged-field section, the single byte ``00``.

:class:`FetchTailFinder` walks a response payload (response header v1, then the body) in
chunks of any size, skipping record bytes without looking at them, and tells where the
top-level tagged fields start: everything before may go to the client as it arrives, only the
tail need be held. The size prefix is already out by then, so a rewritten tail must keep its
length: :func:`encode_tail` pads it with an unknown tagged field (which every client skips,
KIP-482) to exactly the original length.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.varint import Buffer, VarintError, decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "NODE_ENDPOINTS_TAG",
    "PADDING_TAGS",
    "FetchTailFinder",
    "NodeEndpoint",
    "ResponseTail",
    "encode_tail",
    "read_tail",
    "skip_tagged_fields",
]

NODE_ENDPOINTS_TAG: Final = 0
PADDING_TAGS: Final = (10_000, 20_000)
"""Tags of the field that pads a rewritten tail to its original length: far above any tag
FetchResponse.json defines (only 0); two and three bytes as varints, so that together they
reach every pad length from 3 bytes (one pad size varint grows from 1 to 2 bytes at 128)."""

_CORRELATION_ID_BYTES: Final = 4
_BODY_FIXED_BYTES: Final = 10  # throttle_time_ms int32, error_code int16, session_id int32
_TOPIC_ID_BYTES: Final = 16
_FIRST_TOPIC_ID_VERSION: Final = 13
_PARTITION_FIXED_BYTES: Final = 30  # index int32, error int16, 3 offsets int64
_ABORTED_FIXED_BYTES: Final = 16  # producer_id int64, first_offset int64
_PREFERRED_REPLICA_BYTES: Final = 4
_MAX_VARINT_SHIFT: Final = 28
_INT32: Final = struct.Struct(">i")

# A walk step: > 0 reads that many bytes (sent back into the walk), < 0 skips -n bytes,
# 0 means the walk stands at the top-level tagged fields.
_Walk = Generator[int, bytes, None]


def _varint() -> Generator[int, bytes, int]:
    value = shift = 0
    while True:
        byte = (yield 1)[0]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > _MAX_VARINT_SHIFT:
            raise VarintError("unsigned varint longer than 5 bytes")


def _skip(count: int) -> Generator[int, bytes, None]:
    if count:
        yield -count


def _tagged_fields() -> Generator[int, bytes, None]:
    for _ in range((yield from _varint())):
        yield from _varint()
        yield from _skip((yield from _varint()))


def _items() -> Generator[int, bytes, int]:
    """The item count of a compact array (``null``, sent as 0, has none)."""
    return max((yield from _varint()) - 1, 0)


def _fetch_response(version: int) -> _Walk:
    """FetchResponse.json v12+, after the correlation id: header tags, then the body up to
    its top-level tagged fields."""
    yield from _skip(_CORRELATION_ID_BYTES)
    yield from _tagged_fields()
    yield from _skip(_BODY_FIXED_BYTES)
    for _ in range((yield from _items())):
        if version >= _FIRST_TOPIC_ID_VERSION:
            yield from _skip(_TOPIC_ID_BYTES)
        else:
            yield from _skip((yield from _items()))  # topic name: compact string
        for _ in range((yield from _items())):
            yield from _skip(_PARTITION_FIXED_BYTES)
            for _ in range((yield from _items())):
                yield from _skip(_ABORTED_FIXED_BYTES)
                yield from _tagged_fields()
            yield from _skip(_PREFERRED_REPLICA_BYTES)
            yield from _skip((yield from _items()))  # records: compact (nullable) bytes
            yield from _tagged_fields()
        yield from _tagged_fields()
    yield 0


class FetchTailFinder:
    """Finds where a Fetch v12+ response payload's top-level tagged fields start, fed the
    payload in pieces of any size; record bytes are skipped, never copied.

    :meth:`feed` raises :class:`VarintError` for a malformed varint; a response that ends
    before the walk reached its tail is told by :attr:`tail_start` staying ``None``.
    """

    __slots__ = ("_pending", "_position", "_walk", "_want", "tail_start")

    def __init__(self, version: int) -> None:
        self._walk = _fetch_response(version)
        self._want = next(self._walk)
        self._pending = bytearray()
        self._position = 0
        self.tail_start: int | None = None
        """Offset of the top-level tagged fields in the payload, once the walk got there."""

    def feed(self, chunk: Buffer) -> int:
        """Walk over ``chunk``, the payload's next bytes; how many of them lie before the
        tail (all of them until the walk reaches it, none after)."""
        if self.tail_start is not None:
            return 0
        offset, end = 0, len(chunk)
        while offset < end:
            want = self._want
            if want < 0:
                take = min(-want, end - offset)
                offset += take
                if take < -want:
                    self._want = want + take
                    break
                self._want = self._walk.send(b"")
            else:
                take = min(want - len(self._pending), end - offset)
                self._pending += chunk[offset : offset + take]
                offset += take
                if len(self._pending) < want:
                    break
                data = bytes(self._pending)
                self._pending.clear()
                self._want = self._walk.send(data)
            if self._want == 0:
                self.tail_start = self._position + offset
                break
        self._position += offset
        return offset

    @property
    def skippable(self) -> int:
        """How many of the payload's next bytes the walk skips unread (a partition's record
        set, mostly): they may pass without being fed, told by :meth:`skip`."""
        return -self._want if self._want < 0 else 0

    def skip(self, count: int) -> None:
        """Account for ``count`` of the :attr:`skippable` bytes, passed without being fed.

        :raises LocalProtocolError: ``count`` is more than :attr:`skippable`.
        """
        if not 0 <= count <= self.skippable:
            raise LocalProtocolError(f"cannot skip {count} bytes, {self.skippable} are skippable")
        if not count:
            return
        self._position += count
        self._want += count
        if self._want == 0:
            self._want = self._walk.send(b"")
            if self._want == 0:
                self.tail_start = self._position


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEndpoint:
    """One entry of KIP-951's ``node_endpoints``; ``tags`` are its own tagged fields, as sent."""

    node_id: int
    host: str
    port: int
    rack: str | None
    tags: bytes = b"\x00"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseTail:
    """A response's top-level tagged fields: the node endpoints, and any other tag as sent."""

    node_endpoints: tuple[NodeEndpoint, ...]
    others: tuple[tuple[int, bytes], ...]


def _string(data: Buffer, position: int) -> tuple[str | None, int]:
    length, position = decode_unsigned_varint(data, position)
    if length == 0:
        return None, position
    end = position + length - 1
    if end > len(data):
        raise RemoteProtocolError("node endpoint string runs past its tagged field")
    return bytes(data[position:end]).decode(), end


def skip_tagged_fields(data: Buffer, position: int) -> int:
    """The position after the tagged-field section at ``position``.

    :raises VarintError: a malformed varint.
    """
    count, position = decode_unsigned_varint(data, position)
    for _ in range(count):
        _tag, position = decode_unsigned_varint(data, position)
        size, position = decode_unsigned_varint(data, position)
        position += size
    return position


def _node_endpoints(data: Buffer) -> tuple[NodeEndpoint, ...]:
    count, position = decode_unsigned_varint(data, 0)
    endpoints = []
    for _ in range(max(count - 1, 0)):
        (node_id,) = _INT32.unpack_from(data, position)
        host, position = _string(data, position + _INT32.size)
        (port,) = _INT32.unpack_from(data, position)
        rack, position = _string(data, position + _INT32.size)
        tags_end = skip_tagged_fields(data, position)
        if host is None:
            raise RemoteProtocolError(f"node endpoint {node_id} has a null host")
        tags = bytes(data[position:tags_end])
        endpoints.append(NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack, tags=tags))
        position = tags_end
    if position != len(data):
        raise RemoteProtocolError("node endpoints do not fill their tagged field")
    return tuple(endpoints)


def read_tail(tail: Buffer) -> ResponseTail:
    """Decode a response's top-level tagged fields (all of ``tail``).

    :raises RemoteProtocolError: malformed, or bytes left over after the last field.
    """
    try:
        count, position = decode_unsigned_varint(tail, 0)
        endpoints: tuple[NodeEndpoint, ...] = ()
        others = []
        for _ in range(count):
            tag, position = decode_unsigned_varint(tail, position)
            size, position = decode_unsigned_varint(tail, position)
            field = memoryview(tail)[position : position + size]
            if len(field) < size:
                raise RemoteProtocolError(f"tagged field {tag} runs past the response")
            if tag == NODE_ENDPOINTS_TAG:
                endpoints = _node_endpoints(field)
            else:
                others.append((tag, bytes(field)))
            position += size
    except (VarintError, struct.error, UnicodeDecodeError) as err:
        raise RemoteProtocolError(f"malformed top-level tagged fields: {err}") from err
    if position != len(tail):
        raise RemoteProtocolError(f"{len(tail) - position} bytes after the top-level tags")
    return ResponseTail(node_endpoints=endpoints, others=tuple(others))


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return encode_unsigned_varint(len(raw) + 1) + raw


def _encode_node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    parts = [encode_unsigned_varint(len(endpoints) + 1)]
    for e in endpoints:
        parts += (
            _INT32.pack(e.node_id),
            _compact_string(e.host),
            _INT32.pack(e.port),
            _compact_string(e.rack),
            e.tags,
        )
    return b"".join(parts)


def _encode_fields(fields: Sequence[tuple[int, bytes]]) -> bytes:
    parts = [encode_unsigned_varint(len(fields))]
    for tag, data in fields:
        parts += (encode_unsigned_varint(tag), encode_unsigned_varint(len(data)), data)
    return b"".join(parts)


def encode_tail(tail: ResponseTail, *, length: int) -> bytes | None:
    """``tail`` encoded in exactly ``length`` bytes, padded with an unknown tagged field
    (one of :data:`PADDING_TAGS`); ``None`` if it does not fit (or another tag sorts after
    the pad)."""
    fields = sorted(
        [
            *(
                [(NODE_ENDPOINTS_TAG, _encode_node_endpoints(tail.node_endpoints))]
                if tail.node_endpoints
                else []
            ),
            *tail.others,
        ]
    )
    plain = _encode_fields(fields)
    if len(plain) == length:
        return plain
    if len(plain) > length or any(tag >= PADDING_TAGS[0] for tag, _ in fields):
        return None
    # The pad's own tag and size varints take a few bytes: try the sizes that could fit.
    for pad_tag in PADDING_TAGS:
        for size in range(length - len(plain), -1, -1):
            padded = _encode_fields([*fields, (pad_tag, bytes(size))])
            if len(padded) == length:
                return padded
            if len(padded) < length:
                break
    return None
