"""storage.rsm.config and factory: settings with Kafka's names, validation, backend choice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from storage.config import ConfigError, describe, from_settings
from storage.retry import RetryPolicy
from storage.rsm.azure import AzureStore
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import create_remote_storage
from storage.rsm.gcs import GcsStore
from storage.rsm.local import LocalRemoteStorage
from storage.rsm.s3 import S3RemoteStorage
from storage.rsm.segments import MappedSegmentStorage, SegmentStorage


def test_defaults_are_the_local_backend_and_kafkas_retry_settings() -> None:
    config = RemoteStorageConfig()
    assert config.backend == "local"
    assert config.retry_policy() == RetryPolicy(
        backoff_ms=500, backoff_max_ms=30_000, jitter=0.2, max_attempts=5, deadline_ms=30_000
    )


def test_built_from_dotted_settings() -> None:
    config = from_settings(
        RemoteStorageConfig,
        {
            "remote.log.storage.backend": "s3",
            "remote.log.storage.prefix": "prod",
            "remote.log.storage.s3.bucket": "tiered",
            "remote.log.storage.s3.endpoint": "http://127.0.0.1:8333",
            "remote.log.storage.s3.path.style.access": True,
            "remote.log.storage.s3.part.size.bytes": 8 * 1024 * 1024,
            "remote.log.manager.task.retry.backoff.ms": 100,
            "remote.log.manager.task.retry.jitter": 0,
            "remote.log.storage.retry.deadline.ms": 5_000,
            "remote.log.storage.s3.profile": "tiering",
            "remote.log.storage.s3.sse.algorithm": "aws:kms",
            "remote.log.storage.s3.sse.kms.key.id": "arn:aws:kms:eu-west-1:123456789012:key/k",
        },
    )
    assert (config.backend, config.prefix, config.s3_bucket) == ("s3", "prod", "tiered")
    assert config.s3_path_style_access is True
    assert config.s3_part_size_bytes == 8 * 1024 * 1024
    assert config.retry_policy().backoff_ms == 100
    assert config.retry_policy().jitter == 0.0
    assert config.retry_policy().deadline_ms == 5_000
    assert (config.s3_profile, config.s3_access_key_id) == ("tiering", None)
    assert config.s3_sse_algorithm == "aws:kms"
    assert config.s3_sse_kms_key_id == "arn:aws:kms:eu-west-1:123456789012:key/k"


def test_retry_settings_carry_kafkas_names() -> None:
    kafka_names = {info.key: info.kafka for info in describe(RemoteStorageConfig)}
    for key in (
        "remote.log.manager.task.retry.backoff.ms",
        "remote.log.manager.task.retry.backoff.max.ms",
        "remote.log.manager.task.retry.jitter",
    ):
        assert kafka_names[key] == key


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"remote.log.storage.backend": "hdfs"}, "backend"),
        ({"remote.log.storage.backend": "s3"}, "bucket is required"),
        ({"remote.log.storage.s3.part.size.bytes": 1024}, "at least 5242880"),
        ({"remote.log.storage.s3.max.connections": 0}, "max.connections"),
        ({"remote.log.storage.s3.access.key.id": "AKIA"}, "or neither"),
        ({"remote.log.manager.task.retry.jitter": 0.7}, "jitter"),
        ({"remote.log.storage.retry.max.attempts": 0}, "attempts"),
        (
            {"remote.log.storage.s3.read.timeout.ms": "slow"},
            'read.timeout.ms = "slow": expected an integer',
        ),
        (
            {
                "remote.log.storage.s3.profile": "tiering",
                "remote.log.storage.s3.access.key.id": "AKIA",
                "remote.log.storage.s3.secret.access.key": "hunter2",
            },
            "remote.log.storage.s3.profile and remote.log.storage.s3.access.key.id",
        ),
        ({"remote.log.storage.s3.sse.algorithm": "aes256"}, "sse.algorithm must be one of"),
        ({"remote.log.storage.s3.sse.algorithm": "SSE-KMS"}, "sse.algorithm must be one of"),
        (
            {"remote.log.storage.s3.sse.kms.key.id": "alias/tierproxy"},
            "remote.log.storage.s3.sse.kms.key.id needs "
            "remote.log.storage.s3.sse.algorithm = \"aws:kms\", not 'none'",
        ),
        (
            {
                "remote.log.storage.s3.sse.algorithm": "AES256",
                "remote.log.storage.s3.sse.kms.key.id": "alias/tierproxy",
            },
            "sse.kms.key.id needs",
        ),
    ],
)
def test_bad_settings_are_rejected_with_the_key_named(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        from_settings(RemoteStorageConfig, settings)


def test_credentials_and_encryption_default_to_the_chain_and_the_buckets_default() -> None:
    defaults = RemoteStorageConfig()
    assert (defaults.s3_profile, defaults.s3_sse_algorithm, defaults.s3_sse_kms_key_id) == (
        None,
        "none",
        None,
    )
    assert (
        from_settings(
            RemoteStorageConfig, {"remote.log.storage.s3.sse.algorithm": "AES256"}
        ).s3_sse_algorithm
        == "AES256"
    )


def test_the_secret_key_is_declared_secret() -> None:
    """Declared so, it is left out of reprs like every other secret setting."""
    fields = {field.name: field for field in dataclasses.fields(RemoteStorageConfig)}
    assert fields["s3_secret_access_key"].repr is False
    assert fields["s3_access_key_id"].repr is True


def test_repr_hides_the_secret_key() -> None:
    config = RemoteStorageConfig(s3_access_key_id="AKIAEXAMPLE", s3_secret_access_key="hunter2")
    text = repr(config)
    assert "hunter2" not in text
    assert "AKIAEXAMPLE" in text
    assert "s3_secret_access_key='***'" in text


def test_factory_builds_the_local_backend_by_default(tmp_path: Path) -> None:
    storage = create_remote_storage(RemoteStorageConfig(local_dir=str(tmp_path)))
    assert isinstance(storage, MappedSegmentStorage)  # the directory's pages, uncopied
    assert isinstance(storage.store, LocalRemoteStorage)
    assert storage.store.root == tmp_path


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        ({"s3_bucket": "tiered", "s3_endpoint": "http://127.0.0.1:9"}, S3RemoteStorage),
        ({"gcs_bucket": "tiered", "gcs_endpoint": "http://127.0.0.1:9"}, GcsStore),
        ({"azure_container": "tiered", "azure_account_name": "a"}, AzureStore),
    ],
)
async def test_factory_builds_cloud_backends_without_connecting(
    settings: dict[str, str], kind: type
) -> None:
    backend = {S3RemoteStorage: "s3", GcsStore: "gcs", AzureStore: "azure"}[kind]
    flat = {f"remote.log.storage.{name.replace('_', '.')}": v for name, v in settings.items()}
    config = from_settings(RemoteStorageConfig, {"remote.log.storage.backend": backend, **flat})
    storage = create_remote_storage(config)
    assert type(storage) is SegmentStorage
    assert isinstance(storage.store, kind)
    await storage.close()


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"backend": "gcs"}, "remote.log.storage.gcs.bucket is required"),
        ({"backend": "azure", "azure_container": "c"}, "container and .account.name are required"),
        ({"chunk_size_bytes": 100}, "chunk.size.bytes must be at least 1024"),
        ({"encryption_enable": True}, "encryption.enable needs remote.log.storage.encryption.key"),
        ({"compression_level": 30}, "compression.level must be in"),
        ({"gcs_credentials_anonymous": True, "gcs_credentials_path": "k.json"}, "exclude"),
        ({"azure_account_key": "a2V5", "azure_sas_token": "sv=x"}, "set one of them"),
    ],
)
def test_backend_and_encoding_settings_are_checked(
    settings: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        RemoteStorageConfig(**settings)  # type: ignore[arg-type]


def test_account_key_and_sas_are_secrets() -> None:
    for config in (
        RemoteStorageConfig(azure_account_key="c2VjcmV0"),
        RemoteStorageConfig(azure_sas_token="c2VjcmV0"),
    ):
        assert "c2VjcmV0" not in repr(config)


def test_true_is_not_an_integer_setting() -> None:
    """TOML's ``true`` is a Python int; an integer setting must still refuse it."""
    with pytest.raises(ConfigError, match="attempts = true: expected an integer"):
        from_settings(RemoteStorageConfig, {"remote.log.storage.retry.max.attempts": True})
