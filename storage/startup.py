"""What ``serve`` and ``tier`` say when they start with the remote tier on.

One line names the object store, which source its credentials come from (never their
values), the encryption asked for on uploads, the metadata topic and where snapshots go, so an
operator reading the log knows what this process talks to and as whom; then one cheap request
to the store, so missing credentials, an unreachable endpoint, a missing bucket or refused
credentials are a clear warning at start rather than a failure at the first remote read or
copy. Start-up goes on either way: the
store may come up later, and every read and copy retries on its own.
"""

from __future__ import annotations

import logging

from storage.rlmm.config import RemoteLogMetadataConfig, snapshot_dir_for
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage

__all__ = ["announce_remote_tier"]


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
