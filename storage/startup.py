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
clients retry. A cluster that does not answer yet is left to those retries, as before.
"""

from __future__ import annotations

import logging
import ssl

from storage.config import ConfigError
from storage.kafka_client import AuthenticationError, BrokerConnectionError, KafkaClient
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig, snapshot_dir_for
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage

__all__ = ["announce_remote_tier", "check_cluster_login"]

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
    log.info(
        "remote tier: storage %s%s, metadata topic %s, snapshots %s",
        check.location,
        _s3_details(storage, check.credentials),
        metadata.topic_name,
        snapshots if snapshots is not None else "off (every start replays the topic)",
    )
    if check.problem is not None:
        log.warning(
            "remote storage %s cannot be used now: %s; remote reads and copies fail until "
            "it can (check the endpoint, the bucket and the credentials)",
            check.location,
            check.problem,
        )


def _s3_details(storage: RemoteStorageConfig, credentials: str | None) -> str:
    """`` (credentials from ..., encryption ...)`` for S3; nothing for a directory."""
    if storage.backend != "s3":
        return ""
    encryption = storage.s3_sse_algorithm
    if storage.s3_sse_kms_key_id:
        encryption += f" with key {storage.s3_sse_kms_key_id}"
    return f" (credentials from {credentials or 'nowhere'}, encryption {encryption})"


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
        log.info("no bootstrap broker answers yet (%s); tierproxy keeps trying", err)
        return
    except AuthenticationError as err:
        raise ConfigError(f"{err} ({_what_to_check(err)})") from err
    log.info("connected to the cluster at %s: %s", bootstrap_servers, security.describe())


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
