"""What the tests and the demo learn about the servers they run against.

:class:`BrokerInfo` carries, besides the address, what the broker can do, so that a test that
needs DeleteRecords or retention can skip with a clear reason on a broker that lacks it instead
of failing (or, worse, crashing a shared broker). The flags come from the broker's ApiVersions
answer plus what is known about the broker kind; see :mod:`proxy.embedded.tansu` for the Tansu
behaviour behind its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from proxy.embedded.probe import api_versions, metadata_brokers

__all__ = ["BrokerInfo", "BrokerKind", "S3Info", "S3Kind", "probe_broker"]

BrokerKind = Literal["tansu", "kafka", "external"]
S3Kind = Literal["seaweedfs", "external"]

_LIST_OFFSETS = 2
_DELETE_RECORDS = 21
_OFFSET_FOR_LEADER_EPOCH = 23
_MAX_TIMESTAMP_LIST_OFFSETS_VERSION = 7  # ListOffsets v7 added the -3 MAX_TIMESTAMP sentinel


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    """A running Kafka-protocol broker and its capabilities.

    :ivar bootstrap: ``host:port`` for clients.
    :ivar kind: ``tansu`` (embedded default), ``kafka`` (Apache Kafka started from
        ``KAFKA_HOME``) or ``external`` (``KAFKA_BOOTSTRAP``, assumed to behave like Apache Kafka
        beyond what its ApiVersions answer says).
    :ivar node_id: the broker's id in Metadata (Tansu says 111).
    :ivar version: a human-readable product and version, e.g. ``tansu 0.6.0``.
    :ivar api_versions: ``{api_key: (min_version, max_version)}`` from ApiVersions.
    :ivar supports_delete_records: DeleteRecords works (Tansu advertises it but panics).
    :ivar supports_retention: the broker deletes old segments by ``retention.ms/bytes``.
    :ivar supports_offset_for_leader_epoch: OffsetForLeaderEpoch (API 23) is served.
    :ivar supports_aborted_transactions: READ_COMMITTED Fetch responses list aborted
        transactions, so consumers can skip aborted records.
    :ivar exact_latest_offset: ListOffsets LATEST returns the log end offset (Tansu returns the
        last batch's base offset: trust the Fetch high watermark instead).
    :ivar supports_max_timestamp: ListOffsets answers the -3 MAX_TIMESTAMP sentinel.
    """

    bootstrap: str
    kind: BrokerKind
    host: str
    port: int
    node_id: int
    version: str
    api_versions: Mapping[int, tuple[int, int]]
    supports_delete_records: bool
    supports_retention: bool
    supports_offset_for_leader_epoch: bool
    supports_aborted_transactions: bool
    exact_latest_offset: bool
    supports_max_timestamp: bool

    def supports(self, api_key: int, version: int) -> bool:
        """Whether the broker advertised ``version`` of ``api_key``."""
        low, high = self.api_versions.get(api_key, (0, -1))
        return low <= version <= high

    def limitations(self) -> tuple[str, ...]:
        """One sentence per capability this broker lacks, for skip reasons and the demo."""
        missing = {
            "no DeleteRecords": self.supports_delete_records,
            "no retention (old segments are never deleted)": self.supports_retention,
            "no OffsetForLeaderEpoch": self.supports_offset_for_leader_epoch,
            "READ_COMMITTED fetches list no aborted transactions": (
                self.supports_aborted_transactions
            ),
            "ListOffsets LATEST may return the last batch's base offset": (
                self.exact_latest_offset
            ),
            "no ListOffsets MAX_TIMESTAMP (-3)": self.supports_max_timestamp,
        }
        return tuple(text for text, supported in missing.items() if not supported)


@dataclass(frozen=True, slots=True, kw_only=True)
class S3Info:
    """An S3 endpoint and the credentials to use it (path-style addressing)."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str
    kind: S3Kind


def probe_broker(*, kind: BrokerKind, host: str, port: int, version: str) -> BrokerInfo:
    """Ask a ready broker what it supports and combine that with what its kind is known to lack.

    Never sends DeleteRecords or other requests that crash some brokers: capabilities that can
    only be observed by risking the (possibly shared) broker come from ``kind``.

    :raises OSError: the broker could not be reached.
    :raises proxy.embedded.probe.KafkaProbeError: it answered with an error or garbage.
    """
    versions = api_versions(host, port)
    brokers = metadata_brokers(host, port)
    node_id = next((b.node_id for b in brokers if (b.host, b.port) == (host, port)), -1)
    if node_id == -1 and brokers:
        node_id = brokers[0].node_id
    is_tansu = kind == "tansu"
    return BrokerInfo(
        bootstrap=f"{host}:{port}",
        kind=kind,
        host=host,
        port=port,
        node_id=node_id,
        version=version,
        api_versions=versions,
        supports_delete_records=not is_tansu and _DELETE_RECORDS in versions,
        supports_retention=not is_tansu,
        supports_offset_for_leader_epoch=_OFFSET_FOR_LEADER_EPOCH in versions,
        supports_aborted_transactions=not is_tansu,
        exact_latest_offset=not is_tansu,
        supports_max_timestamp=not is_tansu
        and versions.get(_LIST_OFFSETS, (0, -1))[1] >= _MAX_TIMESTAMP_LIST_OFFSETS_VERSION,
    )
