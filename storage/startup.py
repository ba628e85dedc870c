"""What ``serve`` and ``tier`` say when they start with the remote tier on.

One line names the object store, which source its credentials come from (never their
values), the encryption asked for on uploads, the metadata topic and where snapshots go, so an
operator reading the log knows what this process talks to and as whom; then one cheap request
to the store, so missing credentials, an unreachable endpoint, a missing bucket or refused
credentials are a clear warning at start rather than a failure at the first remote read or
copy. Start-up goes on either way: the store may come up later, and every read and copy
retries on its own.

Before the metadata manager starts, :func:`check_cluster_login` logs in to the cluster once
with tierproxy's own client. A broker certificate that the configured CA did not sign or that
names another host, or a refused SASL login, will not get better by retrying, so ``serve``,
``tier`` and ``status`` stop at once with one line naming the setting to check, rather than
waiting out ``remote.log.metadata.initialization.timeout.ms`` while the metadata topic's
clients retry. A cluster that does not answer yet is left to those retries, as before. A job
that must not wait for the cluster (``tier --once``) asks :func:`cluster_answers_within`
first, before it starts Spark.

Once the metadata is loaded, ``serve`` runs :func:`check_segment_sample` in the background:
a HEAD (or ``stat``) of the oldest and newest readable segment of a random sample of tiered
partitions, so a remote tier that was moved, emptied or pointed at the wrong bucket or prefix
is reported at start, not at the first consumer that reads far back. It reads nothing and
never holds up serving.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from protocol.indexes.leader_epoch_checkpoint import EpochEntry
from storage.config import ConfigError
from storage.kafka_client import AuthenticationError, BrokerConnectionError, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.log_event import event
from storage.model import RemoteLogSegmentMetadata, TopicIdPartition
from storage.remote_reader import MissingObjectReport
from storage.rlmm.config import RemoteLogMetadataConfig, snapshot_dir_for
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError, SegmentProbe
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage

__all__ = [
    "SAMPLE_PARTITIONS",
    "SampledMetadata",
    "announce_remote_tier",
    "check_cluster_login",
    "check_segment_sample",
    "cluster_answers_within",
]

SAMPLE_PARTITIONS: Final = 50
"""Partitions whose oldest and newest segments the start-up check looks at: at most 100
HEADs, a second or two eight at a time even against distant object storage, and enough to
see a tier that is gone as a whole. A random sample, so that restarts look at others."""
_SAMPLE_CONCURRENCY: Final = 8
_CLUSTER_CHECK_INTERVAL_S: Final = 0.5
_SAMPLE_DEADLINE_S: Final = 60.0
"""The check gives up (with a line saying how far it got) after this long: storage that slow
is reported by the reads themselves."""

_NAME_MISMATCHES = (62, 64)
"""OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH."""


async def announce_remote_tier(
    storage: RemoteStorageConfig,
    metadata: RemoteLogMetadataConfig,
    *,
    command: str,
    log: logging.Logger,
) -> None:
    """Log the remote tier's settings, then check the object store once."""
    check = await check_remote_storage(storage)
    snapshots = snapshot_dir_for(metadata, command)
    shown = snapshots if snapshots is not None else "off (every start replays the topic)"
    event(
        log,
        logging.INFO,
        "remote.tier.settings",
        msg=f"remote tier: storage {check.location}{_s3_details(storage, check.credentials)}, "
        f"metadata topic {metadata.topic_name}, snapshots {shown}",
        storage=check.location,
        metadata_topic=metadata.topic_name,
    )
    if check.problem is not None:
        event(
            log,
            logging.WARNING,
            "remote.storage.unusable",
            msg=f"remote storage {check.location} cannot be used now: {check.problem}; remote "
            f"reads and copies fail until it can ({check.hint})",
            storage=check.location,
        )


def _s3_details(storage: RemoteStorageConfig, credentials: str | None) -> str:
    """`` (credentials from ..., encryption ...)`` of a cloud store, and how new segments are
    stored (compression, client-side encryption's active key id) for every backend."""
    stored = f"compression {'zstd' if storage.compression_enable else 'off'}, "
    stored += (
        f"encryption with key {storage.encryption_key_id!r}"
        if storage.encryption_enable
        else "encryption off"
    )
    if storage.backend == "local":
        return f" ({stored})"
    details = f"credentials from {credentials or 'nowhere'}"
    if storage.backend == "s3":
        encryption = storage.s3_sse_algorithm
        if storage.s3_sse_kms_key_id:
            encryption += f" with key {storage.s3_sse_kms_key_id}"
        details += f", server-side encryption {encryption}"
    return f" ({details}, {stored})"


async def check_cluster_login(
    bootstrap_servers: str, security: KafkaSecurityConfig, *, log: logging.Logger
) -> None:
    """Connect to a bootstrap broker with TLS and SASL as configured, once, and log how.

    :raises ConfigError: the broker's certificate or the SASL login was refused (the message
        is the refusal and the settings to check).
    """
    try:
        async with KafkaClient(
            bootstrap_servers, client_id="tierproxy-login-check", security=security
        ) as client:
            await client.detect_broker_kind()
    except BrokerConnectionError as err:
        event(
            log,
            logging.INFO,
            "cluster.unreachable",
            msg=f"no bootstrap broker answers yet ({err}); tierproxy keeps trying",
            bootstrap=bootstrap_servers,
        )
        return
    except AuthenticationError as err:
        raise ConfigError(f"{err} ({_what_to_check(err)})") from err
    event(
        log,
        logging.INFO,
        "cluster.connected",
        msg=f"connected to the cluster at {bootstrap_servers}: {security.describe()}",
        bootstrap=bootstrap_servers,
    )


async def cluster_answers_within(
    bootstrap_servers: str, security: KafkaSecurityConfig, *, seconds: float
) -> bool:
    """Whether a bootstrap broker answers within ``seconds``, asked every half second.

    :raises ConfigError: the broker's certificate or the SASL login was refused.
    """
    try:
        async with asyncio.timeout(seconds):
            while True:
                try:
                    async with KafkaClient(
                        bootstrap_servers, client_id="tierproxy-cluster-check", security=security
                    ) as client:
                        await client.detect_broker_kind()
                except BrokerConnectionError:
                    await asyncio.sleep(_CLUSTER_CHECK_INTERVAL_S)
                    continue
                return True
    except AuthenticationError as err:
        raise ConfigError(f"{err} ({_what_to_check(err)})") from err
    except TimeoutError:
        return False


def _what_to_check(err: AuthenticationError) -> str:
    cause = err.__cause__
    if not isinstance(cause, ssl.SSLCertVerificationError):
        return "check upstream.sasl.* and the principal's credentials on the cluster"
    if cause.verify_code in _NAME_MISMATCHES:
        return (
            "the broker's certificate does not name the host tierproxy dialled: its subject "
            "alternative names must cover bootstrap.servers and the advertised listeners"
        )
    return "check that upstream.ssl.ca.location holds the CA that signed the brokers' certificates"


class SampledMetadata(Protocol):
    """What the start-up check asks the metadata cache (``RemoteLogMetadataCache``)."""

    def partitions(self) -> list[TopicIdPartition]: ...

    def lineage(self, tp: TopicIdPartition) -> tuple[EpochEntry, ...]: ...

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None: ...

    def remote_log_end_offset(self, tp: TopicIdPartition) -> int | None: ...

    def segment_for(
        self, tp: TopicIdPartition, offset: int, lineage: Sequence[EpochEntry]
    ) -> RemoteLogSegmentMetadata | None: ...


async def check_segment_sample(
    metadata: SampledMetadata,
    probe: SegmentProbe,
    report: MissingObjectReport,
    *,
    log: logging.Logger,
    partitions: int = SAMPLE_PARTITIONS,
    choose: Callable[[Sequence[TopicIdPartition], int], list[TopicIdPartition]] = random.sample,
) -> int:
    """Look for the ``.log`` objects of the oldest and newest readable segment of up to
    ``partitions`` tiered partitions (``choose`` picks them); ``report`` each missing one and
    log one summary line, which also counts the objects storage could not answer for. After
    :data:`_SAMPLE_DEADLINE_S` the check stops and says how far it got.

    :returns: how many objects were found missing.
    """
    tiered = metadata.partitions()
    chosen = choose(tiered, min(partitions, len(tiered)))
    segments = {s.segment_id.id: s for tp in chosen for s in _ends(metadata, tp)}
    gate = asyncio.Semaphore(_SAMPLE_CONCURRENCY)
    missing: list[str] = []
    failed: list[RemoteStorageError] = []
    found: list[int] = []
    started = time.monotonic()

    async def look(segment: RemoteLogSegmentMetadata) -> None:
        async with gate:
            try:
                found.append(await probe.log_segment_size(segment))
            except RemoteResourceNotFoundError as err:
                missing.append(err.key or str(err))
                report.object_missing(segment, missing[-1])
            except RemoteStorageError as err:
                failed.append(err)

    try:
        async with asyncio.timeout(_SAMPLE_DEADLINE_S):
            await asyncio.gather(*(look(segment) for segment in segments.values()))
    except TimeoutError:
        looked = len(found) + len(missing) + len(failed)
        event(
            log,
            logging.WARNING,
            "remote.tier.check.stopped",
            msg=f"remote tier start-up check stopped after {time.monotonic() - started:.0f} s: "
            f"{looked} of {len(segments)} segments looked at",
            looked=looked,
            segments=len(segments),
        )
        return len(missing)
    event(
        log,
        logging.WARNING if missing or failed else logging.INFO,
        "remote.tier.check.done",
        msg=f"remote tier start-up check: {len(missing)} of the {len(segments)} oldest and "
        f"newest segments of {len(chosen)} of {len(tiered)} tiered partitions are missing "
        "from remote storage"
        + (" (each is logged as remote.object.missing)" if missing else "")
        + (f"; {len(failed)} could not be checked ({failed[-1]})" if failed else ""),
        missing=len(missing),
        unchecked=len(failed),
        segments=len(segments),
    )
    return len(missing)


def _ends(metadata: SampledMetadata, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """The oldest and newest readable segments of ``tp`` (one when they are the same)."""
    start = metadata.remote_log_start_offset(tp)
    end = metadata.remote_log_end_offset(tp)
    if start is None or end is None:
        return []
    lineage = metadata.lineage(tp)
    found = (metadata.segment_for(tp, start, lineage), metadata.segment_for(tp, end, lineage))
    return [segment for segment in found if segment is not None]
