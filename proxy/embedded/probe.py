"""Blocking Kafka round trips used to tell when a broker is ready and what it supports.

ApiVersions v0 and Metadata v0 are hand-encoded here: they are the oldest versions, which every
broker answers (Apache Kafka 0.10 to 4.x, Tansu), their layouts are tiny and frozen, and encoding
them directly keeps the harness independent of the codec layer and of any client library's
connection logic (a client would retry and hide a broker that is not ready). The brokers it
finds are the product's own :class:`~storage.kafka_client.BrokerAddress` values.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct

from storage.kafka_client import BrokerAddress

__all__ = ["KafkaProbeError", "api_versions", "metadata_brokers"]

_API_VERSIONS = 18
_METADATA = 3
_CLIENT_ID = b"tierproxy-harness"
_MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # a Metadata v0 answer for a test cluster is far smaller

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_API_RANGE = struct.Struct(">hhh")  # api key, min version, max version


class KafkaProbeError(Exception):
    """The broker closed the connection, answered with an error, or sent something malformed."""


def api_versions(
    host: str, port: int, *, timeout_s: float = 2.0, tls: ssl.SSLContext | None = None
) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions answer: ``{api_key: (min_version, max_version)}``.

    ``tls`` is for SSL and SASL_SSL listeners; Kafka answers ApiVersions before a SASL login.

    :raises OSError: the connection failed or timed out (``ssl.SSLError`` for TLS failures).
    :raises KafkaProbeError: the broker answered with an error code or a malformed response.
    """
    body = _round_trip(host, port, _API_VERSIONS, b"", timeout_s=timeout_s, tls=tls)
    try:
        (error_code,) = _INT16.unpack_from(body, 0)
        (count,) = _INT32.unpack_from(body, 2)
        entries = [_API_RANGE.unpack_from(body, 6 + i * _API_RANGE.size) for i in range(count)]
    except struct.error as err:
        raise KafkaProbeError(f"malformed ApiVersions v0 response: {err}") from err
    if error_code:
        raise KafkaProbeError(f"ApiVersions failed with error code {error_code}")
    return {api_key: (low, high) for api_key, low, high in entries}


def metadata_brokers(host: str, port: int, *, timeout_s: float = 2.0) -> tuple[BrokerAddress, ...]:
    """The brokers a Metadata v0 request (for no topics in particular) lists.

    :raises OSError: the connection failed or timed out.
    :raises KafkaProbeError: the response was malformed.
    """
    body = _round_trip(host, port, _METADATA, _INT32.pack(0), timeout_s=timeout_s)
    try:
        (count,) = _INT32.unpack_from(body, 0)
        position = 4
        brokers = []
        for _ in range(count):
            (node_id,) = _INT32.unpack_from(body, position)
            (host_length,) = _INT16.unpack_from(body, position + 4)
            start = position + 6
            broker_host = body[start : start + host_length].decode()
            (broker_port,) = _INT32.unpack_from(body, start + host_length)
            position = start + host_length + 4
            brokers.append(BrokerAddress(node_id=node_id, host=broker_host, port=broker_port))
    except (struct.error, UnicodeDecodeError) as err:
        raise KafkaProbeError(f"malformed Metadata v0 response: {err}") from err
    return tuple(brokers)


def _round_trip(
    host: str,
    port: int,
    api_key: int,
    body: bytes,
    *,
    timeout_s: float,
    tls: ssl.SSLContext | None = None,
) -> bytes:
    """Send one version-0 request on a fresh connection; the response body after its header."""
    correlation_id = 1
    header = _HEADER_V1.pack(api_key, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    request = header + body
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout_s))
        if tls is not None:  # the TLS socket takes the connection over; it must close it
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=host))
        sock.sendall(_INT32.pack(len(request)) + request)
        (size,) = _INT32.unpack(_read_exactly(sock, 4))
        if not 4 <= size <= _MAX_RESPONSE_BYTES:
            raise KafkaProbeError(f"response of implausible size {size}")
        response = _read_exactly(sock, size)
    (answered,) = _INT32.unpack_from(response, 0)
    if answered != correlation_id:
        raise KafkaProbeError(f"correlation id {answered} in the response, sent {correlation_id}")
    return response[4:]


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise KafkaProbeError("the broker closed the connection mid-response")
        chunks += chunk
    return bytes(chunks)
