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

__all__ = [
    "BACKENDS",
    "MIN_CHUNK_BYTES",
    "MIN_PART_SIZE_BYTES",
    "SSE_ALGORITHMS",
    "RemoteStorageConfig",
]

BACKENDS = ("local", "s3", "gcs", "azure")
"""Values of ``remote.log.storage.backend``."""
MIN_CHUNK_BYTES = 1024
"""Smallest stored chunk: each chunk costs a checksum and, encrypted, a 16-byte tag."""

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

    backend: Literal["local", "s3", "gcs", "azure"] = setting(
        "remote.log.storage.backend",
        "local",
        'Where segments go: "local" (a directory, the embedded default), "s3", "gcs" '
        '(Google Cloud Storage) or "azure" (Azure Blob Storage).',
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
        "Key prefix before every object (every backend); empty for none.",
    )
    chunk_size_bytes: int = setting(
        "remote.log.storage.chunk.size.bytes",
        4 * _MIB,
        "Original bytes per stored chunk of a segment's .log: each is checksummed, and "
        "compressed and encrypted on its own, so ranged reads stay ranged. Keep it equal to "
        "the proxy's remote.fetch.chunk.size.bytes (one GET per cached chunk). Applies to "
        "segments written from then on; each segment's manifest records its own.",
    )
    compression_enable: bool = setting(
        "remote.log.storage.compression.enable",
        False,
        "Compress new segments' chunks with zstd (a chunk that does not shrink by a "
        "sixteenth is stored as is).",
    )
    compression_level: int = setting(
        "remote.log.storage.compression.level",
        3,
        "zstd level of remote.log.storage.compression.enable (1 fastest to 22 smallest; "
        "negative levels are faster still).",
    )
    compression_heuristic_enable: bool = setting(
        "remote.log.storage.compression.heuristic.enable",
        True,
        "Leave segments whose record batches the producer compressed uncompressed (the "
        "codec in the first batches' attributes).",
    )
    encryption_enable: bool = setting(
        "remote.log.storage.encryption.enable",
        False,
        "Encrypt new segments (data and indexes, AES-256-GCM per chunk) under a fresh data "
        "key per segment, wrapped by the key remote.log.storage.encryption.key.id.",
    )
    encryption_key_id: str | None = setting(
        "remote.log.storage.encryption.key.id",
        None,
        "Id of the key-encryption key that wraps new segments' data keys (the active key); "
        "required with encryption. Older keys stay in the key file or variable to read the "
        "segments they wrapped.",
    )
    encryption_keys_file: str | None = setting(
        "remote.log.storage.encryption.keys.file",
        None,
        "File of key-encryption keys, one ID:BASE64 (32 bytes) per line. Readable by the "
        "proxy and the pipeline (every Spark executor) only.",
    )
    encryption_keys_env: str = setting(
        "remote.log.storage.encryption.keys.env",
        "TIERPROXY_ENCRYPTION_KEYS",
        "Environment variable holding key-encryption keys as ID:BASE64 entries separated "
        "by commas or newlines (with or instead of the key file); empty for none.",
    )
    upload_rate_bytes_per_second: int = setting(
        "remote.log.storage.upload.rate.limit.bytes.per.second",
        0,
        "Most bytes per second one pipeline task uploads (as stored: after compression); "
        "0 for no limit. See also tiering.upload.max.bytes.per.second for the cycle's total.",
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
    gcs_bucket: str | None = setting(
        "remote.log.storage.gcs.bucket",
        None,
        "Google Cloud Storage bucket holding the segments; required for the gcs backend (it "
        "must exist).",
    )
    gcs_endpoint: str | None = setting(
        "remote.log.storage.gcs.endpoint",
        None,
        "GCS endpoint URL (an emulator such as fake-gcs-server); unset uses "
        "https://storage.googleapis.com.",
    )
    gcs_credentials_path: str | None = setting(
        "remote.log.storage.gcs.credentials.path",
        None,
        "A service-account key or external-account (workload identity federation) JSON "
        "file; unset uses Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, "
        "gcloud's ADC file, then the metadata server (GKE workload identity, GCE).",
    )
    gcs_credentials_anonymous: bool = setting(
        "remote.log.storage.gcs.credentials.anonymous",
        False,
        "Send no credentials (an emulator, or a public bucket). Excludes "
        "remote.log.storage.gcs.credentials.path.",
    )
    azure_container: str | None = setting(
        "remote.log.storage.azure.container",
        None,
        "Azure Blob Storage container holding the segments; required for the azure backend "
        "(it must exist).",
    )
    azure_account_name: str | None = setting(
        "remote.log.storage.azure.account.name",
        None,
        "Storage account name; required for the azure backend.",
    )
    azure_account_key: str | None = setting(
        "remote.log.storage.azure.account.key",
        None,
        "Storage account key (Shared Key); unset uses a SAS token if set, else the Azure "
        "credential chain: a service principal from AZURE_* variables, workload identity "
        "(AZURE_FEDERATED_TOKEN_FILE), managed identity, the Azure CLI.",
        secret=True,
    )
    azure_sas_token: str | None = setting(
        "remote.log.storage.azure.sas.token",
        None,
        "A shared access signature (the query string, without '?') allowing read, write, "
        "delete and list on the container; excludes the account key.",
        secret=True,
    )
    azure_endpoint: str | None = setting(
        "remote.log.storage.azure.endpoint",
        None,
        "Blob service URL (Azurite: http://127.0.0.1:10000/ACCOUNT); unset uses "
        "https://ACCOUNT.blob.core.windows.net.",
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
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"remote.log.storage.backend must be one of {BACKENDS}, not {self.backend!r}"
            )
        if self.backend == "s3" and not self.s3_bucket:
            raise ConfigError("remote.log.storage.s3.bucket is required for the s3 backend")
        if self.backend == "gcs" and not self.gcs_bucket:
            raise ConfigError("remote.log.storage.gcs.bucket is required for the gcs backend")
        if self.backend == "azure" and not (self.azure_container and self.azure_account_name):
            raise ConfigError(
                "remote.log.storage.azure.container and .account.name are required for the "
                "azure backend"
            )
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
        self._check_chunks()
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
        if self.gcs_credentials_anonymous and self.gcs_credentials_path:
            raise ConfigError(
                "remote.log.storage.gcs.credentials.anonymous and .credentials.path exclude "
                "each other"
            )
        if self.azure_account_key and self.azure_sas_token:
            raise ConfigError(
                "remote.log.storage.azure.account.key and .sas.token both name credentials: "
                "set one of them"
            )

    def _check_chunks(self) -> None:
        if self.chunk_size_bytes < MIN_CHUNK_BYTES:
            raise ConfigError(
                f"remote.log.storage.chunk.size.bytes must be at least {MIN_CHUNK_BYTES}"
            )
        if not -7 <= self.compression_level <= 22:
            raise ConfigError("remote.log.storage.compression.level must be in [-7, 22]")
        if self.encryption_enable and not self.encryption_key_id:
            raise ConfigError(
                "remote.log.storage.encryption.enable needs remote.log.storage.encryption.key.id"
            )
        if self.upload_rate_bytes_per_second < 0:
            raise ConfigError("remote.log.storage.upload.rate.limit.bytes.per.second must be >= 0")

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
