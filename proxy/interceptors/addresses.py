"""Broker addresses → proxy addresses, in every response that tells clients where brokers are.

A client that learns a broker's own address connects to it directly and bypasses the proxy
(a known failure of Kafka proxies that rewrite Metadata only). Addresses travel in
(``protocol.messages.ADDRESS_VERSIONS``):

- Metadata ``brokers`` (every version);
- FindCoordinator: ``node_id``/``host``/``port`` (v0-v3) or each of ``coordinators`` (v4+,
  KIP-699 batching);
- DescribeCluster ``brokers`` (brokers or, with KIP-919, controllers);
- ``node_endpoints`` of Produce v10+ and Fetch v16+ (KIP-951: where a moved leader is), and
  of ShareFetch and ShareAcknowledge (KIP-932 share groups, the same for their leaders).

The :class:`AddressBook` gives each broker its proxy address and starts a listener for a
broker seen for the first time before the response reaches the client.

Fetch, ShareFetch and ShareAcknowledge responses stream (:class:`~proxy.interceptors.base.
TailExchange`): their node endpoints are at the very end (a Fetch's in the top-level tagged
fields, the share APIs' as the last field before them), rewritten in place once they arrived
(:mod:`protocol.fetch_tail`). When such a response cannot stream (it waits behind another), a
cheap walk of its body tells whether it names any endpoint; only then is it decoded.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from protocol.errors import RemoteProtocolError
from protocol.fetch_tail import (
    ResponseTail,
    body_tail,
    encode_tail,
    is_empty_tail,
    read_tail,
    skip_tagged_fields,
    tail_layout,
)
from protocol.messages import ADDRESS_VERSIONS, INTERCEPTED_VERSIONS, ApiKey
from protocol.varint import VarintError, decode_unsigned_varint
from proxy.config import HostPort
from proxy.interceptors.base import Call, Forward, Interceptor, TailExchange
from proxy.logs import event
from storage.kafka_client import BrokerAddress

__all__ = ["AddressBook", "AddressRewriter", "BrokerAddress"]

_log = logging.getLogger("tierproxy.addresses")

_FIND_COORDINATOR_BATCHED: Final = 4
_NODE_ENDPOINTS: Final = frozenset(
    int(key) for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
)
_PRODUCE_TOPIC_IDS: Final = 13


class AddressBook(Protocol):
    """Where clients should reach each broker through the proxy."""

    async def advertise(self, brokers: Sequence[BrokerAddress]) -> Mapping[int, HostPort]:
        """Return the proxy address of each broker (by node id).

        Brokers not seen before get a listener, started before this returns.
        """
        ...


def _from(versions: range, first: int) -> range:
    return range(max(versions[0], first), versions[-1] + 1)


def _rewrite_entries(
    entries: tuple[Any, ...], id_field: str, proxied: Mapping[int, HostPort]
) -> tuple[Any, ...]:
    def rewrite(entry: Any) -> Any:
        address = proxied.get(getattr(entry, id_field))
        if address is None:
            return entry
        return dataclasses.replace(entry, host=address.host, port=address.port)

    return tuple(rewrite(entry) for entry in entries)


def _named(entries: tuple[Any, ...], id_field: str) -> list[BrokerAddress]:
    return [
        BrokerAddress(node_id=int(getattr(e, id_field)), host=e.host, port=int(e.port))
        for e in entries
        if getattr(e, id_field) >= 0
    ]


def _where(api_key: int, api_version: int) -> tuple[str | None, str]:
    """The response field listing brokers (``None``: the response itself is one broker) and
    the name of their node id field."""
    if api_key == ApiKey.METADATA:
        return "brokers", "node_id"
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        return "brokers", "broker_id"
    if api_key in _NODE_ENDPOINTS:
        return "node_endpoints", "node_id"
    if api_version >= _FIND_COORDINATOR_BATCHED:
        return "coordinators", "node_id"
    return None, "node_id"


def _skip_compact_bytes(body: memoryview, position: int) -> int:
    length_plus_one, position = decode_unsigned_varint(body, position)
    return position + max(length_plus_one - 1, 0)


def _fetch_top_level_tags(body: memoryview, version: int) -> int:
    """Top-level tagged fields of a Fetch v16/v17 response, walking over the records unread.

    Layout (FetchResponse.json): throttle int32, error int16, session int32, then topics
    (topic id, partitions: index int32, error int16, high watermark, last stable offset, log
    start offset int64 each, aborted transactions (producer id, first offset, tags), preferred
    read replica int32, records, tags), each followed by tags; node endpoints are tag 0.
    """
    position = 10
    topics, position = decode_unsigned_varint(body, position)
    for _ in range(topics - 1):
        position += 16
        partitions, position = decode_unsigned_varint(body, position)
        for _ in range(partitions - 1):
            position += 30
            aborted, position = decode_unsigned_varint(body, position)
            for _ in range(aborted - 1):
                position = skip_tagged_fields(body, position + 16)
            position = _skip_compact_bytes(body, position + 4)
            position = skip_tagged_fields(body, position)
        position = skip_tagged_fields(body, position)
    count, end = decode_unsigned_varint(body, position)
    if end > len(body):
        raise IndexError("Fetch response ends inside its tagged fields")
    return count


def _produce_top_level_tags(body: memoryview, version: int) -> int:
    """Top-level tagged fields of a Produce v10+ response (ProduceResponse.json).

    Layout: topics (name, or topic id from v13; partitions: index int32, error int16, base
    offset, log append time, log start offset int64 each, record errors (batch index int32,
    message, tags), error message, tags; tags), then throttle int32; node endpoints are tag 0.
    """
    position = 0
    topics, position = decode_unsigned_varint(body, position)
    for _ in range(topics - 1):
        if version >= _PRODUCE_TOPIC_IDS:
            position += 16
        else:
            position = _skip_compact_bytes(body, position)
        partitions, position = decode_unsigned_varint(body, position)
        for _ in range(partitions - 1):
            position += 30
            errors, position = decode_unsigned_varint(body, position)
            for _ in range(errors - 1):
                position = _skip_compact_bytes(body, position + 4)
                position = skip_tagged_fields(body, position)
            position = _skip_compact_bytes(body, position)
            position = skip_tagged_fields(body, position)
        position = skip_tagged_fields(body, position)
    count, end = decode_unsigned_varint(body, position + 4)
    if end > len(body):
        raise IndexError("Produce response ends inside its tagged fields")
    return count


def _share_tail(api_key: ApiKey) -> Callable[[memoryview, int], int]:
    """A scan of ShareFetch or ShareAcknowledge bodies: 1 if the tail names an endpoint or
    holds a tagged field, else 0."""

    def scan(body: memoryview, version: int) -> int:
        return int(not is_empty_tail(body_tail(api_key, version, body), tail_layout(api_key)))

    return scan


_SCANS = {
    int(ApiKey.FETCH): _fetch_top_level_tags,
    int(ApiKey.PRODUCE): _produce_top_level_tags,
    int(ApiKey.SHARE_FETCH): _share_tail(ApiKey.SHARE_FETCH),
    int(ApiKey.SHARE_ACKNOWLEDGE): _share_tail(ApiKey.SHARE_ACKNOWLEDGE),
}


class AddressRewriter(Interceptor):
    """Rewrites broker addresses in responses to the proxy's addresses from ``book``.

    Its exchanges judge the encoded body first: Produce, Fetch, ShareFetch and
    ShareAcknowledge responses carry node endpoints only when a partition's leader moved, so
    the others are forwarded undecoded.
    """

    def __init__(self, book: AddressBook) -> None:
        self._book = book

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        """Every version the proxy decodes whose responses may name brokers."""
        return {
            api_key: _from(INTERCEPTED_VERSIONS[api_key], first)
            for api_key, first in ADDRESS_VERSIONS.items()
        }

    def on_request(self, call: Call) -> Forward:
        return Forward(request=call.request, then=_Rewrite(self, call))

    def wants_response(self, call: Call, body: memoryview) -> bool:
        scan = _SCANS.get(call.header.api_key)
        if scan is None:
            return True
        try:
            return scan(body, call.header.api_version) > 0
        except (VarintError, IndexError, struct.error, RemoteProtocolError):
            return True  # malformed: let the decoder say so

    async def on_response(self, call: Call, response: Any) -> Any:
        field, id_field = _where(call.header.api_key, call.header.api_version)
        entries = (response,) if field is None else getattr(response, field)
        brokers = _named(entries, id_field)
        if not brokers:
            return response
        rewritten = _rewrite_entries(entries, id_field, await self._book.advertise(brokers))
        if field is None:
            return rewritten[0]
        return dataclasses.replace(response, **{field: rewritten})

    def wants_tail(self, call: Call, tail: bytes) -> bool:
        """Any endpoint or tagged field at all: Kafka sends none but the node endpoints (an
        empty tail is ``00``, or ``01 00`` for the share APIs)."""
        return not is_empty_tail(tail, tail_layout(call.header.api_key))

    async def rewrite_tail(self, call: Call, tail: bytes) -> bytes:
        """The node endpoints with proxy addresses, padded to the broker's length. If the
        proxy's addresses do not fit (longer host names), the endpoints are left out: the
        client then finds the new leader in its metadata, as with a broker before KIP-951.

        :raises RemoteProtocolError: the tail is malformed (it may name brokers: the
            connection closes rather than pass it on).
        """
        layout = tail_layout(call.header.api_key)
        fields = read_tail(tail, layout)  # malformed: raises, never relayed as it is
        brokers = [
            BrokerAddress(node_id=e.node_id, host=e.host, port=e.port)
            for e in fields.node_endpoints
            if e.node_id >= 0
        ]
        if not brokers:
            return tail
        proxied = await self._book.advertise(brokers)
        rewritten = dataclasses.replace(
            fields, node_endpoints=_rewrite_entries(fields.node_endpoints, "node_id", proxied)
        )
        encoded = encode_tail(rewritten, length=len(tail), layout=layout)
        if encoded is not None:
            return encoded
        event(
            _log,
            logging.INFO,
            "fetch.node_endpoints.dropped",
            conn=call.connection.connection_id,
            api=call.header.api_key,
            nodes=",".join(str(b.node_id) for b in brokers),
            reason="the proxy addresses are longer than the brokers' in a streamed response",
        )
        without = ResponseTail(node_endpoints=(), others=fields.others)
        encoded = encode_tail(without, length=len(tail), layout=layout)
        if encoded is None:
            raise RemoteProtocolError("a streamed response tail the proxy cannot rewrite in place")
        return encoded


class _Rewrite(TailExchange):
    """The rewriter's part in one response: its methods, bound to the request's call."""

    __slots__ = ("_call", "_rewriter")

    def __init__(self, rewriter: AddressRewriter, call: Call) -> None:
        self._rewriter = rewriter
        self._call = call

    def wants_response(self, body: memoryview) -> bool:
        return self._rewriter.wants_response(self._call, body)

    async def on_response(self, response: Any) -> Any:
        return await self._rewriter.on_response(self._call, response)

    def wants_tail(self, tail: bytes) -> bool:
        return self._rewriter.wants_tail(self._call, tail)

    async def rewrite_tail(self, tail: bytes) -> bytes:
        return await self._rewriter.rewrite_tail(self._call, tail)
