"""Request and response header codecs (header versions 0, 1 and 2).

Kafka puts a header in front of every message body:

- request header v0: ``api_key int16, api_version int16, correlation_id int32``;
- v1 adds ``client_id``, a nullable string with an int16 length (even in flexible
  versions, where Kafka keeps the legacy encoding so that any broker can read it);
- v2 adds tagged fields (an unsigned varint count, then tag, size, bytes per field);
- response header v0: ``correlation_id int32``; v1 adds tagged fields.

Which header an API version uses follows from whether its body is flexible (Kafka's
``ApiMessageType.requestHeaderVersion``/``responseHeaderVersion``), with two exceptions
kept here: ControlledShutdown v0 has the v0 request header, and ApiVersions responses
always have the v0 response header so that a client can read the answer to a version it
guessed wrong. The first eight bytes of every request header have the same layout, so
:func:`peek_request` routes a frame without decoding anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Final

from protocol.errors import KafkaError, LocalProtocolError, RemoteProtocolError
from protocol.messages import ApiKey, request_class, response_class
from protocol.varint import VarintError, decode_unsigned_varint

__all__ = [
    "RequestHeader",
    "encode_request_header",
    "encode_response_header",
    "parse_request_header",
    "parse_response_header",
    "peek_request",
    "request_header_version",
    "response_header_version",
]

_REQUEST_PREFIX: Final = struct.Struct(">hhi")
_CORRELATION_ID: Final = struct.Struct(">i")
_STRING_LENGTH: Final = struct.Struct(">h")
_NO_TAGGED_FIELDS: Final = b"\x00"

# ControlledShutdown (key 7) left Kafka with ZooKeeper, so kio has no schema for it; its
# versions 0-3 are kept here because v0 is the one request with header v0.
_CONTROLLED_SHUTDOWN: Final = 7
_CONTROLLED_SHUTDOWN_VERSIONS: Final = range(4)
_CONTROLLED_SHUTDOWN_FIRST_FLEXIBLE: Final = 3

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """A decoded request header; the body is ``frame[size:]``."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    size: int


def peek_request(frame: Buffer) -> tuple[int, int, int]:
    """Read ``(api_key, api_version, correlation_id)`` with one unpack and nothing else.

    Lets the proxy route and match a request that it forwards byte for byte without
    knowing its API.

    :raises RemoteProtocolError: if the frame is shorter than eight bytes.
    """
    try:
        api_key, api_version, correlation_id = _REQUEST_PREFIX.unpack_from(frame)
    except struct.error as err:
        raise RemoteProtocolError(
            f"request frame of {len(frame)} bytes is shorter than a request header",
            KafkaError.INVALID_REQUEST,
        ) from err
    return api_key, api_version, correlation_id


def _flexibility(api_key: int, api_version: int, *, request: bool) -> bool | None:
    if api_key == _CONTROLLED_SHUTDOWN:
        if api_version not in _CONTROLLED_SHUTDOWN_VERSIONS:
            return None
        return api_version >= _CONTROLLED_SHUTDOWN_FIRST_FLEXIBLE
    try:
        schema = (request_class if request else response_class)(api_key, api_version)
    except RemoteProtocolError:
        return None
    return bool(schema.__flexible__)


@cache
def request_header_version(api_key: int, api_version: int) -> int | None:
    """Header version of a request, or ``None`` for an API or version we do not know."""
    if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    flexible = _flexibility(api_key, api_version, request=True)
    if flexible is None:
        return None
    return 2 if flexible else 1


@cache
def response_header_version(api_key: int, api_version: int) -> int | None:
    """Header version of a response, or ``None`` for an API or version we do not know."""
    flexible = _flexibility(api_key, api_version, request=False)
    if flexible is None:
        return None
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if flexible else 0


def _skip_tagged_fields(frame: Buffer, position: int) -> int:
    """Skip a tagged-field section; headers define no tags, so every tag is unknown."""
    try:
        count, position = decode_unsigned_varint(frame, position)
        for _ in range(count):
            _tag, position = decode_unsigned_varint(frame, position)
            size, position = decode_unsigned_varint(frame, position)
            position += size
    except VarintError as err:
        raise RemoteProtocolError(f"bad tagged fields in header: {err}") from err
    if position > len(frame):
        raise RemoteProtocolError("tagged field runs past the end of the frame")
    return position


def parse_request_header(frame: Buffer) -> RequestHeader:
    """Decode the request header at the start of ``frame``.

    A client id that is not valid UTF-8 is decoded with replacement characters, as Kafka's
    ``new String(bytes, UTF_8)`` does, rather than refused.

    :raises RemoteProtocolError: UNSUPPORTED_VERSION for an API or version we do not know,
        INVALID_REQUEST for a truncated or malformed header.
    """
    api_key, api_version, correlation_id = peek_request(frame)
    header_version = request_header_version(api_key, api_version)
    if header_version is None:
        raise RemoteProtocolError(
            f"unknown API key {api_key} version {api_version}", KafkaError.UNSUPPORTED_VERSION
        )
    position = _REQUEST_PREFIX.size
    client_id = None
    if header_version >= 1:
        try:
            (length,) = _STRING_LENGTH.unpack_from(frame, position)
        except struct.error as err:
            raise RemoteProtocolError("request header ends before its client id") from err
        position += _STRING_LENGTH.size
        if length >= 0:
            if position + length > len(frame):
                raise RemoteProtocolError("client id runs past the end of the frame")
            client_id = bytes(frame[position : position + length]).decode("utf-8", "replace")
            position += length
    if header_version >= 2:
        position = _skip_tagged_fields(frame, position)
    return RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
        header_version=header_version,
        size=position,
    )


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Encode the header for a request we send, in the version its API requires.

    :raises LocalProtocolError: for an API or version we do not know, or a client id longer
        than an int16 length allows.
    """
    header_version = request_header_version(api_key, api_version)
    if header_version is None:
        raise LocalProtocolError(f"unknown API key {api_key} version {api_version}")
    try:
        prefix = _REQUEST_PREFIX.pack(api_key, api_version, correlation_id)
    except struct.error as err:
        raise LocalProtocolError(f"request header field out of range: {err}") from err
    if header_version == 0:
        return prefix
    if client_id is None:
        encoded = _STRING_LENGTH.pack(-1)
    else:
        raw = client_id.encode()
        if len(raw) > 0x7FFF:
            raise LocalProtocolError(f"client id of {len(raw)} bytes exceeds an int16 length")
        encoded = _STRING_LENGTH.pack(len(raw)) + raw
    if header_version == 1:
        return prefix + encoded
    return prefix + encoded + _NO_TAGGED_FIELDS


def parse_response_header(frame: Buffer, header_version: int) -> tuple[int, int]:
    """Decode a response header; return ``(correlation_id, size)`` (body is ``frame[size:]``).

    :raises RemoteProtocolError: if the header is truncated or its tagged fields malformed.
    :raises LocalProtocolError: for a header version other than 0 or 1.
    """
    if header_version not in (0, 1):
        raise LocalProtocolError(f"response header version {header_version} does not exist")
    try:
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame)
    except struct.error as err:
        raise RemoteProtocolError(
            f"response frame of {len(frame)} bytes is shorter than a response header"
        ) from err
    position = _CORRELATION_ID.size
    if header_version == 1:
        position = _skip_tagged_fields(frame, position)
    return correlation_id, position


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Encode a response header (no tagged fields: Kafka defines none for headers).

    :raises LocalProtocolError: for a header version other than 0 or 1 or an out-of-range id.
    """
    if header_version not in (0, 1):
        raise LocalProtocolError(f"response header version {header_version} does not exist")
    try:
        encoded = _CORRELATION_ID.pack(correlation_id)
    except struct.error as err:
        raise LocalProtocolError(f"correlation id out of range: {err}") from err
    return encoded if header_version == 0 else encoded + _NO_TAGGED_FIELDS
