"""Azure Blob Storage as an object store, over its REST API (:mod:`storage.rsm.http_objects`).

- Put: one ``Put Blob`` of a block blob per object (Azure takes up to 5,000 MiB in one
  request; a failed upload is retried whole, with the configured policy).
- Read: a ranged ``Get Blob`` read in place by the lean ranged GET (through a read SAS, or
  a bearer token); any other answer goes again through aiohttp, where 416 tells an empty
  tail (start at the size) from a start beyond it.
- Delete: ``List Blobs`` of the prefix, then ``Delete Blob`` per blob, a few at a time.

Blob names are URL-encoded with ``/`` kept, as the service shows them.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

import aiohttp

from storage.config import ConfigError
from storage.retry import SYSTEM_CLOCK, Clock
from storage.rsm.azure_auth import AzureAuth
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.http_objects import HttpFailure, HttpObjects, range_answer
from storage.rsm.s3_ranged_get import SignedGet

__all__ = ["AzureStore"]

_MISSING_CONTAINER: Final = frozenset({"ContainerNotFound", "ResourceNotFound"})


class AzureStore:
    """An :class:`~storage.rsm.objects.ObjectStore` over one Azure Blob Storage container.

    :raises ConfigError: when ``config`` names no container or account.
    """

    def __init__(self, config: RemoteStorageConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if not (config.azure_container and config.azure_account_name):
            raise ConfigError(
                "remote.log.storage.azure.container and .account.name are required for the "
                "azure backend"
            )
        self._container = config.azure_container
        account = config.azure_account_name
        endpoint = config.azure_endpoint or f"https://{account}.blob.core.windows.net"
        self._base = f"{endpoint.rstrip('/')}/{self._container}"
        self._prefix = config.prefix.strip("/")
        self._auth = AzureAuth(config)
        self._http = HttpObjects(
            scheme="azure", policy=config.retry_policy(), presign=self._presign, clock=clock
        )

    @property
    def location(self) -> str:
        prefix = f"{self._prefix}/" if self._prefix else ""
        return f"{self._base}/{prefix}"

    @property
    def hint(self) -> str:
        return (
            f"check the endpoint ({self._base.rpartition('/')[0]}), that container "
            f"{self._container!r} exists, and that the credentials (account key, SAS token or "
            "Azure's credential chain) may list and write it"
        )

    async def describe_credentials(self) -> str:
        return await self._auth.describe()

    async def check(self) -> None:
        await self._list(self._prefix, limit=1)

    async def put_object(self, key: str, body: bytes | memoryview) -> None:
        async def put() -> None:
            headers = {
                "x-ms-blob-type": "BlockBlob",
                "Content-Length": str(len(body)),
                "Content-Type": "application/octet-stream",
            }
            url = await self._auth.sign("PUT", self._url(key), headers)
            async with self._http.session().put(url, data=body, headers=headers) as answer:
                await _succeeded(answer)

        await self._http.call("write", self._where(key), put)

    async def get_object(self, key: str) -> bytes:
        async def get() -> bytes:
            headers: dict[str, str] = {}
            url = await self._auth.sign("GET", self._url(key), headers)
            async with self._http.session().get(url, headers=headers) as answer:
                await _succeeded(answer)
                return await answer.read()

        return await self._http.call("read", self._where(key), get)

    async def get_object_range(self, key: str, start: int, end: int) -> bytes | bytearray:
        async def fallback(byte_range: str) -> bytes | bytearray:
            headers = {"Range": byte_range}
            url = await self._auth.sign("GET", self._url(key), headers)
            async with self._http.session().get(url, headers=headers) as answer:
                return await range_answer(
                    answer,
                    key=key,
                    start=start,
                    end=end,
                    succeeded=_succeeded,
                    size=lambda: self.object_size(key),
                )

        return await self._http.get_range(
            self._container, key, start, end, where=self._where(key), fallback=fallback
        )

    async def object_size(self, key: str) -> int:
        async def head() -> int:
            headers: dict[str, str] = {}
            url = await self._auth.sign("HEAD", self._url(key), headers)
            async with self._http.session().head(url, headers=headers) as answer:
                await _succeeded(answer)
                return int(answer.headers["Content-Length"])

        return await self._http.call("stat", self._where(key), head)

    async def delete_prefix(self, prefix: str) -> int:
        async def delete(key: str) -> None:
            headers: dict[str, str] = {}
            url = await self._auth.sign("DELETE", self._url(key), headers)
            async with self._http.session().delete(url, headers=headers) as answer:
                if answer.status != 404:  # gone already: a retried delete
                    await _succeeded(answer)

        return await self._http.delete_each(await self._list(prefix), self._where, delete)

    def recycle(self, data: bytes | bytearray) -> None:
        self._http.recycle(data)

    async def close(self) -> None:
        await self._http.close()
        await self._auth.close()

    async def _list(self, prefix: str, *, limit: int | None = None) -> list[str]:
        keys: list[str] = []
        marker = ""
        while True:
            params = {"restype": "container", "comp": "list", "prefix": prefix}
            if limit is not None:
                params["maxresults"] = str(limit)
            if marker:
                params["marker"] = marker

            async def page(params: dict[str, str] = params) -> bytes:
                headers: dict[str, str] = {}
                url = await self._auth.sign("GET", f"{self._base}?{urlencode(params)}", headers)
                async with self._http.session().get(url, headers=headers) as answer:
                    await _succeeded(answer)
                    return await answer.read()

            listing = ElementTree.fromstring(
                await self._http.call("list", self._where(prefix), page)
            )
            keys += [name.text or "" for name in listing.iterfind("./Blobs/Blob/Name")]
            marker = listing.findtext("NextMarker") or ""
            if not marker or limit is not None:
                return keys

    async def _presign(self, container: str, key: str) -> SignedGet:
        url, headers = await self._auth.signed_get(self._url(key), container, key)
        return SignedGet(url=url, headers=headers)

    def _url(self, key: str) -> str:
        return f"{self._base}/{quote(key, safe='/')}"

    def _where(self, key: str) -> str:
        return f"azure://{self._container}/{key}"


async def _succeeded(answer: aiohttp.ClientResponse) -> None:
    """Return for a 2xx answer; raise its :class:`HttpFailure` otherwise."""
    if answer.status < 300:
        return
    code = answer.headers.get("x-ms-error-code", "")
    text = (await answer.read()).decode("utf-8", "replace")
    raise HttpFailure(
        status=answer.status,
        code=code,
        text=text,
        container_missing=answer.status == 404 and code in _MISSING_CONTAINER,
    )
