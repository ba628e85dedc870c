"""What each remote tier tells an operator to check when it cannot be used: its own settings
and conditions, never another backend's words (a local directory has no bucket, endpoint or
credentials)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import pytest

from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage, create_object_store
from storage.rsm.local import LocalRemoteStorage
from storage.startup import announce_remote_tier

Backend = Literal["local", "s3", "gcs", "azure"]
BACKENDS: dict[Backend, dict[str, Any]] = {
    "local": {"local_dir": "/var/lib/tier"},
    "s3": {"s3_bucket": "tiered", "s3_endpoint": "http://127.0.0.1:9"},
    "gcs": {"gcs_bucket": "tiered-gcs", "gcs_credentials_anonymous": True},
    "azure": {"azure_container": "tiered-blobs", "azure_account_name": "acct"},
}
OWN_WORDS: dict[Backend, tuple[str, ...]] = {
    "local": ("remote.log.storage.local.dir", "/var/lib/tier", "directory", "writable", "space"),
    "s3": ("http://127.0.0.1:9", "bucket 'tiered'", "credentials"),
    "gcs": ("remote.log.storage.gcs.endpoint", "bucket 'tiered-gcs'", "credentials"),
    "azure": ("https://acct.blob.core.windows.net", "container 'tiered-blobs'", "credentials"),
}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_each_backend_hints_in_its_own_terms(backend: Backend) -> None:
    store = create_object_store(RemoteStorageConfig(backend=backend, **BACKENDS[backend]))
    try:
        hint = store.hint
    finally:
        await store.close()
    for word in OWN_WORDS[backend]:
        assert word in hint, hint
    if backend == "local":
        for word in ("endpoint", "bucket", "container", "credentials"):
            assert word not in hint, hint
    else:
        assert "local.dir" not in hint and "free space" not in hint, hint


async def test_the_local_check_writes_a_file_and_leaves_none(tmp_path: Path) -> None:
    store = LocalRemoteStorage(tmp_path / "tier")
    await store.check()
    assert list((tmp_path / "tier").iterdir()) == []


async def test_the_local_check_fails_where_no_file_can_be_written(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a regular file")
    with pytest.raises(RemoteStorageError, match=r"cannot write in .*Not a directory"):
        await LocalRemoteStorage(tmp_path / "file" / "tier").check()


async def test_an_unusable_directory_is_reported_with_the_local_hint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("a regular file")
    config = RemoteStorageConfig(backend="local", local_dir=str(tmp_path / "file" / "tier"))
    check = await check_remote_storage(config)
    assert check.hint.startswith("check remote.log.storage.local.dir: ")

    log = logging.getLogger("tierproxy.test.startup")
    with caplog.at_level(logging.INFO, logger=log.name):
        await announce_remote_tier(config, RemoteLogMetadataConfig(), command="tier", log=log)

    warning = caplog.records[-1]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().endswith(
        f"remote reads and copies fail until it can ({check.hint})"
    )
    for word in ("endpoint", "bucket", "credentials"):
        assert word not in warning.getMessage()
