"""Credentials of the Azure Blob Storage backend: a Shared Key, a SAS, or Azure's credential chain.

- **Shared Key** (``remote.log.storage.azure.account.key``): every request is signed with
  HMAC-SHA256 of its canonical form (:func:`shared_key_signature`, Azure's "Authorize with
  Shared Key"); ranged reads use a service SAS for the blob signed with the same key
  (:func:`service_sas`, read only, valid 15 minutes), so that one URL serves many GETs.
- **SAS** (``remote.log.storage.azure.sas.token``): appended to every URL.
- **Azure's chain** (neither set): ``azure.identity.aio.DefaultAzureCredential``, as every
  Azure SDK: a service principal from ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID`` with
  ``AZURE_CLIENT_SECRET`` or ``AZURE_CLIENT_CERTIFICATE_PATH``, workload identity (AKS:
  ``AZURE_FEDERATED_TOKEN_FILE``), managed identity, then the Azure CLI's login. Its tokens
  (scope ``https://storage.azure.com/.default``) go in an ``Authorization: Bearer`` header
  and are cached by azure-identity until shortly before they expire.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from email.utils import formatdate
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlsplit

from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig

__all__ = ["API_VERSION", "AzureAuth", "service_sas", "shared_key_signature"]

API_VERSION: Final = "2021-08-06"
"""``x-ms-version`` of every request: supported by Azure and by Azurite."""
SCOPE: Final = "https://storage.azure.com/.default"
_SAS_SECONDS: Final = 15 * 60
"""Validity of a read SAS: three times the lean GET's reuse of a URL (5 minutes)."""
_SAS_SKEW_SECONDS: Final = 5 * 60
"""A SAS starts this much in the past: the service's clock may be behind ours."""
_SIGNED_HEADERS: Final = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)


def shared_key_signature(
    *, account: str, key: bytes, method: str, url: str, headers: Mapping[str, str]
) -> str:
    """The ``Authorization`` header value of a request signed with the account key.

    ``headers`` are the request's headers as sent; ``Content-Length`` of 0 is signed as an
    empty string (API versions from 2015-02-21 on).
    """
    lower = {name.lower(): value.strip() for name, value in headers.items()}
    fields = [method.upper()]
    for name in _SIGNED_HEADERS:
        value = lower.get(name, "")
        fields.append("" if name == "content-length" and value == "0" else value)
    canonical_headers = "".join(
        f"{name}:{lower[name]}\n" for name in sorted(lower) if name.startswith("x-ms-")
    )
    parts = urlsplit(url)
    resource = f"/{account}{parts.path or '/'}"
    query: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query.setdefault(name.lower(), []).append(value)
    resource += "".join(f"\n{name}:{','.join(sorted(query[name]))}" for name in sorted(query))
    text = "\n".join(fields) + "\n" + canonical_headers + resource
    digest = hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode('ascii')}"


def service_sas(
    *,
    account: str,
    key: bytes,
    container: str,
    blob: str | None,
    permissions: str,
    now: float,
    seconds: float = _SAS_SECONDS,
) -> str:
    """A service SAS (a query string) for a blob, or the whole container when ``blob`` is
    ``None``, with ``permissions`` (``r``, ``rwdl``...) for ``seconds`` from ``now``."""
    start = _iso(now - _SAS_SKEW_SECONDS)
    expiry = _iso(now + seconds)
    resource = f"/blob/{account}/{container}" + ("" if blob is None else f"/{blob}")
    kind = "c" if blob is None else "b"
    fields = [
        permissions,
        start,
        expiry,
        resource,
        "",  # signed identifier
        "",  # IP range
        "https,http",
        API_VERSION,
        kind,
        "",  # snapshot time
        "",  # encryption scope
        "",  # rscc
        "",  # rscd
        "",  # rsce
        "",  # rscl
        "",  # rsct
    ]
    digest = hmac.new(key, "\n".join(fields).encode("utf-8"), hashlib.sha256).digest()
    query = {
        "sv": API_VERSION,
        "st": start,
        "se": expiry,
        "sr": kind,
        "sp": permissions,
        "spr": "https,http",
        "sig": base64.b64encode(digest).decode("ascii"),
    }
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in query.items())


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class AzureAuth:
    """How each request is authorised, per the settings (see the module docstring)."""

    def __init__(self, config: RemoteStorageConfig) -> None:
        assert config.azure_account_name is not None
        self.account = config.azure_account_name
        self._key = base64.b64decode(config.azure_account_key) if config.azure_account_key else None
        self._sas = (config.azure_sas_token or "").lstrip("?") or None
        self._credential: Any = None

    @property
    def mode(self) -> str:
        if self._key is not None:
            return "shared key (remote.log.storage.azure.account.key)"
        if self._sas is not None:
            return "SAS token (remote.log.storage.azure.sas.token)"
        return "the Azure credential chain (azure-identity DefaultAzureCredential)"

    async def sign(self, method: str, url: str, headers: dict[str, str]) -> str:
        """Add the authorisation to ``headers`` (and the date and version); the URL to use.

        :raises RemoteStorageError: when the chain has no credentials (not retriable).
        """
        headers["x-ms-date"] = formatdate(usegmt=True)
        headers["x-ms-version"] = API_VERSION
        if self._key is not None:
            headers["Authorization"] = shared_key_signature(
                account=self.account, key=self._key, method=method, url=url, headers=headers
            )
            return url
        if self._sas is not None:
            return url + ("&" if "?" in url else "?") + self._sas
        headers["Authorization"] = f"Bearer {await self._token()}"
        return url

    async def signed_get(
        self, url: str, container: str, blob: str
    ) -> tuple[str, tuple[tuple[str, str], ...]]:
        """A URL and headers that GET ``url`` (any range) for the next 15 minutes."""
        if self._key is not None:
            sas = service_sas(
                account=self.account,
                key=self._key,
                container=container,
                blob=blob,
                permissions="r",
                now=time.time(),
            )
            return f"{url}?{sas}", (("x-ms-version", API_VERSION),)
        if self._sas is not None:
            return f"{url}?{self._sas}", (("x-ms-version", API_VERSION),)
        token = await self._token()
        return url, (("Authorization", f"Bearer {token}"), ("x-ms-version", API_VERSION))

    async def describe(self) -> str:
        """Which credentials sign the requests (never their values).

        :raises RemoteStorageError: when the chain has none.
        """
        if self._key is None and self._sas is None:
            await self._token()
        return self.mode

    async def close(self) -> None:
        if self._credential is not None:
            await self._credential.close()

    async def _token(self) -> str:
        from azure.core.exceptions import ClientAuthenticationError  # noqa: PLC0415
        from azure.identity.aio import DefaultAzureCredential  # noqa: PLC0415

        if self._credential is None:
            self._credential = DefaultAzureCredential()
        try:
            token = await self._credential.get_token(SCOPE)
        except ClientAuthenticationError as err:
            raise RemoteStorageError(
                f"no Azure credentials from the credential chain: {err.message}; set "
                "remote.log.storage.azure.account.key or .sas.token, or configure one of "
                "its sources (AZURE_CLIENT_ID with a secret, certificate or federated token "
                "file, a managed identity, az login)",
                retriable=False,
            ) from err
        return str(token.token)
