"""Build the remote storage manager the settings ask for."""

from __future__ import annotations

import dataclasses

from storage.rsm.base import RemoteStorageError, RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.s3 import S3RemoteStorage

__all__ = ["check_remote_storage", "create_remote_storage"]


def create_remote_storage(config: RemoteStorageConfig) -> RemoteStorageManager:
    """The backend ``remote.log.storage.backend`` names, configured from ``config``.

    Nothing is contacted here: the S3 client connects on first use and the local directory
    is created on first write, so building a proxy or a pipeline task stays cheap.

    :raises ConfigError: when the S3 backend has no bucket.
    """
    if config.backend == "s3":
        return S3RemoteStorage(config)
    return LocalRemoteStorage(config.local_dir, prefix=config.prefix)


async def check_remote_storage(config: RemoteStorageConfig) -> tuple[str, str | None]:
    """Where the remote tier lives, and what is wrong with it (``None`` when one cheap
    request succeeded): an unreachable endpoint, a missing bucket or refused credentials
    are then said at start, not at the first remote read. Tried once, without retries.
    """
    storage: S3RemoteStorage | LocalRemoteStorage
    if config.backend == "s3":
        storage = S3RemoteStorage(dataclasses.replace(config, retry_max_attempts=1))
    else:
        storage = LocalRemoteStorage(config.local_dir, prefix=config.prefix)
    try:
        await storage.check()
    except RemoteStorageError as err:
        return storage.location, str(err)
    finally:
        await storage.close()
    return storage.location, None
