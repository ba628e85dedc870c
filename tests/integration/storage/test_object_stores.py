"""Every object store against its real server: a directory, SeaweedFS (S3), fake-gcs-server
(Google Cloud Storage) and Azurite (Azure Blob Storage), started by the harness.

The same contract for each (storage.rsm.objects): whole and ranged reads at the edges, sizes,
missing objects, prefix deletes, the start-up check, ranged reads received in place; then the
segment layer over each store in every mode (as is, compressed, encrypted, both), and the
credentials each cloud backend takes (S3 keys, a GCS emulator without credentials, Azure's
Shared Key and a SAS token).
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy.embedded import S3Info
from proxy.embedded.object_stores import AzureInfo, GcsInfo
from storage.config import from_settings
from storage.model import (
    IndexType,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from storage.rsm.azure_auth import service_sas
from storage.rsm.base import RemoteRangeError, RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import check_remote_storage, create_object_store, create_remote_storage
from storage.rsm.objects import ObjectStore
from tests.fakes.segments import segment_data, segment_metadata

pytestmark = pytest.mark.integration

BACKENDS = ("local", "s3", "gcs", "azure")
MODES = ("plain", "compressed", "encrypted", "both")
KEY = base64.b64encode(os.urandom(32)).decode()
TOPIC = TopicIdPartition(topic_id=uuid.uuid4(), topic="it-stores", partition=1)
BODY = os.urandom(300_000)


@pytest.fixture(params=BACKENDS)
def backend_settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    """The ``remote.log.storage.*`` settings of a fresh bucket, container or directory."""
    backend: str = request.param
    settings: dict[str, object] = {"remote.log.storage.prefix": "it"}
    if backend == "local":
        settings["remote.log.storage.local.dir"] = str(tmp_path / "remote")
    elif backend == "s3":
        s3: S3Info = request.getfixturevalue("s3")
        settings |= {
            "remote.log.storage.backend": "s3",
            "remote.log.storage.s3.bucket": request.getfixturevalue("s3_bucket"),
            "remote.log.storage.s3.endpoint": s3.endpoint_url,
            "remote.log.storage.s3.region": s3.region,
            "remote.log.storage.s3.access.key.id": s3.access_key,
            "remote.log.storage.s3.secret.access.key": s3.secret_key,
            "remote.log.storage.s3.path.style.access": True,
        }
    elif backend == "gcs":
        gcs: GcsInfo = request.getfixturevalue("fake_gcs")
        settings |= gcs.settings(request.getfixturevalue("gcs_bucket"))
    else:
        azure: AzureInfo = request.getfixturevalue("azurite")
        settings |= azure.settings(request.getfixturevalue("azure_container"))
    return settings | {
        "remote.log.storage.retry.max.attempts": 3,
        "remote.log.storage.retry.deadline.ms": 10_000,
        "remote.log.manager.task.retry.backoff.ms": 50,
    }


@pytest.fixture
async def store(backend_settings: dict[str, object]) -> AsyncIterator[ObjectStore]:
    store = create_object_store(from_settings(RemoteStorageConfig, backend_settings))
    yield store
    await store.close()


async def test_objects_round_trip_with_ranges_at_the_edges(store: ObjectStore) -> None:
    key = "it/a/00000000000000000000-x.log"
    await store.put_object(key, memoryview(BODY))
    assert await store.get_object(key) == BODY
    assert await store.object_size(key) == len(BODY)
    for start, end in [(0, 1), (1000, 200_000), (299_999, 300_000), (250_000, 400_000)]:
        assert bytes(await store.get_object_range(key, start, end)) == BODY[start:end]
    assert await store.get_object_range(key, len(BODY), len(BODY) + 10) == b""
    with pytest.raises(RemoteRangeError):
        await store.get_object_range(key, len(BODY) + 1, len(BODY) + 10)
    await store.put_object(key, b"replaced")
    assert await store.get_object(key) == b"replaced"


async def test_missing_objects_are_not_found_and_prefix_deletes_count(store: ObjectStore) -> None:
    for what in (
        store.get_object("it/none"),
        store.get_object_range("it/none", 0, 10),
        store.object_size("it/none"),
    ):
        with pytest.raises(RemoteResourceNotFoundError):
            await what
    for name in ("seg.log", "seg.index", "seg.manifest", "other.log"):
        await store.put_object(f"it/p/{name}", b"x" * 10)
    assert await store.delete_prefix("it/p/seg.") == 3
    assert await store.delete_prefix("it/p/seg.") == 0
    assert await store.get_object("it/p/other.log") == b"x" * 10
    await store.check()


async def test_ranged_reads_are_received_in_place(
    store: ObjectStore, backend_settings: dict[str, object]
) -> None:
    """The cloud stores' ranged reads come from the lean GET (a buffer of their own), not
    through their HTTP client's body (``bytes``)."""
    await store.put_object("it/r", BODY)
    data = await store.get_object_range("it/r", 10, 100_000)
    expected = bytes if backend_settings.get("remote.log.storage.backend") is None else bytearray
    assert type(data) is expected
    assert data == BODY[10:100_000]


def metadata(size: int) -> RemoteLogSegmentMetadata:
    return segment_metadata(TOPIC, size=size)


@pytest.mark.parametrize("mode", MODES)
async def test_segments_in_every_mode(
    backend_settings: dict[str, object], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IT_KEYS", f"k1:{KEY}")
    settings = backend_settings | {
        "remote.log.storage.chunk.size.bytes": 64 * 1024,
        "remote.log.storage.compression.enable": mode in ("compressed", "both"),
        "remote.log.storage.encryption.enable": mode in ("encrypted", "both"),
        "remote.log.storage.encryption.key.id": "k1",
        "remote.log.storage.encryption.keys.env": "IT_KEYS",
    }
    rsm = create_remote_storage(from_settings(RemoteStorageConfig, settings))
    log = (os.urandom(1000) * 500)[:450_000]
    data = segment_data(log)
    meta = metadata(len(log))
    try:
        await rsm.copy_log_segment(meta, data)
        for start, end in [(0, 65536), (65536, 131072), (100, 400_000), (393_216, 450_000)]:
            assert bytes(await rsm.fetch_log_segment(meta, start, end)) == log[start:end]
        for index_type in IndexType:
            assert await rsm.fetch_index(meta, index_type) == data.file_for(index_type)
        await rsm.delete_log_segment(meta)
        with pytest.raises(RemoteResourceNotFoundError):
            await rsm.delete_log_segment(meta)
    finally:
        await rsm.close()


async def test_the_start_up_check_finds_a_missing_bucket(
    backend_settings: dict[str, object],
) -> None:
    settings = dict(backend_settings)
    for name in (
        "remote.log.storage.s3.bucket",
        "remote.log.storage.gcs.bucket",
        "remote.log.storage.azure.container",
    ):
        if name in settings:
            settings[name] = "no-such-bucket-" + uuid.uuid4().hex[:8]
    config = from_settings(RemoteStorageConfig, settings)
    check = await check_remote_storage(config)
    if config.backend == "local":
        assert check.problem is None
        return
    assert check.problem is not None, check
    if config.backend == "gcs":
        return  # fake-gcs-server answers a plain "Not Found" where GCS names the bucket
    # Not "missing object": the bucket itself, a configuration error.
    store = create_object_store(config)
    try:
        with pytest.raises(RemoteStorageError) as caught:
            await store.get_object("it/x")
        assert not isinstance(caught.value, RemoteResourceNotFoundError)
    finally:
        await store.close()


async def test_azure_takes_a_sas_token_instead_of_the_key(
    azurite: AzureInfo, azure_container: str
) -> None:
    sas = service_sas(
        account=azurite.account,
        key=base64.b64decode(azurite.key),
        container=azure_container,
        blob=None,
        permissions="rwdl",
        now=time.time(),
    )
    settings = azurite.settings(azure_container)
    del settings["remote.log.storage.azure.account.key"]
    settings["remote.log.storage.azure.sas.token"] = sas
    config = from_settings(RemoteStorageConfig, settings)
    assert (await check_remote_storage(config)).credentials == (
        "SAS token (remote.log.storage.azure.sas.token)"
    )
    store = create_object_store(config)
    try:
        await store.put_object("sas/object", BODY)
        assert bytes(await store.get_object_range("sas/object", 5, 50_000)) == BODY[5:50_000]
        assert await store.delete_prefix("sas/") == 1
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.update({"remote.log.storage.azure.account.key": KEY}), "403"),
        (lambda s: s.pop("remote.log.storage.azure.account.key"), "no Azure credentials"),
    ],
)
async def test_azure_refused_or_missing_credentials_are_said_at_start(
    azurite: AzureInfo,
    azure_container: str,
    change: Callable[[dict[str, object]], object],
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", "/nonexistent")  # no Azure CLI login to fall back on
    settings: dict[str, object] = dict(azurite.settings(azure_container))
    change(settings)
    check = await check_remote_storage(from_settings(RemoteStorageConfig, settings))
    assert check.problem is not None and problem in check.problem, check
