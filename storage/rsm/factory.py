"""Build the remote storage manager the settings ask for."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from storage.rsm.base import RemoteStorageError
from storage.rsm.chunk_codec import EncodeSettings
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.keyring import KeyRing
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.objects import DescribesCredentials, ObjectStore
from storage.rsm.rate_limit import RateLimiter
from storage.rsm.segments import MappedSegmentStorage, SegmentStorage

__all__ = [
    "StorageCheck",
    "check_remote_storage",
    "create_object_store",
    "create_remote_storage",
    "key_ring",
    "storage_identity",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageCheck:
    """What the start-up check of the remote store found."""

    location: str
    """Where the remote tier lives, for logs."""
    credentials: str | None
    """Which source the credentials come from (never their values); ``None`` for a
    directory, or when none were found."""
    problem: str | None
    """What is wrong with the store, or ``None`` when one cheap request succeeded."""
    hint: str
    """What an operator checks when the store cannot be used, in the backend's own terms."""


def create_object_store(config: RemoteStorageConfig) -> ObjectStore:
    """The object store ``remote.log.storage.backend`` names, configured from ``config``.

    Nothing is contacted here: clients connect on first use and the local directory is
    created on first write, so building a proxy or a pipeline task stays cheap. The cloud
    backends' modules are imported only when chosen.

    :raises ConfigError: when the backend lacks its bucket, container or account.
    """
    if config.backend == "s3":
        from storage.rsm.s3 import S3RemoteStorage  # noqa: PLC0415

        return S3RemoteStorage(config)
    if config.backend == "gcs":
        from storage.rsm.gcs import GcsStore  # noqa: PLC0415

        return GcsStore(config)
    if config.backend == "azure":
        from storage.rsm.azure import AzureStore  # noqa: PLC0415

        return AzureStore(config)
    return LocalRemoteStorage(config.local_dir, prefix="")


def key_ring(config: RemoteStorageConfig) -> KeyRing | None:
    """The key-encryption keys the settings name, or ``None`` when none are configured
    (no key file, and no variable set) and encryption is off.

    :raises ConfigError: when a key source is unreadable or malformed, or the active key
        is not among the keys.
    """
    env = config.encryption_keys_env or None
    if not (
        config.encryption_enable or config.encryption_keys_file or (env and os.environ.get(env))
    ):
        return None
    return KeyRing.load(
        keys_file=config.encryption_keys_file,
        keys_env=env,
        active=config.encryption_key_id if config.encryption_enable else None,
    )


def create_remote_storage(
    config: RemoteStorageConfig, *, upload_limit: RateLimiter | None = None
) -> SegmentStorage:
    """The remote storage manager over the backend ``config`` names: segments with
    manifests, checksums, and the compression and encryption the settings ask for
    (:class:`~storage.rsm.segments.SegmentStorage`).

    :param upload_limit: the uploads' rate limit; by default one of
        ``remote.log.storage.upload.rate.limit.bytes.per.second`` (none for 0).
    :raises ConfigError: for a backend without its bucket or container, or unusable keys.
    """
    store = create_object_store(config)
    if upload_limit is None and config.upload_rate_bytes_per_second:
        upload_limit = RateLimiter(config.upload_rate_bytes_per_second)
    settings = EncodeSettings(
        chunk_bytes=config.chunk_size_bytes,
        compression_level=config.compression_level if config.compression_enable else None,
        skip_compressed_batches=config.compression_heuristic_enable,
    )
    kind = MappedSegmentStorage if isinstance(store, LocalRemoteStorage) else SegmentStorage
    return kind(
        store,
        prefix=config.prefix,
        encode=settings,
        encrypt=config.encryption_enable,
        keys=key_ring(config),
        upload_limit=upload_limit,
    )


def storage_identity(config: RemoteStorageConfig) -> str:
    """Where the remote tier's objects live, as one string that names the same place the
    same way from any process on any host: ``s3://BUCKET/PREFIX at ENDPOINT`` (the endpoint
    ``AWS`` when none is set), ``gs://BUCKET/PREFIX at ENDPOINT``,
    ``azure://ACCOUNT/CONTAINER/PREFIX at ENDPOINT``, or ``file://ABSOLUTE-DIR/PREFIX``.
    Metadata snapshots are bound to it (:class:`storage.rlmm.snapshot.StateBinding`)."""
    prefix = config.prefix.strip("/")
    if config.backend == "s3":
        return f"s3://{config.s3_bucket}/{prefix} at {config.s3_endpoint or 'AWS'}"
    if config.backend == "gcs":
        return f"gs://{config.gcs_bucket}/{prefix} at {config.gcs_endpoint or 'GCS'}"
    if config.backend == "azure":
        where = f"{config.azure_account_name}/{config.azure_container}/{prefix}"
        return f"azure://{where} at {config.azure_endpoint or 'Azure'}"
    return f"file://{Path(config.local_dir).resolve()}/{prefix}"


async def check_remote_storage(config: RemoteStorageConfig) -> StorageCheck:
    """Where the remote tier lives, where its credentials come from, and what is wrong with
    it: missing credentials, an unreachable endpoint, a missing bucket or refused credentials
    are then said at start, not at the first remote read. Tried once, without retries.
    """
    store = create_object_store(dataclasses.replace(config, retry_max_attempts=1))
    credentials: str | None = None
    problem: str | None = None
    try:
        key_ring(config)
        if isinstance(store, DescribesCredentials):
            credentials = await store.describe_credentials()
        await store.check()
    except RemoteStorageError as err:
        problem = str(err)
    finally:
        await store.close()
    return StorageCheck(
        location=store.location, credentials=credentials, problem=problem, hint=store.hint
    )
