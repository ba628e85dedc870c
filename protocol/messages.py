"""Request and response bodies as kio dataclasses: the one module that imports kio.

kio generates a frozen, slotted dataclass per API, version and nested struct from Kafka's
JSON schemas, and reads them with a native (Rust) reader. Keeping every kio import here
means the next kio change touches one file. Payloads handed out are kio's dataclasses;
callers change them with ``dataclasses.replace`` and build nested values of the right
version through :func:`nested_class`, without importing kio themselves.

Record data (``records`` fields) stays one ``bytes`` object per partition: nothing here
looks inside it, so a multi-MiB Fetch response costs one copy per partition.

kio's native reader sizes each array from the count on the wire before it reads the
elements, and a count of a few billion makes the allocation fail, which aborts the whole
process instead of raising. A peer must not be able to do that with one frame, so every
body is first walked by :func:`_check_shape`, which reads only lengths and counts and
refuses any count that the bytes left could not hold.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable, Mapping
from enum import IntEnum
from functools import cache
from types import MappingProxyType
from typing import Any, Final, NewType, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from protocol.buffers import Buffers, BufferSink
from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.varint import VarintError, decode_unsigned_varint

__all__ = [
    "ADDRESS_VERSIONS",
    "INTERCEPTED_VERSIONS",
    "ApiKey",
    "Body",
    "ErrorCode",
    "build",
    "carries_addresses",
    "convert",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_buffers",
    "has_field",
    "nested_class",
    "produce_acks",
    "request_class",
    "response_class",
]


Body = NewType("Body", object)
"""A decoded request or response body (a kio dataclass), opaque outside ``protocol``: the
proxy reads and changes bodies through the typed views of ``protocol`` (``fetch_bodies``,
``offset_bodies``, ...), which know which version holds which field."""


class ApiKey(IntEnum):
    """Kafka API keys (``org.apache.kafka.common.protocol.ApiKeys``).

    Keys 4-7 are the ZooKeeper-era inter-broker APIs that Kafka 4 removed; kio has no
    schemas for them, but they are named so that logs can say what passed through.
    """

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


def _kio_versions(api_key: ApiKey) -> range:
    versions = sorted(schema_name_map[api_key_map[api_key]])
    return range(versions[0], versions[-1] + 1)


INTERCEPTED_VERSIONS: Final[Mapping[ApiKey, range]] = MappingProxyType(
    {
        # The read path, up to the newest versions Kafka 4.3 speaks (Fetch v18 adds only a
        # follower's tagged high watermark, KIP-1166; ListOffsets v11 only the sentinel -6,
        # EARLIEST_PENDING_UPLOAD). kio has no schemas below Fetch v4 and
        # OffsetForLeaderEpoch v2 (Kafka 4 removed them, KIP-896), so the proxy never
        # advertises those.
        ApiKey.FETCH: range(4, 19),
        ApiKey.LIST_OFFSETS: range(1, 12),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: range(2, 5),
        # Address rewriting, version negotiation, acks and the pipeline's DeleteRecords:
        # every version kio knows.
        ApiKey.API_VERSIONS: _kio_versions(ApiKey.API_VERSIONS),
        ApiKey.METADATA: _kio_versions(ApiKey.METADATA),
        ApiKey.FIND_COORDINATOR: _kio_versions(ApiKey.FIND_COORDINATOR),
        ApiKey.DESCRIBE_CLUSTER: _kio_versions(ApiKey.DESCRIBE_CLUSTER),
        ApiKey.PRODUCE: _kio_versions(ApiKey.PRODUCE),
        ApiKey.SHARE_FETCH: _kio_versions(ApiKey.SHARE_FETCH),
        ApiKey.SHARE_ACKNOWLEDGE: _kio_versions(ApiKey.SHARE_ACKNOWLEDGE),
        ApiKey.DELETE_RECORDS: _kio_versions(ApiKey.DELETE_RECORDS),
        # Who the client logs in as (for per-user fetch quotas); passed through unchanged.
        ApiKey.SASL_HANDSHAKE: _kio_versions(ApiKey.SASL_HANDSHAKE),
        ApiKey.SASL_AUTHENTICATE: _kio_versions(ApiKey.SASL_AUTHENTICATE),
    }
)
"""API versions the proxy decodes; any other request passes through as raw bytes."""

ADDRESS_VERSIONS: Final[Mapping[ApiKey, int]] = MappingProxyType(
    {
        ApiKey.METADATA: 0,  # brokers
        ApiKey.FIND_COORDINATOR: 0,  # the coordinator, or each of coordinators (v4+)
        ApiKey.DESCRIBE_CLUSTER: 0,  # brokers
        ApiKey.PRODUCE: 10,  # node_endpoints (KIP-951)
        ApiKey.FETCH: 16,  # node_endpoints (KIP-951)
        ApiKey.SHARE_FETCH: 0,  # node_endpoints (KIP-932)
        ApiKey.SHARE_ACKNOWLEDGE: 0,  # node_endpoints (KIP-932)
    }
)
"""The first version of each API whose responses may name brokers by host and port. Every
later version, known to kio or not, is presumed to name them too: such a response is never
passed on undecoded. Each of these APIs is in ``INTERCEPTED_VERSIONS``, so the proxy
advertises only the versions it can rewrite."""


_FIRST_ADDRESS_VERSIONS: Final = {int(key): first for key, first in ADDRESS_VERSIONS.items()}


def carries_addresses(api_key: int, api_version: int) -> bool:
    """Whether a response of this API version may name brokers by host and port."""
    first = _FIRST_ADDRESS_VERSIONS.get(api_key)
    return first is not None and api_version >= first


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """The kio dataclass of a request body.

    :raises RemoteProtocolError: UNSUPPORTED_VERSION if kio has no such API or version.
    """
    return _load_schema(load_request_schema, "request", api_key, api_version)


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    """The kio dataclass of a response body.

    :raises RemoteProtocolError: UNSUPPORTED_VERSION if kio has no such API or version.
    """
    return _load_schema(load_response_schema, "response", api_key, api_version)


def _load_schema(
    load: Callable[[int, int], type[Any]], kind: str, api_key: int, api_version: int
) -> type[Any]:
    try:
        return load(api_key, api_version)
    except KioIndexError as err:
        raise RemoteProtocolError(
            f"no {kind} schema for API key {api_key} version {api_version}",
            KafkaError.UNSUPPORTED_VERSION,
        ) from err


_NESTED_CLASSES: dict[tuple[type[Any], str], type[Any]] = {}
""":func:`nested_class`'s answers (a plain dict, as ``_READERS`` below: mypy does not accept
classes as ``functools.cache`` keys)."""


def nested_class(entity_class: type[Any], field_name: str) -> type[Any]:
    """The kio class held by an entity or list-of-entities field of ``entity_class``.

    Lets callers build, say, a Fetch ``AbortedTransaction`` of the same version as the
    response they are editing without naming kio's modules. Looked up once per class and
    field (kio's classes never change): every remote-served Fetch asks for a few, and the
    lookup (``dataclasses.fields`` and kio's field classification) is not cheap.

    :raises LocalProtocolError: if there is no such field or it does not hold entities.
    """
    key = (entity_class, field_name)
    found = _NESTED_CLASSES.get(key)
    if found is None:
        found = _NESTED_CLASSES[key] = _find_nested_class(entity_class, field_name)
    return found


def _find_nested_class(entity_class: type[Any], field_name: str) -> type[Any]:
    try:
        field = next(f for f in dataclasses.fields(entity_class) if f.name == field_name)
    except (TypeError, StopIteration) as err:
        raise LocalProtocolError(f"{entity_class!r} has no field {field_name!r}") from err
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        return kind.type_
    raise LocalProtocolError(f"{entity_class.__name__}.{field_name} does not hold entities")


def build(entity_class: type[Any], **candidates: Any) -> Any:
    """An entity of ``entity_class`` from those of ``candidates`` that its version has.

    Fields come and go between versions (``log_start_offset`` from Fetch v5, ``topic_id``
    instead of ``topic`` from v13, ...): callers pass every field they know a value for and
    get the entity of the exact version they hold, without asking which fields it has.

    :raises LocalProtocolError: a field the version has is missing from ``candidates``.
    """
    names = _field_names(entity_class)
    try:
        return entity_class(**{name: value for name, value in candidates.items() if name in names})
    except TypeError as err:
        raise LocalProtocolError(f"cannot build {entity_class.__name__}: {err}") from err


def convert(entity: Any, target_class: type[Any]) -> Any:
    """``entity`` as an instance of ``target_class``, the same body at another version, for
    versions whose fields are the same (ListOffsets v7-v9, say): nested entities are
    converted too.

    :raises LocalProtocolError: ``target_class`` has a field ``entity`` lacks.
    """
    values: dict[str, Any] = {}
    for field in dataclasses.fields(target_class):
        if not hasattr(entity, field.name):
            raise LocalProtocolError(
                f"{type(entity).__name__} has no {field.name!r} for {target_class.__name__}"
            )
        value = getattr(entity, field.name)
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            value = tuple(convert(item, kind.type_) for item in value)
        elif isinstance(kind, EntityField) and value is not None:
            value = convert(value, kind.type_)
        values[field.name] = value
    return target_class(**values)


def _field_names(entity_class: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(entity_class)
    if names is None:
        names = _FIELD_NAMES[entity_class] = frozenset(
            field.name for field in dataclasses.fields(entity_class)
        )
    return names


def has_field(entity_class: type[Any], name: str) -> bool:
    """Whether this version of an entity has the field ``name``."""
    return name in _field_names(entity_class)


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def decode_request(api_key: int, api_version: int, body: bytes | memoryview) -> Any:
    """Decode a request body (the frame after its header) into a kio dataclass.

    :raises RemoteProtocolError: UNSUPPORTED_VERSION if kio has no such API or version,
        INVALID_REQUEST if the body does not match the schema exactly.
    """
    return _decode(request_class(api_key, api_version), body)


def decode_response(api_key: int, api_version: int, body: bytes | memoryview) -> Any:
    """Decode a response body (the frame after its header) into a kio dataclass.

    An error code that kio does not know (one added to Kafka after kio 0.6.5) cannot be
    represented in kio's ``ErrorCode`` and fails the decode; the caller then forwards the
    response as it is.

    :raises RemoteProtocolError: UNSUPPORTED_VERSION if kio has no such API or version,
        INVALID_REQUEST if the body does not match the schema exactly.
    """
    if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
        body = _unset_start_times_as_zero(body)
    return _decode(response_class(api_key, api_version), body)


def _unset_start_times_as_zero(body: bytes | memoryview) -> bytes | memoryview:
    """A DescribeTransactions v0 body with every ``TransactionStartTimeMs`` of -1 (no
    transaction open) sent as 0: kio reads the field as a timestamp and refuses negative
    ones, which would make an idle transactional id undecodable. Callers read a start at
    the epoch as "none". A body that ends early is returned as it is, for the decoder to
    refuse.
    """
    view = memoryview(body)
    patched: bytearray | None = None
    try:
        position = _I32.size  # throttle_time_ms
        count, position = _uvarint(view, position)
        for _ in range(count - 1):
            position += _I16.size  # error_code
            position = _skip_compact_bytes(view, position)  # transactional_id
            position = _skip_compact_bytes(view, position)  # transaction_state
            position += _I32.size  # transaction_timeout_ms
            if _I64.unpack_from(view, position)[0] < 0:
                patched = patched if patched is not None else bytearray(view)
                _I64.pack_into(patched, position, 0)
            position += _I64.size + _I64.size + _I16.size  # start, producer id and epoch
            topics, position = _uvarint(view, position)
            for _ in range(topics - 1):
                position = _skip_compact_bytes(view, position)  # name
                partitions, position = _uvarint(view, position)
                position += max(partitions - 1, 0) * _I32.size
                position = _tagged_fields_skip({})(view, position)
            position = _tagged_fields_skip({})(view, position)
    except (struct.error, IndexError, VarintError, _MalformedError):
        return body
    return body if patched is None else bytes(patched)


def encode_request(payload: Any) -> bytes:
    """Encode a kio request dataclass into a body (no header, no size prefix).

    :raises LocalProtocolError: if ``payload`` is not a request or holds unencodable values.
    """
    return _encode(payload, EntityType.request)


def encode_response(payload: Any) -> bytes:
    """Encode a kio response dataclass into a body (no header, no size prefix).

    :raises LocalProtocolError: if ``payload`` is not a response or holds unencodable values.
    """
    return _encode(payload, EntityType.response)


def encode_response_buffers(payload: Any, *, head: bytes) -> Buffers:
    """``head + encode_response(payload)``, as buffers: large values (a Fetch's records,
    views of remote data included) are not copied (:mod:`protocol.buffers`).

    :raises LocalProtocolError: if ``payload`` is not a response or holds unencodable values.
    """
    sink = BufferSink(head)
    _encode_into(sink, payload, EntityType.response)
    return sink.buffers()


_ACKS: Final = struct.Struct(">h")
_PRODUCE_FIRST_TRANSACTIONAL: Final = 3
_PRODUCE_FIRST_FLEXIBLE: Final = 9


def produce_acks(api_version: int, body: bytes | memoryview) -> int:
    """Read a Produce request's ``acks`` without decoding its records.

    The proxy needs it for every Produce: with ``acks=0`` the broker sends no response, so
    none may be waited for. The body starts with ``transactional_id`` (v3+; a nullable
    string with an int16 length, compact from v9), then ``acks int16``.

    :raises RemoteProtocolError: INVALID_REQUEST if the body ends before ``acks``.
    """
    position = 0
    try:
        if api_version >= _PRODUCE_FIRST_FLEXIBLE:
            length_plus_one, position = decode_unsigned_varint(body, 0)
            position += max(length_plus_one - 1, 0)
        elif api_version >= _PRODUCE_FIRST_TRANSACTIONAL:
            length = _I16.unpack_from(body, 0)[0]
            position = _I16.size + max(length, 0)
        (acks,) = _ACKS.unpack_from(body, position)
    except (VarintError, struct.error) as err:
        raise RemoteProtocolError(f"Produce v{api_version} body ends before acks") from err
    return int(acks)


def _decode(schema: type[Any], body: bytes | memoryview) -> Any:
    _check_shape(schema, body)
    try:
        payload, _size = _reader(schema)(body, 0)
    except (SerialError, ValueError, TypeError, KeyError) as err:
        # KeyError: kio refuses tagged fields it has no schema for.
        raise RemoteProtocolError(f"{_describe(schema)}: {err}") from err
    return payload


def _encode(payload: Any, entity_type: EntityType) -> bytes:
    # A BufferSink, not a BytesIO: a value may be records in pieces (Buffers), which only
    # the sink knows how to write.
    sink = BufferSink()
    _encode_into(sink, payload, entity_type)
    return bytes(sink.buffers())


def _encode_into(sink: io.BytesIO | BufferSink, payload: Any, entity_type: EntityType) -> None:
    schema = type(payload)
    if getattr(schema, "__type__", None) is not entity_type:
        raise LocalProtocolError(f"{schema.__name__} is not a kio {entity_type.name} body")
    try:
        _writer(schema)(sink, payload)
    except (SerialError, struct.error, TypeError, ValueError, AttributeError) as err:
        raise LocalProtocolError(f"cannot encode {_describe(schema)}: {err}") from err


def _describe(schema: type[Any]) -> str:
    return f"{schema.__name__} v{schema.__version__}"


# Per-class caches are plain dicts: mypy does not accept classes as functools.cache keys.
_READERS: dict[type[Any], Callable[[bytes | memoryview, int], tuple[Any, int]]] = {}
_Writer = Callable[[io.BytesIO | BufferSink, Any], None]
"""kio's writer of one class; any object with ``write`` will do as its sink."""
_WRITERS: dict[type[Any], _Writer] = {}


def _reader(schema: type[Any]) -> Callable[[bytes | memoryview, int], tuple[Any, int]]:
    reader = _READERS.get(schema)
    if reader is None:
        reader = _READERS[schema] = entity_reader(schema)
    return reader


def _writer(schema: type[Any]) -> _Writer:
    writer = _WRITERS.get(schema)
    if writer is None:
        writer = _WRITERS[schema] = cast(_Writer, entity_writer(schema))
    return writer


# Shape check: everything below walks a body as its schema describes, reading only the
# lengths and counts, so that kio's reader never sees a count the body cannot hold.

_Skip = Callable[[memoryview, int], int]
"""Skips one encoded value at a position and returns the position after it."""

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")

_FIXED_SIZES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "bool": 1,
        "int8": 1,
        "uint8": 1,
        "int16": 2,
        "uint16": 2,
        "error_code": 2,
        "int32": 4,
        "uint32": 4,
        "timedelta_i32": 4,
        "int64": 8,
        "uint64": 8,
        "float64": 8,
        "timedelta_i64": 8,
        "datetime_i64": 8,
        "uuid": 16,
    }
)


class _MalformedError(Exception):
    """A count or length that the bytes left cannot hold."""


def _check_shape(schema: type[Any], body: bytes | memoryview) -> None:
    view = memoryview(body)
    try:
        end = _shape(schema).skip(view, 0)
    except (struct.error, IndexError, VarintError, _MalformedError) as err:
        raise RemoteProtocolError(f"{_describe(schema)} is malformed: {err}") from err
    if end != len(view):
        raise RemoteProtocolError(
            f"{_describe(schema)} takes {end} bytes but the body has {len(view)}"
        )


def _uvarint(buf: memoryview, position: int) -> tuple[int, int]:
    first = buf[position]
    if first < 0x80:
        return first, position + 1
    return decode_unsigned_varint(buf, position)


def _skip_legacy_string(buf: memoryview, position: int) -> int:
    length: int = _I16.unpack_from(buf, position)[0]
    return position + 2 + max(length, 0)


def _skip_legacy_bytes(buf: memoryview, position: int) -> int:
    length: int = _I32.unpack_from(buf, position)[0]
    return position + 4 + max(length, 0)


def _skip_compact_bytes(buf: memoryview, position: int) -> int:
    length_plus_one, position = _uvarint(buf, position)
    return position + max(length_plus_one - 1, 0)


def _skip_fixed(size: int) -> _Skip:
    def skip(_buf: memoryview, position: int) -> int:
        return position + size

    return skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Shape:
    """How to skip one encoded value, and the fewest bytes it can take."""

    skip: _Skip
    min_size: int
    fixed: bool = False


def _primitive_shape(kafka_type: str, flexible: bool) -> _Shape:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _Shape(skip=_skip_fixed(size), min_size=size, fixed=True)
    if kafka_type not in ("string", "bytes", "records"):
        raise LocalProtocolError(f"kio field type {kafka_type!r} is unknown to the shape check")
    if flexible:
        return _Shape(skip=_skip_compact_bytes, min_size=1)
    if kafka_type == "string":
        return _Shape(skip=_skip_legacy_string, min_size=2)
    return _Shape(skip=_skip_legacy_bytes, min_size=4)


def _array_shape(element: _Shape, flexible: bool) -> _Shape:
    skip_element = element.skip
    element_size = max(element.min_size, 1)

    def skip(buf: memoryview, position: int) -> int:
        if flexible:
            count, position = _uvarint(buf, position)
            count -= 1
        else:
            count = _I32.unpack_from(buf, position)[0]
            position += 4
        if count <= 0:
            return position
        if count * element_size > len(buf) - position:
            raise _MalformedError(f"array of {count} elements at {position} overruns the body")
        if element.fixed:
            return position + count * element.min_size
        for _ in range(count):
            position = skip_element(buf, position)
        return position

    return _Shape(skip=skip, min_size=1 if flexible else 4)


def _nullable_entity_shape(entity: _Shape) -> _Shape:
    """KIP-893 nullable struct: an int8 marker, -1 for null, then the struct."""
    skip_entity = entity.skip

    def skip(buf: memoryview, position: int) -> int:
        if _I8.unpack_from(buf, position)[0] < 0:
            return position + 1
        return skip_entity(buf, position + 1)

    return _Shape(skip=skip, min_size=1)


def _field_shape(field: dataclasses.Field[Any], flexible: bool, tagged: bool) -> _Shape:
    # As in kio's writer: tagged fields are never nullable on the wire (absent means default).
    optional = not tagged and is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        return _primitive_shape(get_schema_field_type(field), flexible)
    if isinstance(kind, PrimitiveTupleField):
        return _array_shape(_primitive_shape(get_schema_field_type(field), flexible), flexible)
    entity = _shape(kind.type_)
    if isinstance(kind, EntityTupleField):
        return _array_shape(entity, flexible)
    return _nullable_entity_shape(entity) if optional else entity


def _tagged_fields_skip(tags: Mapping[int, _Skip]) -> _Skip:
    def skip(buf: memoryview, position: int) -> int:
        count, position = _uvarint(buf, position)
        for _ in range(count):
            tag, position = _uvarint(buf, position)
            size, position = _uvarint(buf, position)
            end = position + size
            if end > len(buf):
                raise _MalformedError(f"tagged field {tag} at {position} overruns the body")
            skip_value = tags.get(tag)
            if skip_value is not None and skip_value(buf[position:end], 0) > size:
                raise _MalformedError(f"tagged field {tag} at {position} overruns its size")
            position = end
        return position

    return skip


def _sequence_skip(steps: list[_Skip]) -> _Skip:
    def skip(buf: memoryview, position: int) -> int:
        for step in steps:
            position = step(buf, position)
        return position

    return skip


_SHAPES: dict[type[Any], _Shape] = {}


def _shape(schema: type[Any]) -> _Shape:
    shape = _SHAPES.get(schema)
    if shape is None:
        shape = _SHAPES[schema] = _build_shape(schema)
    return shape


def _build_shape(schema: type[Any]) -> _Shape:
    flexible = bool(schema.__flexible__)
    steps: list[_Skip] = []
    fixed_run = 0
    min_size = 0
    tags: dict[int, _Skip] = {}
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        shape = _field_shape(field, flexible, tagged=tag is not None)
        if tag is not None:
            tags[tag] = shape.skip
            continue
        min_size += shape.min_size
        if shape.fixed:
            fixed_run += shape.min_size
            continue
        if fixed_run:
            steps.append(_skip_fixed(fixed_run))
            fixed_run = 0
        steps.append(shape.skip)
    if not steps and not flexible:
        return _Shape(skip=_skip_fixed(fixed_run), min_size=min_size, fixed=True)
    if fixed_run:
        steps.append(_skip_fixed(fixed_run))
    if flexible:
        steps.append(_tagged_fields_skip(tags))
        min_size += 1
    if len(steps) == 1:
        return _Shape(skip=steps[0], min_size=min_size)
    return _Shape(skip=_sequence_skip(steps), min_size=min_size)
