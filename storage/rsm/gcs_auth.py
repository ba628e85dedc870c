"""Credentials of the Google Cloud Storage backend: google-auth's standard chain, or none.

``remote.log.storage.gcs.credentials.path`` names a JSON file: a service-account key, or an
external-account configuration (workload identity federation: a token from AWS, Azure, an
OIDC file or URL exchanged at Google's STS). Unset, Application Default Credentials are
used, as every Google SDK does: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's ADC file, then
the metadata server (GKE workload identity, Compute Engine's service account).
``remote.log.storage.gcs.credentials.anonymous`` sends no credentials (emulators).

google-auth refreshes tokens with blocking HTTP calls, so :class:`GcsCredentials` refreshes
in a pool thread, one refresh at a time, when the token is missing or expires within
google-auth's margin; requests in between take the cached token.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig

__all__ = ["SCOPE", "GcsCredentials"]

SCOPE: Final = "https://www.googleapis.com/auth/devstorage.read_write"
_CHAIN: Final = (
    "GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default credentials file, the "
    "metadata server (GKE workload identity, Compute Engine)"
)


class GcsCredentials:
    """Authorization headers for GCS requests."""

    def __init__(self, config: RemoteStorageConfig) -> None:
        self._path = config.gcs_credentials_path
        self._anonymous = config.gcs_credentials_anonymous
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def headers(self) -> tuple[tuple[str, str], ...]:
        """``Authorization: Bearer ...`` with a valid token, or nothing when anonymous.

        :raises RemoteStorageError: (not retriable) when no credentials are found or the
            token cannot be had; retriable when the token endpoint is unreachable.
        """
        if self._anonymous:
            return ()
        credentials = self._credentials
        if credentials is None or not credentials.valid:
            async with self._lock:
                credentials = await self._refreshed()
        return (("Authorization", f"Bearer {credentials.token}"),)

    async def describe(self) -> str:
        """Which source the credentials come from, for the start-up log (never a secret).

        :raises RemoteStorageError: as :meth:`headers`.
        """
        if self._anonymous:
            return "anonymous (remote.log.storage.gcs.credentials.anonymous)"
        async with self._lock:
            credentials = await self._refreshed()
        kind = _kind(type(credentials).__module__)
        who = getattr(credentials, "service_account_email", None)
        where = self._path or "application default credentials"
        return f"{kind} from {where}" + (f" ({who})" if isinstance(who, str) else "")

    async def _refreshed(self) -> Any:
        credentials = self._credentials
        if credentials is not None and credentials.valid:
            return credentials
        try:
            credentials = await asyncio.to_thread(self._load_and_refresh, credentials)
        except RemoteStorageError:
            raise
        except Exception as err:
            raise _credential_error(err, self._path) from err
        self._credentials = credentials
        return credentials

    def _load_and_refresh(self, credentials: Any) -> Any:
        """Blocking: load the chain's credentials (once) and fetch a token."""
        import google.auth  # noqa: PLC0415 (loaded only for the gcs backend)
        from google.auth.transport.requests import Request  # noqa: PLC0415

        if credentials is None:
            if self._path:
                credentials, _project = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
                    self._path, scopes=[SCOPE]
                )
            else:
                credentials, _project = google.auth.default(scopes=[SCOPE])
        credentials.refresh(Request())
        return credentials


_KINDS: Final = (
    ("compute_engine", "metadata server (GKE workload identity, Compute Engine)"),
    ("service_account", "service account"),
    ("impersonated", "impersonated service account"),
    ("identity_pool", "external account (workload identity federation)"),
    ("external_account", "external account (workload identity federation)"),
    ("aws", "external account (workload identity federation from AWS)"),
    ("pluggable", "external account (an executable's token)"),
    ("oauth2.credentials", "gcloud user login"),
)


def _kind(module: str) -> str:
    """What google-auth credentials of ``module`` are, in an operator's words."""
    return next((words for part, words in _KINDS if part in module), module)


def _credential_error(err: Exception, path: str | None) -> RemoteStorageError:
    import google.auth.exceptions  # noqa: PLC0415

    if isinstance(err, google.auth.exceptions.DefaultCredentialsError):
        where = path or f"the chain ({_CHAIN})"
        return RemoteStorageError(
            f"no Google Cloud credentials from {where}: {err}; set "
            "remote.log.storage.gcs.credentials.path, or .credentials.anonymous for an emulator",
            retriable=False,
        )
    retriable = isinstance(err, google.auth.exceptions.TransportError | OSError)
    return RemoteStorageError(f"cannot get a Google Cloud token: {err}", retriable=retriable)
