"""Build the remote storage manager the settings ask for."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.s3 import S3RemoteStorage

__all__ = ["StorageCheck", "check_remote_storage", "create_remote_storage", "storage_identity"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageCheck:
    """What the start-up check of the remote store found."""

    location: str
    """Where the remote tier lives, for logs."""
    credentials: str | None
    """Which source the S3 credentials come from (never their values); ``None`` for a
    directory, or when none were found."""
    problem: str | None
    """What is wrong with the store, or ``None`` when one cheap request succeeded."""


def create_remote_storage(config: RemoteStorageConfig) -> S3RemoteStorage | LocalRemoteStorage:
    """The backend ``remote.log.storage.backend`` names, configured from ``config``: a
    :class:`~storage.rsm.base.RemoteStorageManager` that is also a
    :class:`~storage.rsm.base.SegmentProbe`.

    Nothing is contacted here: the S3 client connects on first use and the local directory
    is created on first write, so building a proxy or a pipeline task stays cheap.

    :raises ConfigError: when the S3 backend has no bucket.
    """
    if config.backend == "s3":
        return S3RemoteStorage(config)
    return LocalRemoteStorage(config.local_dir, prefix=config.prefix)


def storage_identity(config: RemoteStorageConfig) -> str:
    """Where the remote tier's objects live, as one string that names the same place the
    same way from any process on any host: ``s3://BUCKET/PREFIX at ENDPOINT`` (the endpoint
    ``AWS`` when none is set), or ``file://ABSOLUTE-DIR/PREFIX``. Metadata snapshots are bound
    to it (:class:`storage.rlmm.snapshot.StateBinding`)."""
    prefix = config.prefix.strip("/")
    if config.backend == "s3":
        return f"s3://{config.s3_bucket}/{prefix} at {config.s3_endpoint or 'AWS'}"
    return f"file://{Path(config.local_dir).resolve()}/{prefix}"


async def check_remote_storage(config: RemoteStorageConfig) -> StorageCheck:
    """Where the remote tier lives, where its credentials come from, and what is wrong with
    it: missing credentials, an unreachable endpoint, a missing bucket or refused credentials
    are then said at start, not at the first remote read. Tried once, without retries.
    """
    storage: S3RemoteStorage | LocalRemoteStorage
    if config.backend == "s3":
        storage = S3RemoteStorage(dataclasses.replace(config, retry_max_attempts=1))
    else:
        storage = LocalRemoteStorage(config.local_dir, prefix=config.prefix)
    credentials: str | None = None
    problem: str | None = None
    try:
        if isinstance(storage, S3RemoteStorage):
            credentials = await storage.describe_credentials()
        await storage.check()
    except RemoteStorageError as err:
        problem = str(err)
    finally:
        await storage.close()
    return StorageCheck(location=storage.location, credentials=credentials, problem=problem)
