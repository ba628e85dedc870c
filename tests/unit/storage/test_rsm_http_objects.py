"""storage.rsm.http_objects' sorting of failures, Azure's Shared Key and SAS signing, and the
manifest's refusal of what is not one (the servers themselves are in the integration tests)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import aiohttp
import pytest

from storage.model import IndexType
from storage.rsm.azure_auth import API_VERSION, service_sas, shared_key_signature
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.http_objects import HttpFailure, translate_http_error
from storage.rsm.manifest import (
    Chunk,
    ManifestError,
    SegmentManifest,
    StoredFile,
    decode_manifest,
    encode_manifest,
)

KEY = b"k" * 64


@pytest.mark.parametrize(
    ("failure", "kind", "retriable"),
    [
        (HttpFailure(status=404, code="BlobNotFound", text=""), RemoteResourceNotFoundError, False),
        (
            HttpFailure(status=404, code="ContainerNotFound", text="", container_missing=True),
            RemoteStorageError,
            False,
        ),
        (HttpFailure(status=403, code="AuthorizationFailure", text=""), RemoteStorageError, False),
        (HttpFailure(status=429, code="", text=""), RemoteStorageError, True),
        (HttpFailure(status=503, code="ServerBusy", text=""), RemoteStorageError, True),
        (HttpFailure(status=408, code="", text=""), RemoteStorageError, True),
        (aiohttp.ClientConnectionError("reset"), RemoteStorageError, True),
        (TimeoutError(), RemoteStorageError, True),
        (ValueError("ours"), RemoteStorageError, False),
    ],
)
def test_failures_are_sorted(failure: Exception, kind: type, retriable: bool) -> None:
    err = translate_http_error(failure, "read", "gs://b/k")
    assert type(err) is kind
    assert err.retriable is retriable
    assert "gs://b/k" in str(err)


def test_shared_key_signs_the_canonical_request() -> None:
    headers = {
        "x-ms-date": "Sat, 28 Nov 2026 12:00:00 GMT",
        "x-ms-version": API_VERSION,
        "Range": "bytes=0-9",
        "Content-Length": "0",
    }
    url = "http://127.0.0.1:10000/acct/container/a%2Fb?comp=list&restype=container"
    signed = shared_key_signature(account="acct", key=KEY, method="GET", url=url, headers=headers)
    expected_text = (
        "GET\n\n\n\n\n\n\n\n\n\n\nbytes=0-9\n"
        f"x-ms-date:Sat, 28 Nov 2026 12:00:00 GMT\nx-ms-version:{API_VERSION}\n"
        "/acct/acct/container/a%2Fb\ncomp:list\nrestype:container"
    )
    digest = hmac.new(KEY, expected_text.encode(), hashlib.sha256).digest()
    assert signed == f"SharedKey acct:{base64.b64encode(digest).decode()}"


def test_a_sas_names_its_resource_permissions_and_window() -> None:
    blob = dict(
        pair.split("=", 1)
        for pair in service_sas(
            account="a", key=KEY, container="c", blob="x/y", permissions="r", now=0.0
        ).split("&")
    )
    assert (blob["sr"], blob["sp"], blob["sv"]) == ("b", "r", API_VERSION)
    assert blob["se"] == "1970-01-01T00%3A15%3A00Z"
    container = service_sas(
        account="a", key=KEY, container="c", blob=None, permissions="rwdl", now=0.0
    )
    assert "sr=c" in container and "sp=rwdl" in container


def test_manifests_round_trip_and_refuse_what_is_not_one() -> None:
    file = StoredFile(
        original_size=10,
        encoded=True,
        chunks=(
            Chunk(stored_size=4, crc32c=1, compressed=True),
            Chunk(stored_size=6, crc32c=2, compressed=False),
        ),
    )
    manifest = SegmentManifest(
        chunk_bytes=5, log=file, indexes={IndexType.OFFSET: file}, compression="zstd"
    )
    raw = encode_manifest(manifest)
    assert decode_manifest(raw) == manifest
    assert decode_manifest(raw).log.starts == (0, 4, 10)
    for bad, problem in [
        (b"not a manifest", "not a tierproxy segment manifest"),
        (raw[:-1], "checksum"),
        (raw.replace(b'"version":1', b'"version":2'), "checksum"),
    ]:
        with pytest.raises(ManifestError, match=problem):
            decode_manifest(bad)
