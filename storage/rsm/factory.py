"""Build the remote storage manager the settings ask for."""

from __future__ import annotations

from storage.rsm.base import RemoteStorageManager
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.s3 import S3RemoteStorage

__all__ = ["create_remote_storage"]


def create_remote_storage(config: RemoteStorageConfig) -> RemoteStorageManager:
    """The backend ``remote.log.storage.backend`` names, configured from ``config``.

    Nothing is contacted here: the S3 client connects on first use and the local directory
    is created on first write, so building a proxy or a pipeline task stays cheap.

    :raises ConfigError: when the S3 backend has no bucket.
    """
    if config.backend == "s3":
        return S3RemoteStorage(config)
    return LocalRemoteStorage(config.local_dir, prefix=config.prefix)
