"""Settings of the remote storage managers (``remote.log.storage.*``) and their retries.

The retry settings carry Kafka's RemoteLogManager names and defaults
(``remote.log.manager.task.retry.*``); the rest are tierproxy's own, grouped under
``remote.log.storage`` as Kafka groups a plugin's settings under its RSM config prefix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from storage.config import ConfigError, setting
from storage.retry import RetryPolicy

__all__ = ["MIN_PART_SIZE_BYTES", "RemoteStorageConfig"]

MIN_PART_SIZE_BYTES = 5 * 1024 * 1024
"""S3 rejects multipart parts (all but the last) smaller than 5 MiB."""

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class RemoteStorageConfig:
    """Where remote segments are stored and how the store is reached.

    The repr hides the secret key, since configs end up in logs.

    :raises ConfigError: for an unknown backend, S3 without a bucket, parts below S3's minimum,
        or retry settings out of range.
    """

    backend: Literal["local", "s3"] = setting(
        "remote.log.storage.backend",
        "local",
        'Where segments go: "local" (a directory, the embedded default) or "s3".',
    )
    local_dir: str = setting(
        "remote.log.storage.local.dir",
        "tierproxy-remote-storage",
        "Root directory of the local backend (created on first write).",
    )
    prefix: str = setting(
        "remote.log.storage.prefix",
        "",
        "Key prefix before every object (both backends); empty for none.",
    )
    s3_bucket: str | None = setting(
        "remote.log.storage.s3.bucket",
        None,
        "S3 bucket holding the segments; required for the s3 backend (it must exist).",
    )
    s3_endpoint: str | None = setting(
        "remote.log.storage.s3.endpoint",
        None,
        "S3 endpoint URL (MinIO, SeaweedFS, ...); unset uses AWS or AWS_ENDPOINT_URL_S3.",
    )
    s3_region: str | None = setting(
        "remote.log.storage.s3.region",
        None,
        "S3 region; unset uses AWS_REGION / AWS_DEFAULT_REGION / the AWS profile.",
    )
    s3_access_key_id: str | None = setting(
        "remote.log.storage.s3.access.key.id",
        None,
        "Access key id; unset (with the secret) uses the standard AWS credential chain.",
    )
    s3_secret_access_key: str | None = setting(
        "remote.log.storage.s3.secret.access.key",
        None,
        "Secret access key paired with remote.log.storage.s3.access.key.id.",
    )
    s3_path_style_access: bool = setting(
        "remote.log.storage.s3.path.style.access",
        False,
        "Address buckets as endpoint/bucket/key instead of bucket.endpoint/key "
        "(needed by SeaweedFS and MinIO without DNS wildcards).",
    )
    s3_multipart_threshold_bytes: int = setting(
        "remote.log.storage.s3.multipart.threshold.bytes",
        16 * _MIB,
        "Objects larger than this are uploaded in parts, in parallel.",
    )
    s3_part_size_bytes: int = setting(
        "remote.log.storage.s3.part.size.bytes",
        16 * _MIB,
        "Size of each multipart part (at least 5 MiB, S3's minimum).",
    )
    s3_max_connections: int = setting(
        "remote.log.storage.s3.max.connections",
        32,
        "Connections kept to the S3 endpoint; more requests than this wait for one.",
    )
    s3_connect_timeout_ms: int = setting(
        "remote.log.storage.s3.connect.timeout.ms",
        5_000,
        "Time allowed to open a connection to the S3 endpoint.",
    )
    s3_read_timeout_ms: int = setting(
        "remote.log.storage.s3.read.timeout.ms",
        30_000,
        "Time allowed between bytes of a response from the S3 endpoint.",
    )
    retry_backoff_ms: int = setting(
        "remote.log.manager.task.retry.backoff.ms",
        500,
        "First wait before retrying a failed remote storage request; doubles per retry.",
        kafka="remote.log.manager.task.retry.backoff.ms",
    )
    retry_backoff_max_ms: int = setting(
        "remote.log.manager.task.retry.backoff.max.ms",
        30_000,
        "Longest wait between retries of a remote storage request.",
        kafka="remote.log.manager.task.retry.backoff.max.ms",
    )
    retry_jitter: float = setting(
        "remote.log.manager.task.retry.jitter",
        0.2,
        "Each wait is multiplied by a random factor in [1 - jitter, 1 + jitter); 0 to 0.5.",
        kafka="remote.log.manager.task.retry.jitter",
    )
    retry_max_attempts: int = setting(
        "remote.log.storage.retry.max.attempts",
        5,
        "Attempts per remote storage request, the first included; 1 disables retries.",
    )
    retry_deadline_ms: int = setting(
        "remote.log.storage.retry.deadline.ms",
        30_000,
        "Time budget of one remote storage request with all its retries; after it the "
        "request fails with a retriable error.",
    )

    def __post_init__(self) -> None:
        if self.backend not in ("local", "s3"):
            raise ConfigError(
                f'remote.log.storage.backend must be "local" or "s3", not {self.backend!r}'
            )
        if self.backend == "s3" and not self.s3_bucket:
            raise ConfigError("remote.log.storage.s3.bucket is required for the s3 backend")
        if self.s3_part_size_bytes < MIN_PART_SIZE_BYTES:
            raise ConfigError(
                f"remote.log.storage.s3.part.size.bytes must be at least {MIN_PART_SIZE_BYTES}"
            )
        if self.s3_multipart_threshold_bytes < 0:
            raise ConfigError("remote.log.storage.s3.multipart.threshold.bytes must be >= 0")
        if self.s3_max_connections < 1:
            raise ConfigError("remote.log.storage.s3.max.connections must be at least 1")
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ConfigError(
                "set both remote.log.storage.s3.access.key.id and .secret.access.key, or neither"
            )
        try:
            self.retry_policy()
        except ValueError as err:
            raise ConfigError(f"remote storage retry settings: {err}") from err

    def retry_policy(self) -> RetryPolicy:
        """The retry policy these settings describe."""
        return RetryPolicy(
            backoff_ms=self.retry_backoff_ms,
            backoff_max_ms=self.retry_backoff_max_ms,
            jitter=self.retry_jitter,
            max_attempts=self.retry_max_attempts,
            deadline_ms=self.retry_deadline_ms,
        )

    def __repr__(self) -> str:
        fields = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "s3_secret_access_key" and value is not None:
                value = "***"
            fields.append(f"{field.name}={value!r}")
        return f"RemoteStorageConfig({', '.join(fields)})"
