"""Google Cloud Storage as an object store, over its JSON API (:mod:`storage.rsm.http_objects`).

- Put: one ``uploadType=media`` upload per object (GCS takes objects of up to 5 TiB in one
  request; a failed upload is retried whole, with the configured policy).
- Read: a ranged ``alt=media`` GET read in place by the lean ranged GET, with the bearer
  token in a header; any other answer goes again through aiohttp, where 416 tells an empty
  tail (start at the size) from a start beyond it.
- Delete: a listing of the prefix, then a ``DELETE`` per object, a few at a time.

Object names are URL-encoded whole (``/`` included), as the JSON API wants them.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import quote

import aiohttp

from storage.config import ConfigError
from storage.retry import SYSTEM_CLOCK, Clock
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.gcs_auth import GcsCredentials
from storage.rsm.http_objects import HttpFailure, HttpObjects, range_answer
from storage.rsm.s3_ranged_get import SignedGet

__all__ = ["DEFAULT_ENDPOINT", "GcsStore"]

DEFAULT_ENDPOINT: Final = "https://storage.googleapis.com"


class GcsStore:
    """An :class:`~storage.rsm.objects.ObjectStore` over one GCS bucket.

    :raises ConfigError: when ``config`` names no bucket.
    """

    def __init__(self, config: RemoteStorageConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if not config.gcs_bucket:
            raise ConfigError("remote.log.storage.gcs.bucket is required for the gcs backend")
        self._bucket = config.gcs_bucket
        self._endpoint = (config.gcs_endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self._prefix = config.prefix.strip("/")
        self._credentials = GcsCredentials(config)
        self._http = HttpObjects(
            scheme="gs", policy=config.retry_policy(), presign=self._presign, clock=clock
        )

    @property
    def location(self) -> str:
        prefix = f"{self._prefix}/" if self._prefix else ""
        return f"gs://{self._bucket}/{prefix} at {self._endpoint}"

    @property
    def hint(self) -> str:
        return (
            f"check remote.log.storage.gcs.endpoint ({self._endpoint}), that bucket "
            f"{self._bucket!r} exists, and that the credentials may list and write it"
        )

    async def describe_credentials(self) -> str:
        return await self._credentials.describe()

    async def check(self) -> None:
        await self._list(self._prefix, limit=1)

    async def put_object(self, key: str, body: bytes | memoryview) -> None:
        url = f"{self._endpoint}/upload/storage/v1/b/{self._bucket}/o"
        params = {"uploadType": "media", "name": key}

        async def put() -> None:
            headers = dict(await self._credentials.headers())
            headers["Content-Type"] = "application/octet-stream"
            async with self._http.session().post(
                url, params=params, data=body, headers=headers
            ) as answer:
                await _succeeded(answer)

        await self._http.call("write", self._where(key), put)

    async def get_object(self, key: str) -> bytes:
        async def get() -> bytes:
            headers = dict(await self._credentials.headers())
            async with self._http.session().get(self._media_url(key), headers=headers) as answer:
                await _succeeded(answer)
                return await answer.read()

        return await self._http.call("read", self._where(key), get)

    async def get_object_range(self, key: str, start: int, end: int) -> bytes | bytearray:
        async def fallback(byte_range: str) -> bytes | bytearray:
            headers = dict(await self._credentials.headers())
            headers["Range"] = byte_range
            async with self._http.session().get(self._media_url(key), headers=headers) as answer:
                return await range_answer(
                    answer,
                    key=key,
                    start=start,
                    end=end,
                    succeeded=_succeeded,
                    size=lambda: self.object_size(key),
                )

        return await self._http.get_range(
            self._bucket, key, start, end, where=self._where(key), fallback=fallback
        )

    async def object_size(self, key: str) -> int:
        async def stat() -> int:
            headers = dict(await self._credentials.headers())
            async with self._http.session().get(self._metadata_url(key), headers=headers) as answer:
                await _succeeded(answer)
                return int(json.loads(await answer.read())["size"])

        return await self._http.call("stat", self._where(key), stat)

    async def delete_prefix(self, prefix: str) -> int:
        async def delete(key: str) -> None:
            headers = dict(await self._credentials.headers())
            async with self._http.session().delete(
                self._metadata_url(key), headers=headers
            ) as answer:
                if answer.status != 404:  # gone already: a retried delete
                    await _succeeded(answer)

        return await self._http.delete_each(await self._list(prefix), self._where, delete)

    def recycle(self, data: bytes | bytearray) -> None:
        self._http.recycle(data)

    async def close(self) -> None:
        await self._http.close()

    async def _list(self, prefix: str, *, limit: int | None = None) -> list[str]:
        url = f"{self._endpoint}/storage/v1/b/{self._bucket}/o"
        keys: list[str] = []
        token: str | None = None
        while True:
            params = {"prefix": prefix, "fields": "items(name),nextPageToken"}
            if limit is not None:
                params["maxResults"] = str(limit)
            if token is not None:
                params["pageToken"] = token

            async def page(params: dict[str, str] = params) -> dict[str, Any]:
                headers = dict(await self._credentials.headers())
                async with self._http.session().get(url, params=params, headers=headers) as answer:
                    await _succeeded(answer)
                    listing: dict[str, Any] = json.loads(await answer.read())
                    return listing

            listing = await self._http.call("list", self._where(prefix), page)
            keys += [item["name"] for item in listing.get("items", ())]
            token = listing.get("nextPageToken")
            if token is None or limit is not None:
                return keys

    async def _presign(self, bucket: str, key: str) -> SignedGet:
        return SignedGet(url=self._media_url(key), headers=await self._credentials.headers())

    def _media_url(self, key: str) -> str:
        return self._metadata_url(key) + "?alt=media"

    def _metadata_url(self, key: str) -> str:
        return f"{self._endpoint}/storage/v1/b/{self._bucket}/o/{quote(key, safe='')}"

    def _where(self, key: str) -> str:
        return f"gs://{self._bucket}/{key}"


async def _succeeded(answer: aiohttp.ClientResponse) -> None:
    """Return for a 2xx answer; raise its :class:`HttpFailure` otherwise."""
    if answer.status < 300:
        return
    text = (await answer.read()).decode("utf-8", "replace")
    reason = ""
    try:
        error = json.loads(text)["error"]
        text = str(error.get("message", text))
        reason = str((error.get("errors") or [{}])[0].get("reason", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    missing_bucket = answer.status == 404 and "bucket" in text.lower()
    raise HttpFailure(
        status=answer.status, code=reason, text=text, container_missing=missing_bucket
    )
