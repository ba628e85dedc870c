"""storage.rsm.s3_credentials: which link of the AWS chain answers, and what is said when none
does. botocore reads only the files each test writes (tests/aws_files.py); the instance
metadata service is off. The round trip with a profile runs against SeaweedFS in
tests/integration/storage/test_rsm_s3.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage
from storage.rsm.s3 import S3RemoteStorage
from storage.rsm.s3_credentials import CREDENTIAL_CHAIN, credentials_source, new_session
from storage.startup import announce_remote_tier
from tests.aws_files import AwsFiles, isolate_aws_environment

SECRET = "s3cr3t-never-logged"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AwsFiles:
    return isolate_aws_environment(monkeypatch, tmp_path)


def s3_config(**settings: Any) -> RemoteStorageConfig:
    return RemoteStorageConfig(
        backend="s3", s3_bucket="tiered", s3_endpoint="http://127.0.0.1:9", **settings
    )


async def source_of(config: RemoteStorageConfig) -> str:
    return await credentials_source(new_session(config), config)


async def test_static_keys_are_named_as_such(aws: AwsFiles) -> None:
    config = s3_config(s3_access_key_id="AKIASTATIC", s3_secret_access_key=SECRET)
    assert await source_of(config) == "static keys (remote.log.storage.s3.access.key.id)"


async def test_keys_in_the_environment(aws: AwsFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    assert await source_of(s3_config()) == "env"


async def test_a_configured_profile_of_the_shared_credentials_file(aws: AwsFiles) -> None:
    aws.add_profile("tiering", access_key="AKIAPROFILE", secret_key=SECRET)
    source = await source_of(s3_config(s3_profile="tiering"))
    assert source == "shared-credentials-file, profile 'tiering'"


async def test_a_configured_profile_wins_over_the_environment(
    aws: AwsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``aws --profile``: a named profile skips the environment's keys."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    aws.add_profile("tiering", access_key="AKIAPROFILE", secret_key=SECRET)
    config = s3_config(s3_profile="tiering")
    session = new_session(config)
    assert await credentials_source(session, config) == "shared-credentials-file, profile 'tiering'"
    assert (await session.get_credentials()).access_key == "AKIAPROFILE"


async def test_aws_profile_from_the_environment(
    aws: AwsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws.add_profile("from-env", access_key="AKIAPROFILE", secret_key=SECRET)
    monkeypatch.setenv("AWS_PROFILE", "from-env")
    assert await source_of(s3_config()) == "shared-credentials-file, profile 'from-env'"


async def test_web_identity_is_a_link_of_the_chain(
    aws: AwsFiles, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found without contacting STS: botocore assumes the role on first use of the keys."""
    token = tmp_path / "token"
    token.write_text("eyJ.token.sig")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/tierproxy")
    assert await source_of(s3_config(s3_region="eu-west-1")) == "assume-role-with-web-identity"


async def test_no_credentials_anywhere_names_the_chain(aws: AwsFiles) -> None:
    with pytest.raises(RemoteStorageError, match="no AWS credentials found") as caught:
        await source_of(s3_config())
    assert CREDENTIAL_CHAIN in str(caught.value)
    assert "remote.log.storage.s3.access.key.id" in str(caught.value)
    assert caught.value.retriable is False


async def test_a_missing_profile_is_named(aws: AwsFiles) -> None:
    aws.add_profile("other", access_key="AKIAOTHER", secret_key=SECRET)
    with pytest.raises(RemoteStorageError, match="profile 'nosuch'"):
        await source_of(s3_config(s3_profile="nosuch"))


async def test_the_start_up_check_warns_without_contacting_the_store(
    aws: AwsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """No credentials: the check stops before any request (the endpoint is a closed port)."""
    check = await check_remote_storage(s3_config())
    assert check.credentials is None
    assert check.problem is not None and CREDENTIAL_CHAIN in check.problem

    log = logging.getLogger("tierproxy.test.startup")
    with caplog.at_level(logging.INFO, logger=log.name):
        await announce_remote_tier(s3_config(), RemoteLogMetadataConfig(), command="serve", log=log)
    info, warning = caplog.records
    assert "credentials from nowhere" in info.getMessage()
    assert warning.levelno == logging.WARNING
    assert "no AWS credentials found" in warning.getMessage()


async def test_the_start_up_log_names_the_source_but_no_secret(
    aws: AwsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    aws.add_profile("tiering", access_key="AKIAPROFILE", secret_key=SECRET)
    config = s3_config(
        s3_profile="tiering",
        s3_sse_algorithm="aws:kms",
        s3_sse_kms_key_id="alias/tierproxy",
        s3_connect_timeout_ms=200,
    )
    log = logging.getLogger("tierproxy.test.startup")
    with caplog.at_level(logging.INFO, logger=log.name):
        await announce_remote_tier(config, RemoteLogMetadataConfig(), command="serve", log=log)
    info = caplog.records[0].getMessage()
    assert "credentials from shared-credentials-file, profile 'tiering'" in info
    assert "encryption aws:kms with key alias/tierproxy" in info
    assert SECRET not in caplog.text
    assert "AKIAPROFILE" not in caplog.text


async def test_a_client_that_cannot_be_created_is_a_storage_error(
    aws: AwsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Static keys sign, but the region is still looked up in AWS_PROFILE's profile."""
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    config = s3_config(s3_access_key_id="AKIASTATIC", s3_secret_access_key=SECRET)
    storage = S3RemoteStorage(config)
    try:
        with pytest.raises(RemoteStorageError, match="nosuch") as caught:
            await storage.check()
        assert caught.value.retriable is False
    finally:
        await storage.close()
