"""storage.rsm.s3 against a real S3 server (SeaweedFS from the harness, or S3_ENDPOINT).

Round trips of all six files, multipart uploads, ranged reads at random boundaries, not-found
semantics, and an outage: SeaweedFS is stopped mid-test and calls must fail with a retriable
error within the retry deadline, then succeed once it is back. Credentials from a profile of
a shared credentials file (the AWS chain, no static keys), refused keys named at start-up, and
SSE-S3 uploads that the store reports encrypted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.session import get_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.embedded import S3Info, SeaweedFS, free_port
from storage.model import (
    IndexType,
    TopicIdPartition,
)
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import StorageCheck, check_remote_storage
from storage.rsm.layout import RemoteLayout
from storage.rsm.s3 import S3RemoteStorage
from storage.startup import announce_remote_tier
from tests.aws_files import AwsFiles, isolate_aws_environment
from tests.fakes.segments import segment_data, segment_metadata

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PART = 5 * MIB
TOPIC = TopicIdPartition(topic_id=uuid.uuid4(), topic="it-rsm", partition=4)
DEADLINE_MS = 3_000


@pytest.fixture
def config(s3: S3Info, s3_bucket: str) -> RemoteStorageConfig:
    return RemoteStorageConfig(
        backend="s3",
        prefix="it",
        s3_bucket=s3_bucket,
        s3_endpoint=s3.endpoint_url,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
        s3_path_style_access=True,
        s3_multipart_threshold_bytes=PART,
        s3_part_size_bytes=PART,
        s3_connect_timeout_ms=1_000,
        s3_read_timeout_ms=2_000,
        retry_backoff_ms=50,
        retry_backoff_max_ms=500,
        retry_max_attempts=100,
        retry_deadline_ms=DEADLINE_MS,
    )


@pytest.fixture
async def storage(config: RemoteStorageConfig) -> AsyncIterator[S3RemoteStorage]:
    rsm = S3RemoteStorage(config)
    yield rsm
    await rsm.close()


async def list_keys(config: RemoteStorageConfig, **extra: Any) -> list[str]:
    async with raw_client(config) as client:
        listing = await client.list_objects_v2(Bucket=config.s3_bucket, **extra)
        return sorted(entry["Key"] for entry in listing.get("Contents", ()))


def raw_client(config: RemoteStorageConfig) -> Any:
    return get_session().create_client(
        "s3",
        endpoint_url=config.s3_endpoint,
        region_name=config.s3_region,
        aws_access_key_id=config.s3_access_key_id,
        aws_secret_access_key=config.s3_secret_access_key,
    )


async def test_copy_fetch_delete_round_trip(
    storage: S3RemoteStorage, config: RemoteStorageConfig
) -> None:
    metadata = segment_metadata(TOPIC, start_offset=1_000)
    data = segment_data(os.urandom(300_000))
    await storage.copy_log_segment(metadata, data)

    assert await list_keys(config) == sorted(RemoteLayout(prefix="it").segment_keys(metadata))
    assert await storage.fetch_log_segment(metadata, 0) == data.log
    for index_type in IndexType:
        assert await storage.fetch_index(metadata, index_type) == data.file_for(index_type)

    assert await storage.log_segment_size(metadata) == len(data.log)  # a HEAD

    await storage.delete_log_segment(metadata)
    assert await list_keys(config) == []
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await storage.fetch_log_segment(metadata, 0)
    log_key = RemoteLayout(prefix="it").log_key(metadata)
    assert caught.value.key == f"s3://{config.s3_bucket}/{log_key}"
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await storage.log_segment_size(metadata)
    assert caught.value.key == f"s3://{config.s3_bucket}/{log_key}"
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.fetch_index(metadata, IndexType.OFFSET)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.delete_log_segment(metadata)


async def test_delete_leaves_other_segments_of_the_partition(
    storage: S3RemoteStorage, config: RemoteStorageConfig
) -> None:
    kept, deleted = segment_metadata(TOPIC, start_offset=0), segment_metadata(TOPIC, start_offset=0)
    await storage.copy_log_segment(kept, segment_data(b"kept"))
    await storage.copy_log_segment(deleted, segment_data(b"deleted"))
    await storage.delete_log_segment(deleted)
    assert await list_keys(config) == sorted(RemoteLayout(prefix="it").segment_keys(kept))
    assert await storage.fetch_log_segment(kept, 0) == b"kept"


async def test_delete_removes_the_leftovers_of_a_partial_copy(
    storage: S3RemoteStorage, config: RemoteStorageConfig
) -> None:
    metadata = segment_metadata(TOPIC)
    leftover = RemoteLayout(prefix="it").index_key(metadata, IndexType.TIMESTAMP)
    async with raw_client(config) as client:
        await client.put_object(Bucket=config.s3_bucket, Key=leftover, Body=b"partial")
    await storage.delete_log_segment(metadata)
    assert await list_keys(config) == []


async def test_large_log_goes_up_in_parts_and_reads_back(
    storage: S3RemoteStorage, config: RemoteStorageConfig
) -> None:
    metadata = segment_metadata(TOPIC)
    log = os.urandom(2 * PART + 12_345)
    await storage.copy_log_segment(metadata, segment_data(log))
    async with raw_client(config) as client:
        head = await client.head_object(
            Bucket=config.s3_bucket, Key=RemoteLayout(prefix="it").log_key(metadata)
        )
    # A multipart object's ETag ends in "-<number of parts>".
    assert head["ETag"].strip('"').endswith("-3")
    assert head["ContentLength"] == len(log)
    assert await storage.fetch_log_segment(metadata, 0) == log
    assert (
        await storage.fetch_log_segment(metadata, PART - 10, PART + 10)
        == log[PART - 10 : PART + 10]
    )
    async with raw_client(config) as client:
        uploads = await client.list_multipart_uploads(Bucket=config.s3_bucket)
    assert uploads.get("Uploads", []) == []


def test_ranged_reads_at_random_boundaries_equal_the_slice(config: RemoteStorageConfig) -> None:
    metadata = segment_metadata(TOPIC)
    log = os.urandom(PART + 54_321)
    with asyncio.Runner() as runner:
        rsm = S3RemoteStorage(config)
        try:
            runner.run(rsm.copy_log_segment(metadata, segment_data(log)))

            @settings(
                max_examples=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            )
            @given(
                start=st.integers(min_value=0, max_value=len(log)),
                length=st.none() | st.integers(min_value=0, max_value=len(log) + 1000),
            )
            def check(start: int, length: int | None) -> None:
                end = None if length is None else start + length
                assert runner.run(rsm.fetch_log_segment(metadata, start, end)) == log[start:end]

            check()
        finally:
            runner.run(rsm.close())


async def test_range_edges(storage: S3RemoteStorage) -> None:
    metadata, empty = segment_metadata(TOPIC), segment_metadata(TOPIC, start_offset=10)
    await storage.copy_log_segment(metadata, segment_data(b"0123456789"))
    await storage.copy_log_segment(empty, segment_data(b""))

    assert await storage.fetch_log_segment(metadata, 7, 1_000) == b"789"
    assert await storage.fetch_log_segment(metadata, 10) == b""
    assert await storage.fetch_log_segment(metadata, 3, 3) == b""
    with pytest.raises(RemoteRangeError, match="beyond its size 10") as caught:
        await storage.fetch_log_segment(metadata, 11)
    assert caught.value.retriable is False
    assert await storage.fetch_log_segment(empty, 0) == b""
    assert await storage.fetch_index(empty, IndexType.TRANSACTION) == b""


async def test_missing_bucket_is_a_permanent_error(config: RemoteStorageConfig) -> None:
    rsm = S3RemoteStorage(dataclasses.replace(config, s3_bucket="no-such-bucket"))
    try:
        with pytest.raises(RemoteStorageError) as caught:
            await rsm.fetch_log_segment(segment_metadata(TOPIC), 0)
        assert caught.value.retriable is False
        assert not isinstance(caught.value, RemoteResourceNotFoundError)
    finally:
        await rsm.close()


async def test_outage_gives_retriable_errors_within_the_deadline_then_recovers(
    storage: S3RemoteStorage, seaweedfs: SeaweedFS
) -> None:
    metadata = segment_metadata(TOPIC)
    data = segment_data(os.urandom(100_000))
    await storage.copy_log_segment(metadata, data)

    seaweedfs.stop()
    try:
        outcomes = await asyncio.gather(
            timed(storage.fetch_log_segment(metadata, 0, 100)),
            timed(storage.fetch_index(metadata, IndexType.OFFSET)),
            timed(storage.copy_log_segment(segment_metadata(TOPIC), data)),
            timed(storage.delete_log_segment(metadata)),
        )
        for error, elapsed in outcomes:
            assert isinstance(error, RemoteStorageError), error
            assert error.retriable is True
            assert elapsed < DEADLINE_MS / 1000 + 1.0
    finally:
        seaweedfs.start()

    assert await storage.fetch_log_segment(metadata, 0) == data.log
    await storage.delete_log_segment(metadata)


async def timed(call: Awaitable[object]) -> tuple[BaseException | None, float]:
    """The error ``call`` raised (None if it succeeded) and the seconds it took."""
    started = time.monotonic()
    try:
        await call
    except Exception as err:
        return err, time.monotonic() - started
    return None, time.monotonic() - started


async def test_the_start_up_check_passes_on_a_usable_bucket(config: RemoteStorageConfig) -> None:
    check = await check_remote_storage(config)
    assert check == StorageCheck(
        location=f"s3://{config.s3_bucket}/it/ at {config.s3_endpoint}",
        credentials="static keys (remote.log.storage.s3.access.key.id)",
        problem=None,
        hint=f"check the endpoint ({config.s3_endpoint}), that bucket {config.s3_bucket!r} "
        "exists, and that the credentials may list and write it",
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"s3_bucket": "no-such-bucket"}, "NoSuchBucket"),
        ({"s3_endpoint": f"http://127.0.0.1:{free_port()}"}, "cannot list"),
    ],
)
async def test_the_start_up_check_names_what_is_wrong(
    config: RemoteStorageConfig, change: dict[str, Any], said: str
) -> None:
    """Once, without the configured retries: start-up must not wait out a dead endpoint."""
    problem = (await check_remote_storage(dataclasses.replace(config, **change))).problem
    assert problem is not None and said in problem, problem


async def test_the_start_up_check_of_a_local_directory(tmp_path: Path) -> None:
    config = RemoteStorageConfig(backend="local", local_dir=str(tmp_path / "tier"))
    check = await check_remote_storage(config)
    assert (check.location, check.credentials, check.problem) == (
        f"directory {tmp_path / 'tier'}",
        None,
        None,
    )
    assert list((tmp_path / "tier").iterdir()) == []  # its probe file is gone
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    check = await check_remote_storage(
        RemoteStorageConfig(backend="local", local_dir=str(blocked / "tier"))
    )
    assert check.problem is not None and "cannot write in" in check.problem
    assert "Not a directory" in check.problem
    assert "remote.log.storage.local.dir" in check.hint and "bucket" not in check.hint


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AwsFiles:
    return isolate_aws_environment(monkeypatch, tmp_path)


def with_profile(config: RemoteStorageConfig, profile: str) -> RemoteStorageConfig:
    """``config`` with credentials from ``profile`` of the shared files instead of keys."""
    return dataclasses.replace(
        config, s3_access_key_id=None, s3_secret_access_key=None, s3_profile=profile
    )


async def test_credentials_from_a_profile_of_the_shared_credentials_file(
    aws: AwsFiles, s3: S3Info, config: RemoteStorageConfig
) -> None:
    """No static keys: the AWS chain reads the profile from AWS_SHARED_CREDENTIALS_FILE."""
    aws.add_profile("tiering", access_key=s3.access_key, secret_key=s3.secret_key)
    profiled = with_profile(config, "tiering")
    check = await check_remote_storage(profiled)
    assert check.problem is None
    assert check.credentials == "shared-credentials-file, profile 'tiering'"

    rsm = S3RemoteStorage(profiled)
    try:
        metadata = segment_metadata(TOPIC)
        data = segment_data(os.urandom(100_000))
        await rsm.copy_log_segment(metadata, data)
        assert await rsm.fetch_log_segment(metadata, 1_000, 2_000) == data.log[1_000:2_000]
        assert await rsm.fetch_index(metadata, IndexType.TIMESTAMP) == data.time_index
        await rsm.delete_log_segment(metadata)
    finally:
        await rsm.close()
    assert await list_keys(config) == []


@pytest.mark.parametrize(
    ("keys", "refusal"),
    [
        (("AKIAUNKNOWN", "whatever"), "InvalidAccessKeyId"),
        (("", "wrong-secret"), "SignatureDoesNotMatch"),
    ],
    ids=["unknown-key", "wrong-secret"],
)
async def test_a_profile_with_refused_keys_is_a_warning_at_start(
    aws: AwsFiles,
    s3: S3Info,
    config: RemoteStorageConfig,
    caplog: pytest.LogCaptureFixture,
    keys: tuple[str, str],
    refusal: str,
) -> None:
    """SeaweedFS runs with identities and refuses keys it does not know, as S3 does."""
    access_key, secret_key = keys
    aws.add_profile("wrong", access_key=access_key or s3.access_key, secret_key=secret_key)
    log = logging.getLogger("tierproxy.test.startup")
    with caplog.at_level(logging.INFO, logger=log.name):
        await announce_remote_tier(
            with_profile(config, "wrong"), RemoteLogMetadataConfig(), command="tier", log=log
        )
    info, warning = caplog.records
    assert "credentials from shared-credentials-file, profile 'wrong'" in info.getMessage()
    assert warning.levelno == logging.WARNING
    assert refusal in warning.getMessage()
    assert f"s3://{config.s3_bucket}/it/" in warning.getMessage()
    assert secret_key not in caplog.text


async def test_sse_s3_uploads_are_stored_encrypted(config: RemoteStorageConfig) -> None:
    """Single PUTs and multipart uploads alike; ranged reads decrypt transparently."""
    encrypted = dataclasses.replace(config, s3_sse_algorithm="AES256")
    rsm = S3RemoteStorage(encrypted)
    metadata = segment_metadata(TOPIC)
    log = os.urandom(PART + 4_321)  # above the threshold: a multipart upload
    data = segment_data(log)
    layout = RemoteLayout(prefix="it")
    try:
        await rsm.copy_log_segment(metadata, data)
        async with raw_client(config) as client:
            for key in (layout.log_key(metadata), layout.index_key(metadata, IndexType.OFFSET)):
                head = await client.head_object(Bucket=config.s3_bucket, Key=key)
                assert head.get("ServerSideEncryption") == "AES256", key
        assert await rsm.fetch_log_segment(metadata, PART - 5, PART + 5) == log[PART - 5 : PART + 5]
        assert await rsm.fetch_index(metadata, IndexType.OFFSET) == data.offset_index
    finally:
        await rsm.close()
    plain = segment_metadata(TOPIC)
    unencrypted = S3RemoteStorage(config)
    try:
        await unencrypted.copy_log_segment(plain, segment_data(b"plain"))
    finally:
        await unencrypted.close()
    async with raw_client(config) as client:
        head = await client.head_object(Bucket=config.s3_bucket, Key=layout.log_key(plain))
    assert "ServerSideEncryption" not in head  # the store does not encrypt unasked
