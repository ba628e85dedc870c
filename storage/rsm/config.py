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

__all__ = ["MIN_PART_SIZE_BYTES", "SSE_ALGORITHMS", "RemoteStorageConfig"]

MIN_PART_SIZE_BYTES = 5 * 1024 * 1024
"""S3 rejects multipart parts (all but the last) smaller than 5 MiB."""

SSE_ALGORITHMS = ("none", "AES256", "aws:kms")
"""Values of ``remote.log.storage.s3.sse.algorithm``: no header, or S3's own
``x-amz-server-side-encryption`` values for SSE-S3 and SSE-KMS."""

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class RemoteStorageConfig:
    """Where remote segments are stored and how the store is reached.

    The repr hides the secret key, since configs end up in logs.

    :raises ConfigError: for an unknown backend, S3 without a bucket, parts below S3's minimum,
        credentials or encryption settings that do not fit together, or retry settings out
        of range.
    """

    backend: Literal["local", "s3"] = setting(
        "remote.log.storage.backend",
        "local",
        'Where segments go: "local" (a directory, the embedded default) or "s3".',
    )
    local_dir: str = setting(
        "remote.log.storage.local.dir",
        "tierproxy-remote-storage",
        "Root directory of the local backend (created on first write). Its files are "
        "written once and replaced by rename; the proxy serves them from read-only "
        "mappings, so nothing else may modify or truncate them in place.",
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
        "Access key id; unset (with the secret) uses the standard AWS credential chain: "
        "environment, shared credentials and config files, web identity, container and "
        "instance metadata.",
    )
    s3_secret_access_key: str | None = setting(
        "remote.log.storage.s3.secret.access.key",
        None,
        "Secret access key paired with remote.log.storage.s3.access.key.id.",
        secret=True,
    )
    s3_profile: str | None = setting(
        "remote.log.storage.s3.profile",
        None,
        "Profile of the shared AWS credentials and config files (AWS_SHARED_CREDENTIALS_FILE, "
        "AWS_CONFIG_FILE) whose credentials and region to use; unset uses AWS_PROFILE or the "
        "default profile. Excludes static keys.",
    )
    s3_sse_algorithm: str = setting(
        "remote.log.storage.s3.sse.algorithm",
        "none",
        'Server-side encryption asked for on every upload: "none" (the bucket\'s default), '
        '"AES256" (SSE-S3) or "aws:kms" (SSE-KMS).',
    )
    s3_sse_kms_key_id: str | None = setting(
        "remote.log.storage.s3.sse.kms.key.id",
        None,
        'KMS key (id, ARN or alias/NAME) for "aws:kms"; unset uses the account\'s aws/s3 key.',
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
        self._check_credentials()
        self._check_encryption()
        try:
            self.retry_policy()
        except ValueError as err:
            raise ConfigError(f"remote storage retry settings: {err}") from err

    def _check_credentials(self) -> None:
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ConfigError(
                "set both remote.log.storage.s3.access.key.id and .secret.access.key, or neither"
            )
        if self.s3_access_key_id is not None and self.s3_profile is not None:
            raise ConfigError(
                "remote.log.storage.s3.profile and remote.log.storage.s3.access.key.id both "
                "name credentials: set one of them"
            )

    def _check_encryption(self) -> None:
        if self.s3_sse_algorithm not in SSE_ALGORITHMS:
            raise ConfigError(
                f"remote.log.storage.s3.sse.algorithm must be one of {SSE_ALGORITHMS}, "
                f"not {self.s3_sse_algorithm!r}"
            )
        if self.s3_sse_kms_key_id and self.s3_sse_algorithm != "aws:kms":
            raise ConfigError(
                "remote.log.storage.s3.sse.kms.key.id needs "
                'remote.log.storage.s3.sse.algorithm = "aws:kms", '
                f"not {self.s3_sse_algorithm!r}"
            )

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
            if not field.repr and value is not None:
                value = "***"
            fields.append(f"{field.name}={value!r}")
        return f"RemoteStorageConfig({', '.join(fields)})"
