"""The tail of a Fetch-like response, found while the response streams, and its node endpoints.

A Fetch response is mostly record bytes, and so is a ShareFetch response (KIP-932). Both may
name where a moved partition leader is, an address a proxy must rewrite: since Fetch v16
(KIP-951) in ``node_endpoints`` among the top-level tagged fields at the very end; in ShareFetch
and ShareAcknowledge as ``node_endpoints``, the last field before those tagged fields. Kafka fills
them only for partitions that failed with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
(``KafkaApis``), so nearly every response ends with an empty tail: ``00`` (no tagged field) or
``01 00`` (no endpoint, no tagged field). :class:`TailLayout` names the two shapes.

:class:`TailFinder` walks a response payload (response header v1, then the body) in chunks of
any size, skipping record bytes without looking at them, and tells where the tail starts:
everything before may go to the client as it arrives, only the tail need be held. The size
prefix is already out by then, so a rewritten tail must keep its length: :func:`encode_tail`
pads it with an unknown top-level tagged field (which every client skips, KIP-482) to exactly
the original length.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import ApiKey
from protocol.varint import Buffer, VarintError, decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "NODE_ENDPOINTS_TAG",
    "PADDING_TAGS",
    "NodeEndpoint",
    "ResponseTail",
    "TailFinder",
    "TailLayout",
    "body_tail",
    "encode_tail",
    "is_empty_tail",
    "read_tail",
    "skip_tagged_fields",
    "tail_layout",
    "walkable",
]

NODE_ENDPOINTS_TAG: Final = 0
PADDING_TAGS: Final = (10_000, 20_000)
"""Tags of the field that pads a rewritten tail to its original length: far above any tag
FetchResponse.json defines (only 0; ShareFetch and ShareAcknowledge define none); two and three
bytes as varints, so that together they reach every pad length from 3 bytes (one pad size
varint grows from 1 to 2 bytes at 128)."""


class TailLayout(Enum):
    """Where a response's node endpoints are, at its end."""

    TAGGED = "tagged"
    """Fetch v16+ (and Produce v10+): in the top-level tagged fields, as tag 0; the tail is
    those tagged fields."""
    LAST_FIELD = "last-field"
    """ShareFetch and ShareAcknowledge: the body's last field; the tail is that array and the
    top-level tagged fields after it."""


_EMPTY_TAILS: Final[Mapping[TailLayout, bytes]] = MappingProxyType(
    {TailLayout.TAGGED: b"\x00", TailLayout.LAST_FIELD: b"\x01\x00"}
)

_CORRELATION_ID_BYTES: Final = 4
_BODY_FIXED_BYTES: Final = 10  # throttle_time_ms int32, error_code int16, session_id int32
_TOPIC_ID_BYTES: Final = 16
_FIRST_TOPIC_ID_VERSION: Final = 13
_FIRST_FLEXIBLE_FETCH: Final = 12
_PARTITION_FIXED_BYTES: Final = 30  # index int32, error int16, 3 offsets int64
_ABORTED_FIXED_BYTES: Final = 16  # producer_id int64, first_offset int64
_PREFERRED_REPLICA_BYTES: Final = 4
_THROTTLE_AND_ERROR_BYTES: Final = 6  # throttle_time_ms int32, error_code int16
_LOCK_TIMEOUT_BYTES: Final = 4  # acquisition_lock_timeout_ms int32
_FIRST_ACKNOWLEDGE_LOCK_TIMEOUT: Final = 2  # ShareAcknowledge; ShareFetch has it from v1
_SHARE_PARTITION_BYTES: Final = 6  # partition_index int32, error_code int16
_ACKNOWLEDGE_ERROR_BYTES: Final = 2  # acknowledge_error_code int16
_LEADER_BYTES: Final = 8  # current_leader: leader_id int32, leader_epoch int32
_ACQUIRED_BYTES: Final = 18  # first_offset int64, last_offset int64, delivery_count int16
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


def _header() -> _Walk:
    """Response header v1: the correlation id, then its tagged fields."""
    yield from _skip(_CORRELATION_ID_BYTES)
    yield from _tagged_fields()


def _fetch_body(version: int) -> _Walk:
    """FetchResponse.json v12+, up to its top-level tagged fields."""
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


def _share_fetch_body(version: int) -> _Walk:
    """ShareFetchResponse.json v1+, up to ``node_endpoints``: throttle, error code and
    message, acquisition lock timeout, then per topic (id) and partition: index, error code
    and message, acknowledge error code and message, current leader, records, acquired
    records (first and last offset, delivery count)."""

    def partition() -> _Walk:
        yield from _skip(_ACKNOWLEDGE_ERROR_BYTES)
        yield from _skip((yield from _items()))
        yield from _skip(_LEADER_BYTES)
        yield from _tagged_fields()
        yield from _skip((yield from _items()))  # records: compact (nullable) bytes
        for _ in range((yield from _items())):
            yield from _skip(_ACQUIRED_BYTES)
            yield from _tagged_fields()

    yield from _share_body(lock_timeout=True, partition=partition)


def _share_acknowledge_body(version: int) -> _Walk:
    """ShareAcknowledgeResponse.json v1+, up to ``node_endpoints``: throttle, error code and
    message, acquisition lock timeout (v2+), then per topic (id) and partition: index, error
    code and message, current leader."""

    def partition() -> _Walk:
        yield from _skip(_LEADER_BYTES)
        yield from _tagged_fields()

    yield from _share_body(
        lock_timeout=version >= _FIRST_ACKNOWLEDGE_LOCK_TIMEOUT, partition=partition
    )


def _share_body(*, lock_timeout: bool, partition: Callable[[], _Walk]) -> _Walk:
    """What the share answers have alike: throttle, error code and message, acquisition lock
    timeout (when ``lock_timeout``), then per topic (id) and partition: index, error code
    and message, the rest of the partition (``partition()``) and its tagged fields."""
    yield from _skip(_THROTTLE_AND_ERROR_BYTES)
    yield from _skip((yield from _items()))  # error message: compact nullable string
    if lock_timeout:
        yield from _skip(_LOCK_TIMEOUT_BYTES)
    for _ in range((yield from _items())):
        yield from _skip(_TOPIC_ID_BYTES)
        for _ in range((yield from _items())):
            yield from _skip(_SHARE_PARTITION_BYTES)
            yield from _skip((yield from _items()))
            yield from partition()
            yield from _tagged_fields()
        yield from _tagged_fields()


_BODIES: Final[Mapping[int, tuple[Callable[[int], _Walk], TailLayout]]] = MappingProxyType(
    {
        int(ApiKey.FETCH): (_fetch_body, TailLayout.TAGGED),
        int(ApiKey.SHARE_FETCH): (_share_fetch_body, TailLayout.LAST_FIELD),
        int(ApiKey.SHARE_ACKNOWLEDGE): (_share_acknowledge_body, TailLayout.LAST_FIELD),
    }
)


def walkable(api_key: int, version: int) -> bool:
    """Whether :class:`TailFinder` can walk a response of this API version: Fetch v12+
    (flexible), ShareFetch and ShareAcknowledge (every version is flexible)."""
    return api_key in _BODIES and (api_key != ApiKey.FETCH or version >= _FIRST_FLEXIBLE_FETCH)


def tail_layout(api_key: int) -> TailLayout:
    """How the tail of this API's responses holds its node endpoints (Produce's and Fetch's
    as a tagged field)."""
    entry = _BODIES.get(api_key)
    return TailLayout.TAGGED if entry is None else entry[1]


def _walk(api_key: int, version: int, *, header: bool) -> _Walk:
    body, _layout = _BODIES[api_key]
    if header:
        yield from _header()
    yield from body(version)
    yield 0


class TailFinder:
    """Finds where the tail of a response payload (see :func:`walkable`) starts, fed the
    payload in pieces of any size; record bytes are skipped, never copied. With ``header``
    false it is fed the body alone, without the response header.

    :meth:`feed` raises :class:`VarintError` for a malformed varint; a response that ends
    before the walk reached its tail is told by :attr:`tail_start` staying ``None``.

    :raises LocalProtocolError: at construction, for an API version that is not walkable.
    """

    __slots__ = ("_pending", "_position", "_walk", "_want", "tail_start")

    def __init__(self, api_key: int, version: int, *, header: bool = True) -> None:
        if not walkable(api_key, version):
            raise LocalProtocolError(f"no tail walk for API {api_key} v{version}")
        self._walk = _walk(api_key, version, header=header)
        self._want = next(self._walk)
        self._pending = bytearray()
        self._position = 0
        self.tail_start: int | None = None
        """Offset of the tail in the payload, once the walk got there."""

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
    """A response's tail: the node endpoints, and any other top-level tag as sent."""

    node_endpoints: tuple[NodeEndpoint, ...]
    others: tuple[tuple[int, bytes], ...]


def is_empty_tail(tail: Buffer, layout: TailLayout) -> bool:
    """Whether ``tail`` names no endpoint and holds no tagged field (Kafka's usual answer)."""
    return bytes(tail) == _EMPTY_TAILS[layout]


def _string(data: Buffer, position: int) -> tuple[str | None, int]:
    length, position = decode_unsigned_varint(data, position)
    if length == 0:
        return None, position
    end = position + length - 1
    if end > len(data):
        raise RemoteProtocolError("a node endpoint string runs past the response")
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


def _node_endpoints(data: Buffer, position: int) -> tuple[tuple[NodeEndpoint, ...], int]:
    """The compact array of node endpoints at ``position``, and the position after it."""
    count, position = decode_unsigned_varint(data, position)
    endpoints = []
    for _ in range(max(count - 1, 0)):
        (node_id,) = _INT32.unpack_from(data, position)
        host, position = _string(data, position + _INT32.size)
        (port,) = _INT32.unpack_from(data, position)
        rack, position = _string(data, position + _INT32.size)
        tags_end = skip_tagged_fields(data, position)
        if host is None:
            raise RemoteProtocolError(f"node endpoint {node_id} has a null host")
        if tags_end > len(data):
            raise RemoteProtocolError(f"node endpoint {node_id} runs past the response")
        tags = bytes(data[position:tags_end])
        endpoints.append(NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack, tags=tags))
        position = tags_end
    return tuple(endpoints), position


def _tagged(tail: Buffer, position: int, endpoints_tag: bool) -> ResponseTail:
    """The top-level tagged fields at ``position``, to the end of ``tail``; with
    ``endpoints_tag``, tag 0 holds the node endpoints."""
    count, position = decode_unsigned_varint(tail, position)
    endpoints: tuple[NodeEndpoint, ...] = ()
    others = []
    for _ in range(count):
        tag, position = decode_unsigned_varint(tail, position)
        size, position = decode_unsigned_varint(tail, position)
        field = memoryview(tail)[position : position + size]
        if len(field) < size:
            raise RemoteProtocolError(f"tagged field {tag} runs past the response")
        if endpoints_tag and tag == NODE_ENDPOINTS_TAG:
            endpoints, end = _node_endpoints(field, 0)
            if end != size:
                raise RemoteProtocolError("node endpoints do not fill their tagged field")
        else:
            others.append((tag, bytes(field)))
        position += size
    if position != len(tail):
        raise RemoteProtocolError(f"{len(tail) - position} bytes after the top-level tags")
    return ResponseTail(node_endpoints=endpoints, others=tuple(others))


def read_tail(tail: Buffer, layout: TailLayout = TailLayout.TAGGED) -> ResponseTail:
    """Decode a response's tail (all of ``tail``), laid out as ``layout`` says.

    :raises RemoteProtocolError: malformed, or bytes left over after the last field.
    """
    try:
        if layout is TailLayout.TAGGED:
            return _tagged(tail, 0, endpoints_tag=True)
        endpoints, position = _node_endpoints(tail, 0)
        fields = _tagged(tail, position, endpoints_tag=False)
    except (VarintError, struct.error, UnicodeDecodeError) as err:
        raise RemoteProtocolError(f"malformed response tail: {err}") from err
    return ResponseTail(node_endpoints=endpoints, others=fields.others)


def body_tail(api_key: int, version: int, body: Buffer) -> memoryview:
    """The tail of a whole response body (after its header), found by :class:`TailFinder`.

    :raises LocalProtocolError: the API version is not walkable.
    :raises RemoteProtocolError: the body is malformed or ends before its tail.
    """
    finder = TailFinder(api_key, version, header=False)
    try:
        finder.feed(body)
    except VarintError as err:
        raise RemoteProtocolError(f"malformed response body: {err}") from err
    if finder.tail_start is None:
        raise RemoteProtocolError("the response body ends before its tail")
    return memoryview(body)[finder.tail_start :]


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


def _padded_fields(fields: list[tuple[int, bytes]], length: int) -> bytes | None:
    """``fields`` (sorted) encoded as a tagged-field section of exactly ``length`` bytes,
    padded with one of :data:`PADDING_TAGS`; ``None`` if it does not fit."""
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


def encode_tail(
    tail: ResponseTail, *, length: int, layout: TailLayout = TailLayout.TAGGED
) -> bytes | None:
    """``tail`` encoded as ``layout`` in exactly ``length`` bytes, padded with an unknown
    top-level tagged field (one of :data:`PADDING_TAGS`); ``None`` if it does not fit (or
    another tag sorts after the pad)."""
    if layout is TailLayout.LAST_FIELD:
        endpoints = _encode_node_endpoints(tail.node_endpoints)
        fields = _padded_fields(sorted(tail.others), length - len(endpoints))
        return None if fields is None else endpoints + fields
    tagged = sorted(
        [
            *(
                [(NODE_ENDPOINTS_TAG, _encode_node_endpoints(tail.node_endpoints))]
                if tail.node_endpoints
                else []
            ),
            *tail.others,
        ]
    )
    return _padded_fields(tagged, length)
