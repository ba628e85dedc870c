"""Ask the bootstrap brokers which brokers the cluster has, before listening.

The proxy gives every broker its own listener, so it must know the brokers before the first
client arrives: then each listener fronts exactly one broker from the start, and a client
that matches its bootstrap address with a broker's (librdkafka does) is never sent to the
wrong one. The exchange is the one every client starts with: ApiVersions v0 (which every
broker answers), then Metadata for no topics at the highest version both sides know.

A SASL listener answers nothing but ApiVersions before authentication, so with
:class:`SaslPlain` credentials the proxy logs in first (SaslHandshake v1, SaslAuthenticate v1
with the RFC 4616 PLAIN message). Client connections never use these credentials.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Final

from protocol.errors import KafkaError, RemoteProtocolError
from protocol.frames import FrameDecoder, encode_frame, foreign_protocol
from protocol.headers import (
    encode_request_header,
    parse_response_header,
    response_header_version,
)
from protocol.messages import (
    INTERCEPTED_VERSIONS,
    ApiKey,
    decode_response,
    encode_request,
    request_class,
)
from proxy.config import HostPort
from proxy.interceptors.addresses import BrokerAddress

__all__ = ["DiscoveryError", "SaslPlain", "discover_brokers"]

_CLIENT_ID: Final = "tierproxy-discovery"
# Metadata responses for no topics are small; anything bigger is not a Kafka broker.
_MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024


class DiscoveryError(Exception):
    """No bootstrap server told us the cluster's brokers (the message says why, per server)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SaslPlain:
    """Credentials for SASL/PLAIN (RFC 4616)."""

    username: str
    password: str = dataclasses.field(repr=False)

    @property
    def message(self) -> bytes:
        """``authzid NUL authcid NUL passwd`` with an empty authorisation id."""
        return b"\0" + self.username.encode() + b"\0" + self.password.encode()


async def discover_brokers(
    bootstrap: Sequence[HostPort],
    *,
    ssl_context: ssl.SSLContext | None,
    attempt_seconds: float,
    sasl: SaslPlain | None = None,
) -> list[BrokerAddress]:
    """Return the brokers of the cluster, asking the bootstrap servers in turn.

    :raises DiscoveryError: when none of them answers within ``attempt_seconds`` each.
    """
    failures: list[str] = []
    for address in bootstrap:
        try:
            async with asyncio.timeout(attempt_seconds):
                return await _ask(address, ssl_context, sasl)
        except TimeoutError:
            failures.append(
                f"{address}: no answer to ApiVersions within {attempt_seconds:g} s "
                "(is it a Kafka listener?)"
            )
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as err:
            failures.append(f"{address}: {str(err) or type(err).__name__}")
    raise DiscoveryError("; ".join(failures))


async def _ask(
    address: HostPort, context: ssl.SSLContext | None, sasl: SaslPlain | None
) -> list[BrokerAddress]:
    reader, writer = await asyncio.open_connection(
        address.host,
        address.port,
        ssl=context,
        server_hostname=address.host if context is not None else None,
    )
    try:
        versions = await _call(
            reader, writer, api_key=ApiKey.API_VERSIONS, api_version=0, correlation_id=1
        )
        if versions.error_code != KafkaError.NONE:
            raise RemoteProtocolError(f"ApiVersions failed with error {versions.error_code}")
        version = _metadata_version(versions.api_keys)
        if sasl is not None:
            await _log_in(reader, writer, sasl)
        metadata = await _call(
            reader,
            writer,
            api_key=ApiKey.METADATA,
            api_version=version,
            correlation_id=2,
            fields={
                "topics": (),
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
    finally:
        writer.close()
    return [
        BrokerAddress(node_id=int(b.node_id), address=HostPort(host=b.host, port=int(b.port)))
        for b in metadata.brokers
    ]


async def _log_in(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sasl: SaslPlain
) -> None:
    handshake = await _call(
        reader,
        writer,
        api_key=ApiKey.SASL_HANDSHAKE,
        api_version=1,
        correlation_id=3,
        fields={"mechanism": "PLAIN"},
    )
    if handshake.error_code != KafkaError.NONE:
        raise RemoteProtocolError(
            f"the broker offers SASL mechanisms {list(handshake.mechanisms)}, not PLAIN"
        )
    answer = await _call(
        reader,
        writer,
        api_key=ApiKey.SASL_AUTHENTICATE,
        api_version=1,
        correlation_id=4,
        fields={"auth_bytes": sasl.message},
    )
    if answer.error_code != KafkaError.NONE:
        raise RemoteProtocolError(f"SASL/PLAIN login failed: {answer.error_message}")


def _metadata_version(api_keys: Sequence[Any]) -> int:
    ours = INTERCEPTED_VERSIONS[ApiKey.METADATA]
    for entry in api_keys:
        if entry.api_key == ApiKey.METADATA:
            high = min(int(entry.max_version), ours[-1])
            if high < max(int(entry.min_version), ours[0]):
                break
            return high
    raise RemoteProtocolError("the broker speaks no Metadata version the proxy knows")


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    api_key: ApiKey,
    api_version: int,
    correlation_id: int,
    fields: Mapping[str, Any] | None = None,
) -> Any:
    """Send one request (``fields`` that its version lacks are left out), read its answer."""
    body_class = request_class(api_key, api_version)
    names = {field.name for field in dataclasses.fields(body_class)}
    body = body_class(**{name: v for name, v in (fields or {}).items() if name in names})
    header = encode_request_header(api_key, api_version, correlation_id, _CLIENT_ID)
    writer.write(encode_frame(header + encode_request(body)))
    await writer.drain()
    decoder = FrameDecoder(_MAX_RESPONSE_BYTES)
    while True:
        frame = decoder.next_frame()
        if isinstance(frame, bytes):
            break
        if frame is not None:
            spoken = foreign_protocol(frame.declared_size)
            if spoken is not None:
                raise RemoteProtocolError(f"the peer spoke {spoken}, not the Kafka protocol")
            raise RemoteProtocolError(f"bad response frame size {frame.declared_size}")
        data = await reader.read(65536)
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        decoder.feed(data)
    header_version = response_header_version(api_key, api_version)
    assert header_version is not None
    answered, size = parse_response_header(frame, header_version)
    if answered != correlation_id:
        raise RemoteProtocolError(f"answer to correlation id {answered}, not {correlation_id}")
    return decode_response(api_key, api_version, memoryview(frame)[size:])
