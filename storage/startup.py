"""What ``serve`` and ``tier`` say when they start with the remote tier on.

One line names the object store, the metadata topic and where snapshots go, so an operator
reading the log knows what this process talks to; then one cheap request to the store, so an
unreachable endpoint, a missing bucket or refused credentials are a clear warning at start
rather than a failure at the first remote read or copy. Start-up goes on either way: the
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
    location, problem = await check_remote_storage(storage)
    snapshots = snapshot_dir_for(metadata, command)
    log.info(
        "remote tier: storage %s, metadata topic %s, snapshots %s",
        location,
        metadata.topic_name,
        snapshots if snapshots is not None else "off (every start replays the topic)",
    )
    if problem is not None:
        log.warning(
            "remote storage %s cannot be used now: %s; remote reads and copies fail until "
            "it can (check the endpoint, the bucket and the credentials)",
            location,
            problem,
        )
